"""profiler."""
