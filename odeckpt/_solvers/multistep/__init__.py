"""Multistep methods: solvers whose state carries past points, so a checkpoint stores it
(`state_rebuildable` false) and a jump of the vector field restarts them.

- `leapfrog_midpoint`: `LeapfrogMidpoint`, the two-step leapfrog/midpoint method.
"""
