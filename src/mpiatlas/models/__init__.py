"""Performance models fitted to benchmark samples."""
