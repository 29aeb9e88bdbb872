"""The version of halide_buffer: defined here and nowhere else."""

__version__ = "0.1.0"
