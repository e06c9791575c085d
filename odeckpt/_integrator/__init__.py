"""_integrator."""
