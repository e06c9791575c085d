"""_controllers."""
