"""Backends carry out placements: local processes, Slurm. Each is small; policy lives in core."""
