"""The frame loop every image-processing user writes, counted: call a pipeline, refill its input
on the host, read the result; how many frames of N hold another frame's result, per host write
path, with the previous result kept alive or dropped. On the default device (PoCL: zero-copy,
the host memory is the device copy), where a host write must wait for the kernel still reading
the memory (docs/devices.md, "One memory, two users"). A count of wrong results, not a timing: 0
is the only right answer.

    python benchmarks/frame_loop.py                 # 1,000 frames per row, 2048 x 2048 uint8
    python benchmarks/frame_loop.py --frames 100 --size 512
"""

import argparse
import io
import pickle
import tempfile
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import test_support

pipelines = test_support("pipelines")


def writers():
    import torch

    def pickled(b, v):
        buffers = []
        data = pickle.dumps(b, protocol=5, buffer_callback=buffers.append)
        pickle.loads(data, buffers=buffers).numpy(writable=True)[...] = v

    return {
        "numpy(writable=True)": lambda b, v: b.numpy(writable=True).__setitem__(..., v),
        "buffer protocol (readinto)": lambda b, v: io.BytesIO(bytes([v]) * b.nbytes).readinto(b),
        "torch.from_dlpack(b).fill_": lambda b, v: torch.from_dlpack(b).fill_(v),
        "np.from_dlpack(b)[...] =": lambda b, v: np.from_dlpack(b).__setitem__(..., v),
        "b[...] = array": lambda b, v: b.__setitem__(..., np.full(b.shape, v, np.uint8)),
        "pickle protocol 5, written": pickled,
        "to_halide().fill": lambda b, v: b.to_halide().fill(v),
    }


def wrong_frames(p, write, frames, shape, keep):
    b = hb.Buffer(shape, "uint8")
    kept, wrong = [], 0
    for frame in range(frames):
        value = frame % 200
        b.fill(value)
        out = p(b, hb.Buffer(shape, "uint8"))
        write(b, (value + 100) % 200)  # the next frame's input
        r = np.asarray(out)
        wrong += int(not (r == value + 10).all())
        kept = [out] if keep else []
    del kept
    return wrong


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--size", type=int, default=2048)
    args = parser.parse_args()
    device = hb.opencl.device()
    with tempfile.TemporaryDirectory() as folder:
        p = pipelines.compile_and_load(Path(folder), pipelines.c_compiler(), *pipelines.brighter_opencl_func(),
                                       "frame_loop_brighter", target=pipelines.OPENCL_TARGET)
        shape = (args.size, args.size)
        print(f"device: {device!r}, zero_copy={device.zero_copy}; {args.frames} frames of {shape} uint8 each")
        print(f"{'host write path':32} {'result kept':>12} {'result dropped':>15}")
        for name, write in writers().items():
            counts = [wrong_frames(p, write, args.frames, shape, keep) for keep in (True, False)]
            print(f"{name:32} {counts[0]:>12} {counts[1]:>15}")


if __name__ == "__main__":
    main()
