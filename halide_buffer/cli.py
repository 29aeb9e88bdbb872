"""The command line: ``python -m halide_buffer [info|demo]``.

``info`` (the default) prints the version, the dtype table with the protocols that carry each
dtype (found by trying them now, not read from a list), and the devices and peer libraries
available on this machine. ``demo`` shows lazy copies between the host and the default OpenCL
device, step by step.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from typing import Callable, Sequence

import numpy as np

from . import Buffer, DeviceError, DType, __version__, _pocl_cpu, cuda, dtypes, from_dlpack, opencl

PEERS = ("numpy", "ml_dtypes", "torch", "jax", "halide", "pyopencl", "pocl-binary-distribution", "cupy")


def _works(probe: Callable[[], bool]) -> bool:
    try:
        return bool(probe())
    except Exception:
        return False


def protocols(t: DType) -> dict[str, bool]:
    """Which exports carry dtype ``t`` exactly, tried on a live one-element buffer."""
    b = Buffer((1,), t)
    return {
        "buffer protocol": _works(lambda: memoryview(b).itemsize == t.itemsize),
        "__array__": _works(lambda: np.asarray(b).dtype == t.numpy),
        "from_host": _works(lambda: Buffer.from_host(np.zeros(1, t.numpy)).dtype == t),
        "Halide": _works(lambda: b._get_raw_halide_buffer_t() != 0),
        "DLPack": _works(lambda: from_dlpack(b.__dlpack__(max_version=(1, 1))).dtype == t),
    }


def dtype_table() -> list[str]:
    rows = [(t, protocols(t)) for t in dtypes()]
    columns = list(rows[0][1])
    head = f"{'dtype':<20}{'size':>5}  {'Halide type':<12}{'DLPack':<12}{'PEP3118':<8}"
    lines = [head + "".join(f"{c:<17}" for c in columns)]
    for t, carried in rows:
        halide = "-" if t.halide_type is None else "{},{},{}".format(*t.halide_type)
        line = (f"{t.name:<20}{t.itemsize:>5}  {halide:<12}{'{},{},{}'.format(*t.dlpack_type):<12}"
                f"{t.format or '-':<8}")
        lines.append(line + "".join(f"{'yes' if carried[c] else 'no':<17}" for c in columns))
    return lines


def peers() -> list[str]:
    lines = []
    for name in PEERS:
        try:
            lines.append(f"  {name:<26}{importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"  {name:<26}not installed")
    return lines


def no_device(kind: str, e: DeviceError) -> list[str]:
    """Why there is no device of a kind: the whole reason, its later lines (the loaders tried)
    indented under the first."""
    first, *rest = str(e).splitlines()
    return [f"  {kind}: none ({e.name}): {first}"] + [f"    {line.strip()}" for line in rest]


def opencl_devices() -> list[str]:
    """The default OpenCL device as halide_buffer opens it, and the loader it came from."""
    try:
        d = opencl.device()
    except DeviceError as e:
        return no_device("OpenCL", e)
    lines = [f"  OpenCL: {d.name} on {d.platform} (default device; loader {opencl.loaded_library()})"]
    if _pocl_cpu.applied():
        lines.append(f"    PoCL compiles for {_pocl_cpu.applied()} (its LLVM does not know this CPU, "
                     f"or {_pocl_cpu.ENV_NAME} names it; docs/devices.md)")
    return lines


def cuda_devices() -> list[str]:
    """The default CUDA device, or why there is none."""
    try:
        d = cuda.device()
    except DeviceError as e:
        return no_device("CUDA", e)
    major, minor = d.compute_capability
    return [f"  CUDA: {d.name}, compute capability {major}.{minor} (device 0; driver {cuda.loaded_library()})"]


def info() -> int:
    print(f"halide_buffer {__version__}\n")
    print("dtypes (exports tried on a live buffer):")
    print("\n".join("  " + line for line in dtype_table()))
    print("\ndevices:")
    print("\n".join(opencl_devices() + cuda_devices()))
    print("\npeer libraries:")
    print("\n".join(peers()))
    return 0


DESCRIPTION = "Report what halide_buffer finds on this machine, or show its lazy host/device copies."
EPILOG = ("info (the default) prints the version, the dtype table with the exports that carry each "
          "dtype (tried live), the OpenCL and CUDA devices and the peer libraries. demo runs two "
          "tiny kernels on the default OpenCL device and prints each copy between host and device "
          "(each map, on a device sharing the host's memory; --no-zero-copy: copies there too); "
          "it needs pyopencl: pip install 'halide_buffer[opencl]'.")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m halide_buffer", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("command", nargs="?", default="info", choices=["info", "demo"],
                        help="info: version, dtype/protocol table, devices and peers (default); "
                             "demo: lazy host/device copies on the default OpenCL device")
    parser.add_argument("--no-zero-copy", action="store_true",
                        help="demo: copy even where the device shares the host's memory")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(zero_copy=False if args.no_zero_copy else None)
    return info()


def demo(zero_copy: bool | None = None) -> int:
    """The demo, or, without pyopencl or an OpenCL device, why not (on stderr, exit status 1)."""
    from . import demo as steps

    try:
        return steps.run(zero_copy)
    except (ModuleNotFoundError, DeviceError) as e:
        if isinstance(e, ModuleNotFoundError) and e.name != "pyopencl":
            raise
        print(f"python -m halide_buffer demo: {e}", file=sys.stderr)
        return 1
