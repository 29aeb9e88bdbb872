"""``python -m halide_buffer demo``: lazy copies, watched one step at a time.

A buffer on the default OpenCL device is written there by a tiny kernel, read from NumPy
twice, written on the host, and read on the device again. After every step the demo prints
where the current data is and each copy that step made, so the rule is plain to see: data
moves only when a reader on the other side needs it, and only once. On a device that shares the
host's memory (PoCL on the CPU, integrated GPUs) the device copy is the host memory itself
(zero-copy): the same steps hand it over with a map, and no byte moves. ``--no-zero-copy`` runs
the steps on the same device with zero-copy off, copying.
"""

from __future__ import annotations

import numpy as np

from . import Buffer, Transfers, opencl

KERNELS = """
__kernel void ramp(__global float *out, float scale) {
    size_t i = get_global_id(0);
    out[i] = scale * (float)i;
}
__kernel void total(__global const float *in, __global float *out, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += in[i];
    out[0] = s;
}
"""


def where(b: Buffer) -> str:
    """Where the current data is, in words."""
    if not b.has_device_allocation():
        return "host only"
    if b.device_dirty():
        return "device (host copy stale)"
    if b.host_dirty():
        return "host (device copy stale)"
    return "host and device (both current)"


def moved(before: Transfers, after: Transfers) -> str:
    """The copies between two snapshots, in words."""
    d = after - before
    parts = []
    if d.to_device:
        parts.append(f"{d.to_device} copy host->device ({d.to_device_bytes} B)")
    if d.to_host:
        parts.append(f"{d.to_host} copy device->host ({d.to_host_bytes} B)")
    if d.maps_to_device:
        parts.append(f"{d.maps_to_device} map host->device (0 B)")
    if d.maps_to_host:
        parts.append(f"{d.maps_to_host} map device->host (0 B)")
    return ", ".join(parts) or "no copy"


def run(zero_copy: bool | None = None) -> int:
    cl = opencl._import_pyopencl("demo.run")
    device = opencl.device(zero_copy=zero_copy)
    mode = "zero-copy: the device copy is the host memory" if device.zero_copy else "copying"
    print(f"device: {device.name} on {device.platform} ({mode})\n")
    b = Buffer((8,), "float32")
    last = b.transfers

    def step(what: str) -> None:
        nonlocal last
        now = b.transfers
        print(f"{what:<58} data: {where(b):<32} moved: {moved(last, now)}")
        last = now

    step("b = hb.Buffer((8,), 'float32')")
    array = opencl.as_array(b, device=device)  # the device lease: uploads the host data, then device dirty
    step("array = hb.opencl.as_array(b)")
    program = cl.Program(array.context, KERNELS).build()
    program.ramp(array.queue, b.shape, None, array.data, np.float32(0.5))
    step("kernel ramp(array) writes on the device")
    first = np.asarray(b)
    step(f"np.asarray(b) -> {first.tolist()}")
    np.asarray(b)
    step("np.asarray(b) again")
    b.numpy(writable=True)[:] += 1
    step("b.numpy(writable=True)[:] += 1")
    readable = opencl.as_array(b, writable=False)
    result = cl.array.empty(readable.queue, (1,), np.float32)
    program.total(readable.queue, (1,), None, readable.data, result.data, np.int32(b.size))
    step(f"kernel total(b) on the device -> {result.get()[0]:g}")
    np.asarray(b)
    step("np.asarray(b)")
    b.device_free()
    step("b.device_free()")
    print(f"\ntotal: {b.transfers}")
    return 0
