"""Apache TVM FFI: what calling a Halide AOT pipeline through ``hb.aot`` costs beside calling the
same kind of kernel through TVM FFI, on the same torch tensors and ndarrays, and what a call on
Buffers costs beside the least a binding could cost (the FASTCALL limit).

Run:  python benchmarks/bench_tvm_ffi.py [--number N] [--repeat R] [--json PATH]

It needs the ``halide`` wheel, a C and a C++ compiler, PyTorch and TVM FFI (``pip install
'halide_buffer[bench]'``; the test install has them all); without one of them it exits with
status 2, saying which.

Ours is ``p``, ``hb.aot.load`` of the host pipeline ``out(x, y) = in(x, y) + 1`` on float32
(``bench_pipelines.py``'s ``add_one_func``, no scalar, its rows vectorized 8 wide as the C++
compiler vectorizes the peer's loop), entry point ``p(in, out)``. The peer is
``f``, the function ``add_one(TensorView in, TensorView out)`` of ``peer_tvm_ffi_add.cpp``
(``out = in + 1`` on contiguous float32 2-D CPU tensors, exported with TVM FFI's export macro),
compiled when the script runs against TVM FFI's headers and library (``tvm_ffi.libinfo``) and
loaded with ``tvm_ffi.load_module``. Both write into the output they are given. At each size,
float32 (4, 4) and (16, 16):

* ``p(t_in, t_out)`` against ``f(t_in, t_out)`` on the same CPU torch tensors. Both take a tensor
  through PyTorch's DLPack C exchange API (``type(t).__dlpack_c_exchange_api__``). The targets:
  <= 1.0x TVM FFI, and <= 1.2x our own call on ndarrays of the same size.
* ``p(a_in, a_out)`` against ``f(a_in, a_out)`` on the same ndarrays. TVM FFI takes an ndarray as
  it is: NumPy has no exchange API, so each argument goes through its ``__dlpack__()`` (a legacy
  capsule made and consumed per argument per call). The target: <= 1.0x TVM FFI.
* ``p(b_in, b_out)`` on Buffers against ``f(x_in, x_out)`` on TVM FFI's own ``tvm_ffi.Tensor``
  objects (made once, ``tvm_ffi.from_dlpack`` of a tensor): each side on its native object
  (informational).
* ``q(b_in, 3, b_out)``, ``hb.aot`` of ``out(x, y) = in(x, y) + k`` (float32, an int32 scalar:
  ``bench_calls.py``'s pipeline) on Buffers, against the FASTCALL limit of the same call
  (``bench_aot_calls.py``'s ``peer_fastcall_aot.cpp``: one ``METH_FASTCALL`` function that took
  the two ``halide_buffer_t`` addresses once, at bind time). That file releases the GIL around
  the pipeline; compiled with ``-DKEEP_GIL`` it keeps it. Both are measured: the target is
  <= 2.0x the limit that keeps the GIL (as hb.aot does for a call this small on the host: letting
  other threads go on would cost more than the call); the one that releases it is
  ``bench_calls.py``'s ``aot_limit`` peer.
  The limit's Buffers are others than ours (binding takes their ``halide_buffer_t``).
* Informational: ``f`` with ``release_gil = False`` on the tensors (TVM FFI releases the GIL
  around every call by default), and ``id(t)``, the floor of the timing loop.

Every case is timed with ``timeit`` as ``repeat`` rounds of ``number`` calls, the rounds of all
cases interleaved, the best round giving the per-call cost; the paired column is the median of
per-round ratios (if it disagrees with the ratio of the bests, the run was disturbed: a ``note:``
line says so). Before timing, each case is run once on inputs of its own and must write
``in + 1`` (``in + 3``) into its output; a failed check is a ``WARNING:`` line and exit status 1.

``bench_calls.py --instructions`` counts the float32 (4, 4) tensor and ndarray rows in
instructions, with this file's build functions.

Ratios are measured in the same run on the same machine; absolute times are not comparable
across machines, and nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_aot_calls import LIMIT_MODULE, LIMIT_SOURCE, bind_limit
from bench_common import (Case, cases_json, environment_line, finish, noisy_timings, paired, ratio, run_cases,
                          timing_arguments)
from bench_pipelines import (TARGET, BuildError, add_k_func, add_one_func, build_module, build_pipeline,
                             cxx_compiler, import_from, run_tool)

HERE = Path(__file__).resolve().parent
PEER_SOURCE = HERE / "peer_tvm_ffi_add.cpp"
PEER_FUNCTION = "add_one"
ADD_ONE = "hb_bench_add_one_f32"   # p(in, out)
ADD_K = "hb_bench_add_k"           # q(in, k, out), bench_calls.py's
K = 3
SIZES = ((4, 4), (16, 16))
TVM_FFI_VERSION = "0.1.15"         # the version the bench extra pins

TENSOR_TARGET = 1.0     # p(t, to) / f(t, to)
TENSOR_VS_NDARRAY = 1.2  # p(t, to) / p(a, ao)
NDARRAY_TARGET = 1.0    # p(a, ao) / f(a, ao)
LIMIT_GOAL = 2.0        # q(b, 3, bo) / the FASTCALL limit that keeps the GIL


# --------------------------------------------------------------------------------------------
# The peers and pipelines, built when the script runs (bench_calls.py builds with these too)
# --------------------------------------------------------------------------------------------


def build_tvm_peer(workdir: Path):
    """Compiles peer_tvm_ffi_add.cpp into a shared library against TVM FFI's headers and library.
    Returns (path, None), or (None, why not): no tvm_ffi, no C++ compiler, a failed build."""
    try:
        from tvm_ffi import libinfo
    except ImportError as e:
        return None, f"TVM FFI is not installed (pip install 'halide_buffer[bench]'): {e}"
    cxx = cxx_compiler()
    if not cxx:
        return None, "no C++ compiler (g++, c++, clang++ or $CXX) for peer_tvm_ffi_add.cpp"
    try:
        includes = libinfo.include_paths()
        lib_dir = str(Path(libinfo.find_libtvm_ffi()).parent)
    except Exception as e:  # noqa: BLE001 - a broken install means "peer unavailable"
        return None, f"TVM FFI's headers or library not found: {type(e).__name__}: {e}"
    target = workdir / "peer_tvm_ffi_add.so"
    # -O3 -DNDEBUG: the optimisation level of every compiled peer. The library is found where
    # tvm_ffi keeps it (rpath), though importing tvm_ffi has loaded it already.
    try:
        run_tool([*cxx, "-O3", "-DNDEBUG", "-std=c++17", "-shared", "-fPIC", *(f"-I{i}" for i in includes),
                  str(PEER_SOURCE), "-o", str(target), f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}", "-ltvm_ffi"],
                 f"compiling {PEER_SOURCE.name}")
    except BuildError as e:
        return None, str(e)
    return target, None


def load_tvm_peer(path, release_gil=True):
    """The peer's add_one as a tvm_ffi.Function; `release_gil` False gives one that keeps the GIL
    around the kernel (a Function object of its own: the module's attribute is shared)."""
    import tvm_ffi

    f = tvm_ffi.load_module(str(path)).get_function(PEER_FUNCTION)
    f.release_gil = release_gil
    return f


def add_one_f32(hl, name, gpu):
    """add_one_func on float32, its rows vectorized 8 wide (AVX2's float32 lanes; a shorter row
    guarded), as the C++ compiler vectorizes the peer's loop: at (16, 16) the call is measured, not
    a scalar loop beside a vector one."""
    func, args = add_one_func(hl, name, gpu, hl.Float(32))
    func.vectorize(func.args()[0], 8, hl.TailStrategy.GuardWithIf)
    return func, args


def build_add_one(hl, workdir: Path):
    """out(x, y) = in(x, y) + 1 on float32 as a shared library for hb.aot (BuildError if not)."""
    return build_pipeline(hl, workdir, ADD_ONE, False, False, add_one_f32).library


def build_add_k(hl, workdir: Path):
    """out(x, y) = in(x, y) + k on float32, bench_calls.py's pipeline (BuildError if not)."""
    return build_pipeline(hl, workdir, ADD_K, False, False,
                          lambda hl, name, gpu: add_k_func(hl, name, gpu, hl.Float(32))).library


def build_limits(hl, workdir: Path, copies):
    """peer_fastcall_aot.cpp compiled twice, as it is (the GIL released around the pipeline) and
    with -DKEEP_GIL, each copied `copies` times: a module keeps one binding, so each size binds a
    copy of its own (a copy is a library of its own). Returns ({"release": [modules], "keep":
    [modules]}, None) or (None, why not)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    modules = {}
    for gil, flags in (("release", ()), ("keep", ("-DKEEP_GIL",))):
        folder = workdir / f"limit_{gil}"
        folder.mkdir(exist_ok=True)
        try:
            first = build_module(hl, folder, LIMIT_MODULE, [LIMIT_SOURCE], f"compiling {LIMIT_SOURCE.name} "
                                 f"{' '.join(flags)}".strip(), flags)
        except BuildError as e:
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
            return None, f"importing the compiled {LIMIT_MODULE} failed: {type(e).__name__}: {e}"
        modules[gil] = [first]
        for i in range(1, copies):
            copy = workdir / f"limit_{gil}_{i}"
            copy.mkdir(exist_ok=True)
            shutil.copy(first.__file__, copy / (LIMIT_MODULE + suffix))
            modules[gil].append(import_from(copy / (LIMIT_MODULE + suffix), LIMIT_MODULE))
    return modules, None


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


class Got:
    """What the cases call: p (add_one), q (add_k) and its entry point, the peer f and f_gil (the
    same, keeping the GIL), the limit modules per size, torch and tvm_ffi."""

    p = q = q_fn = f = f_gil = limits = torch = tvm_ffi = None


def tag(size):
    return f"{size[0]}x{size[1]}"


def source(size):
    return np.arange(size[0] * size[1], dtype=np.float32).reshape(size) / 4


def size_cases(got, size, index):
    """The cases of one size on objects of their own, each with what it must write: a list of
    (Case, read the output as an ndarray, k: the output must be the input + k)."""
    torch, src = got.torch, source(size)
    s = tag(size)
    out = []

    def add(key, label, stmt, env, group, ref, read, k=1):
        out.append((Case(f"{key}_{s}", f"{label}, {s}", stmt, env, group, ref=f"{ref}_{s}" if ref else None),
                    read, k))

    t_in, t_out = torch.from_numpy(src.copy()), torch.zeros(size, dtype=torch.float32)
    add("tensors", "p(t_in, t_out), torch tensors", "p(i, o)", {"p": got.p, "i": t_in, "o": t_out}, "ours",
        "tvm_tensors", lambda o=t_out: o.numpy())
    t2_in, t2_out = torch.from_numpy(src.copy()), torch.zeros(size, dtype=torch.float32)
    add("tvm_tensors", "f(t_in, t_out), TVM FFI, torch tensors", "f(i, o)", {"f": got.f, "i": t2_in, "o": t2_out},
        "peer", None, lambda o=t2_out: o.numpy())
    a_in, a_out = src.copy(), np.zeros(size, np.float32)
    add("ndarrays", "p(a_in, a_out), ndarrays", "p(i, o)", {"p": got.p, "i": a_in, "o": a_out}, "ours",
        "tvm_ndarrays", lambda o=a_out: o)
    a2_in, a2_out = src.copy(), np.zeros(size, np.float32)
    add("tvm_ndarrays", "f(a_in, a_out), TVM FFI, ndarrays", "f(i, o)", {"f": got.f, "i": a2_in, "o": a2_out},
        "peer", None, lambda o=a2_out: o)
    b_in, b_out = hb.Buffer.from_host(src.copy()), hb.Buffer(size, "float32")
    add("buffers", "p(b_in, b_out), Buffers", "p(i, o)", {"p": got.p, "i": b_in, "o": b_out}, "ours",
        "tvm_own", lambda o=b_out: np.asarray(o))
    # TVM FFI's own tensors over torch tensors kept here (read back through them).
    x_keep, x_out_keep = torch.from_numpy(src.copy()), torch.zeros(size, dtype=torch.float32)
    x_in, x_out = got.tvm_ffi.from_dlpack(x_keep), got.tvm_ffi.from_dlpack(x_out_keep)
    add("tvm_own", "f(x_in, x_out), TVM FFI, tvm_ffi.Tensor", "f(i, o)", {"f": got.f, "i": x_in, "o": x_out},
        "peer", None, lambda o=x_out_keep: o.numpy())
    if got.q is not None:
        c_in, c_out = hb.Buffer.from_host(src.copy()), hb.Buffer(size, "float32")
        add("buffers_k", "q(b_in, 3, b_out), Buffers", "q(i, k, o)", {"q": got.q, "i": c_in, "k": K, "o": c_out},
            "ours", "limit_keep", lambda o=c_out: np.asarray(o), K)
    if got.limits is not None:
        for gil, what in (("keep", "keeps"), ("release", "releases")):
            l_in, l_out = hb.Buffer.from_host(src.copy()), hb.Buffer(size, "float32")
            call = bind_limit(got.limits[gil][index], got.q_fn, l_in, l_out)
            add(f"limit_{gil}", f"c(b_in, 3, b_out), FASTCALL limit, {what} the GIL", "c(i, k, o)",
                {"c": call, "i": l_in, "k": K, "o": l_out}, "peer", None, lambda o=l_out: np.asarray(o), K)
    t3_in, t3_out = torch.from_numpy(src.copy()), torch.zeros(size, dtype=torch.float32)
    add("tvm_tensors_gil", "f(t_in, t_out), TVM FFI keeping the GIL, torch tensors", "f(i, o)",
        {"f": got.f_gil, "i": t3_in, "o": t3_out}, "info", "tvm_tensors", lambda o=t3_out: o.numpy())
    return out


def make_cases(got):
    """Every case with its check, both sizes, and the id() floor."""
    cases = []
    for index, size in enumerate(SIZES):
        cases += size_cases(got, size, index)
    t = got.torch.zeros(SIZES[0])
    cases.append((Case("floor", "id(t), the loop's floor", "f(x)", {"f": id, "x": t}, "info"), None, None))
    return cases


def sanity_checks(got):
    """Each case, run once on objects of its own (made as the timed ones are), writes what it
    should into its output."""
    problems = []
    for case, read, k in make_cases(got):
        if read is None:
            continue
        try:
            case.timer.timeit(1)
        except Exception as e:  # noqa: BLE001 - a failing case is reported, not raised
            problems.append(f"{case.label} raised {type(e).__name__}: {e}")
            continue
        if not np.array_equal(read(), source(read().shape) + k):
            problems.append(f"{case.label} did not write in + {k} into its output")
    return problems


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------


class Comparison:
    """One line of the table: case `ours` over case `peer`, and the largest ratio aimed for."""

    def __init__(self, key, label, ours, peer, target):
        self.key, self.label, self.ours, self.peer, self.target = key, label, ours, peer, target


def comparisons():
    rows = []
    for size in SIZES:
        s = tag(size)
        rows += [
            Comparison(f"tensors_vs_tvm_ffi_{s}", f"p(t, to) / TVM FFI f(t, to), {s}", f"tensors_{s}",
                       f"tvm_tensors_{s}", TENSOR_TARGET),
            Comparison(f"tensors_vs_ndarrays_{s}", f"p(t, to) / our p(a, ao), {s}", f"tensors_{s}",
                       f"ndarrays_{s}", TENSOR_VS_NDARRAY),
            Comparison(f"ndarrays_vs_tvm_ffi_{s}", f"p(a, ao) / TVM FFI f(a, ao), {s}", f"ndarrays_{s}",
                       f"tvm_ndarrays_{s}", NDARRAY_TARGET),
            Comparison(f"buffers_vs_tvm_ffi_tensors_{s}", f"p(b, bo) / TVM FFI f(x, xo) on tvm_ffi.Tensor, {s}",
                       f"buffers_{s}", f"tvm_own_{s}", None),
            Comparison(f"buffers_vs_limit_keep_gil_{s}", f"q(b, 3, bo) / FASTCALL limit keeping the GIL, {s}",
                       f"buffers_k_{s}", f"limit_keep_{s}", LIMIT_GOAL),
            Comparison(f"buffers_vs_limit_release_gil_{s}", f"q(b, 3, bo) / FASTCALL limit releasing it, {s}",
                       f"buffers_k_{s}", f"limit_release_{s}", None),
            Comparison(f"tvm_ffi_gil_kept_vs_released_{s}", f"TVM FFI keeping the GIL / releasing it, {s}",
                       f"tvm_tensors_gil_{s}", f"tvm_tensors_{s}", None),
        ]
    return rows


def report(cases, args, torch, tvm_ffi):
    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}
    print(f"TVM FFI calls: best of {args.repeat} x {args.number} calls, host pipeline out = in + 1 (float32), "
          f"target {TARGET}")
    print(f"{environment_line()}, torch {torch.__version__}, tvm_ffi {tvm_ffi.__version__}")
    print()
    rows = [r for r in comparisons() if r.ours in by_key and r.peer in by_key]
    w = max(len(r.label) for r in rows)
    head = f"{'case':<{w}}  {'ours ns':>8}  {'peer ns':>8}  {'ratio':>7}  {'paired':>7}  {'target':>7}  verdict"
    print(head)
    print("-" * len(head))
    figures = {}
    for r in rows:
        x, y = best[r.ours], best[r.peer]
        rr, pm = ratio(x, y), paired(by_key, r.ours, r.peer)
        verdict = "info" if r.target is None else ("met" if rr <= r.target else "NOT met")
        target = "-" if r.target is None else f"{r.target:.2f}x"
        print(f"{r.label:<{w}}  {x:8.1f}  {y:8.1f}  {rr:6.2f}x  {pm:6.2f}x  {target:>7}  {verdict}")
        figures[r.key] = {"label": r.label, "ours": r.ours, "peer": r.peer, "ours_ns": x, "peer_ns": y,
                          "ratio": rr, "paired_median": pm, "target": r.target,
                          "met": None if r.target is None else rr <= r.target}
    print(f"{'id(t), the loop floor':<{w}}  {best['floor']:8.1f}")
    print()
    for r in comparisons():
        if r.key not in figures:
            print(f"not measured: {r.label} (a case did not run)")
    return figures


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def prerequisites():
    """(torch, tvm_ffi, halide) or None after saying on stderr what is missing."""
    try:
        import torch
    except ImportError as e:
        print(f"needs PyTorch (pip install torch): {e}", file=sys.stderr)
        return None
    try:
        import tvm_ffi
    except ImportError as e:
        print(f"needs TVM FFI (pip install 'halide_buffer[bench]', apache-tvm-ffi=={TVM_FFI_VERSION}): {e}",
              file=sys.stderr)
        return None
    try:
        import halide as hl
    except ImportError as e:
        print(f"needs the halide wheel (pip install halide): {e}", file=sys.stderr)
        return None
    return torch, tvm_ffi, hl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    timing_arguments(ap)
    args = ap.parse_args(argv)

    found = prerequisites()
    if found is None:
        return 2
    torch, tvm_ffi, hl = found
    with tempfile.TemporaryDirectory(prefix="hb_bench_tvm_ffi_", ignore_cleanup_errors=True) as tmp:
        workdir = Path(tmp)
        peer, why = build_tvm_peer(workdir)
        if peer is None:
            print(f"cannot build the TVM FFI peer: {why}", file=sys.stderr)
            return 2
        limits, why = build_limits(hl, workdir, len(SIZES))
        if limits is None:
            print(f"cannot build the FASTCALL limit: {why}", file=sys.stderr)
            return 2
        got = Got()
        got.torch, got.tvm_ffi, got.limits = torch, tvm_ffi, limits
        try:
            got.p = hb.aot.load(build_add_one(hl, workdir), ADD_ONE)
            library = build_add_k(hl, workdir)
        except BuildError as e:
            print(f"cannot build the pipelines: {e}", file=sys.stderr)
            return 2
        got.q = hb.aot.load(library, ADD_K)
        got.q_fn = ctypes.CDLL(str(library))[ADD_K]  # the library hb.aot opened: the same runtime
        got.f, got.f_gil = load_tvm_peer(peer), load_tvm_peer(peer, release_gil=False)

        problems = sanity_checks(got)
        cases = [c for c, _, _ in make_cases(got)]
        run_cases(cases, args.number, args.repeat)
        figures = report(cases, args, torch, tvm_ffi)

    finish(args, "tvm_ffi", problems, noisy_timings(cases), "a paired ratio disagrees with the ratio of the bests",
           number=args.number, repeat=args.repeat, target=TARGET, sizes=[list(s) for s in SIZES],
           torch=torch.__version__, tvm_ffi=tvm_ffi.__version__, comparisons=figures, cases=cases_json(cases))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
