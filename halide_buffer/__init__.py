"""halide_buffer: a Halide runtime buffer for Python.

A :class:`Buffer` owns or wraps host memory, describes it with a ``halide_buffer_t`` that
Halide AOT pipelines accept, tracks whether the host or the device copy is current, and hands
its data to NumPy (and, through DLPack and the CUDA array interface, to other frameworks) for
every dtype of the table, bfloat16 and the float8 family included.
"""

import os as _os

from . import _processes, aot, cuda, opencl  # _processes: what multiprocessing sends
from ._core import (Buffer, CudaDevice, Device, DeviceError, DType, OpenCLDevice, PipelineError,
                    ReadOnlyError, Transfers, dtype, dtypes, from_dlpack, transfers)
from ._version import __version__


def get_include() -> str:
    """The folder of the C sources shipped for pipeline libraries: ``halide_buffer_cuda.c``, which
    a Halide CUDA pipeline called without ``hb.aot`` links so that its runtime uses the primary
    context (see docs/cuda.md, section "Halide CUDA pipelines")."""
    return _os.path.join(_os.path.dirname(__file__), "include")


def __getattr__(name: str):
    # hb.dask and hb.torch need optional extras (dask; PyTorch): imported on first use, so that
    # `import halide_buffer` imports neither.
    if name in ("dask", "torch"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'halide_buffer' has no attribute {name!r}")


class Runtime:
    """Halide's C++ namespace name for the buffer: ``hb.Runtime.Buffer is hb.Buffer``."""

    Buffer = Buffer


__all__ = ["Buffer", "CudaDevice", "DType", "Device", "DeviceError", "OpenCLDevice", "PipelineError",
           "ReadOnlyError", "Runtime", "Transfers", "aot", "cuda", "dtype", "dtypes", "from_dlpack", "get_include",
           "opencl", "transfers", "__version__"]
