"""Planning a run: compute-optimal sizing, memory per device, scaling-law fits, and their CLI."""
