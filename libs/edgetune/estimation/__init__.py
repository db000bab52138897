"""estimation."""
