"""continuous."""
