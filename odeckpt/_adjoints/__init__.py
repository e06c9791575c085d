"""_adjoints."""
