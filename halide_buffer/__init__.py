"""halide_buffer: a Halide runtime buffer for Python.

A :class:`Buffer` owns or wraps host memory, describes it with a ``halide_buffer_t`` that
Halide AOT pipelines accept, tracks whether the host or the device copy is current, and hands
its data to NumPy (and, through DLPack and the CUDA array interface, to other frameworks) for
every dtype of the table, bfloat16 and the float8 family included.
"""

from . import aot, opencl
from ._core import (Buffer, Device, DeviceError, DType, PipelineError, Transfers, dtype, dtypes,
                    from_dlpack, transfers)
from ._version import __version__


class Runtime:
    """Halide's C++ namespace name for the buffer: ``hb.Runtime.Buffer is hb.Buffer``."""

    Buffer = Buffer


__all__ = ["Buffer", "DType", "Device", "DeviceError", "PipelineError", "Runtime", "Transfers",
           "aot", "dtype", "dtypes", "from_dlpack", "opencl", "transfers", "__version__"]
