"""Development tools for odeckpt, outside the package (not installed with it)."""
