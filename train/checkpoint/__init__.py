"""Checkpoints on disk: atomic DCP saves and resume, export of one consolidated model, init_from."""
