"""powermodes."""
