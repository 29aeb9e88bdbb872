"""DLPack exchange: what handing a small Buffer to NumPy and PyTorch, and a tensor back, costs.

Run:  python benchmarks/bench_dlpack.py [--number N] [--repeat R] [--no-peer] [--json PATH]

Every case is timed with ``timeit`` as ``repeat`` rounds of ``number`` calls; the rounds of all
cases are interleaved (round 1 of every case, then round 2, ...) so that drift of the machine
hits every case alike, and the best round gives the per-call cost. Each call makes the consumer's
object and drops it again, so the producer's deleter is part of every row. Float32 (4, 4) unless
noted. Cases, in four sections, each with the row its ratios are taken against:

* Buffer -> NumPy: ``np.from_dlpack(b)`` for ``b = halide_buffer.Buffer((4, 4), "float32")``,
  against ``np.from_dlpack(n)`` for ``n``, a nanobind ndarray (the peer): the project's target is
  <= 1.0x. ``n`` is a ``nanobind.nb_ndarray`` over a static float[16], returned by a function of
  ``peer_nanobind_ndarray.cpp`` beside this file, which is compiled at run time with nanobind's
  own sources (``pip install nanobind``); it is made once, so each call times nanobind's
  ``__dlpack__`` and NumPy's import. Without nanobind or a C++ compiler the peer is reported
  unavailable, the section is taken against NumPy's own export, and the rest still runs.
  NumPy's own export, ``np.from_dlpack(a)`` for
  ``a = np.zeros((4, 4), np.float32)``, is the second reference.
* Buffer -> PyTorch: ``torch.from_dlpack(b)`` against ``torch.from_dlpack(a)``; target <= 1.05x.
  Informational: the same for a bfloat16 Buffer (its ratio is against the float32 ndarray).
* PyTorch -> halide_buffer: ``hb.from_dlpack(t)`` for a torch tensor ``t``, through PyTorch's
  DLPack 1.3 C exchange API (``type(t).__dlpack_c_exchange_api__``: no ``__dlpack__`` call, no
  capsule), against ``hb.from_dlpack(CapsuleOnly(t))``, a wrapper whose ``__dlpack__`` returns
  ``t.__dlpack__(...)`` and whose type has no exchange API: the capsule path. Peers of the same
  direction: ``torch.from_dlpack(a)`` (NumPy -> PyTorch) and ``np.from_dlpack(t)``.
* The export alone: ``b.__dlpack__(max_version=(1, 0))`` against ``a.__dlpack__(max_version=(1,
  0))``; ``b.__dlpack__()`` with no keyword and ``b.__dlpack__(stream=None)`` with one that asks
  for nothing (their difference is what passing keywords costs); ``id(b)``, the timing loop's
  floor.

Ratios are measured in the same run on the same machine; absolute nanoseconds are not
comparable across machines, and nothing here is a pass/fail test. Without PyTorch only the
NumPy rows run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import halide_buffer as hb

from bench_common import (Case, cases_json, environment, environment_line, finish, fmt_ratio, noisy_timings, paired,
                          ratio, run_cases)

try:
    import torch
except Exception as e:  # noqa: BLE001 - any import failure means "PyTorch unavailable"
    torch, TORCH_REASON = None, f"{type(e).__name__}: {e}"
else:
    TORCH_REASON = None

HERE = Path(__file__).resolve().parent
PEER_SOURCE = HERE / "peer_nanobind_ndarray.cpp"
PEER_MODULE = "peer_nanobind_ndarray"
PEER_TYPE = "nb_ndarray"  # nanobind's own ndarray object, nanobind.nb_ndarray

SMALL = (4, 4)
V1 = (1, 0)
EXCHANGE_API = "__dlpack_c_exchange_api__"

TARGET_NUMPY = 1.0   # np.from_dlpack(Buffer) / np.from_dlpack(nanobind ndarray)
TARGET_TORCH = 1.05


# --------------------------------------------------------------------------------------------
# The nanobind ndarray peer, built at run time
# --------------------------------------------------------------------------------------------


def _compile(cmd):
    """Runs one compiler command; returns None, or why it failed."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{e}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return f"exit {proc.returncode}" + (": " + " | ".join(tail) if tail else "")
    return None


def build_peer(workdir: Path):
    """Compiles peer_nanobind_ndarray.cpp with nanobind's sources and imports it; returns
    (module, None) or (None, reason)."""
    if not PEER_SOURCE.is_file():
        return None, f"{PEER_SOURCE.name} is missing"
    try:
        import nanobind
    except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
        return None, f"nanobind is not installed (pip install nanobind): {type(e).__name__}: {e}"
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        return None, "no C++ compiler (g++ or $CXX) found"
    try:
        nb_include = Path(nanobind.include_dir())
        nb_source = Path(nanobind.source_dir())
    except Exception as e:  # noqa: BLE001
        return None, f"nanobind {getattr(nanobind, '__version__', '?')} gives no sources: {e}"
    combined = nb_source / "nb_combined.cpp"
    robin_map = nb_source.parent / "ext" / "robin_map" / "include"
    for need in (combined, robin_map):
        if not need.exists():
            return None, f"nanobind's {need.name} not found where nanobind.source_dir() says"
    paths = sysconfig.get_paths()
    py_includes = list(dict.fromkeys(
        d for d in (paths.get("include"), paths.get("platinclude")) if d))
    # As the comment at the top of nanobind's nb_combined.cpp describes a build without CMake:
    # the library in one translation unit (-O3 -fno-strict-aliasing, unused sections dropped at
    # link time) and the module beside it (-O3 here, not -Os: what setuptools gives
    # halide_buffer).
    cxx_cmd = shlex.split(cxx)
    common = ["-std=c++17", "-fPIC", "-fvisibility=hidden", "-DNDEBUG", "-DNB_COMPACT_ASSERTIONS",
              *(f"-I{d}" for d in (*py_includes, nb_include, robin_map))]
    lib_obj, mod_obj = workdir / "nanobind.o", workdir / (PEER_MODULE + ".o")
    jobs = {
        "compiling nanobind's nb_combined.cpp": [
            *cxx_cmd, *common, "-O3", "-fno-strict-aliasing", "-ffunction-sections",
            "-fdata-sections", "-c", str(combined), "-o", str(lib_obj)],
        f"compiling {PEER_SOURCE.name}": [
            *cxx_cmd, *common, "-O3", "-c", str(PEER_SOURCE), "-o", str(mod_obj)],
    }
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:  # the two compile in parallel
        failures = list(zip(jobs, pool.map(_compile, jobs.values())))
    for what, why in failures:
        if why is not None:
            return None, f"{what} failed ({why})"
    target = workdir / (PEER_MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if sys.platform == "darwin":
        link_flags = ["-undefined", "dynamic_lookup", "-Wl,-dead_strip"]
    else:
        link_flags = ["-Wl,--gc-sections"]
    link = [*cxx_cmd, "-shared", *link_flags, str(mod_obj), str(lib_obj), "-o", str(target)]
    why = _compile(link)
    if why is not None:
        return None, f"linking the peer failed ({why})"
    try:
        spec = importlib.util.spec_from_file_location(PEER_MODULE, target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means "peer unavailable"
        return None, f"importing the compiled peer failed: {type(e).__name__}: {e}"
    module.nanobind_version = getattr(nanobind, "__version__", "?")
    return module, None


class CapsuleOnly:
    """A producer with only the capsule protocol: its type has no DLPack C exchange API, so a
    consumer has to call __dlpack__ and take the capsule."""

    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------



def data_address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def python_calls(f, *args):
    """The names of the Python functions that calling f(*args) runs."""
    names = []

    def profile(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        f(*args)
    finally:
        sys.setprofile(None)
    return names


def sanity_checks(b, b_bf16, a, t, capsule_only, peer_mod, peer_obj):
    """Functional checks of what is timed (a zero-copy claim must be true before timing it)."""
    problems = []
    if peer_obj is not None:
        kind = type(peer_obj)
        if kind.__name__ != PEER_TYPE or not hasattr(kind, "__dlpack__"):
            problems.append(f"the nanobind peer is a {kind.__module__}.{kind.__qualname__}, not "
                            f"nanobind's {PEER_TYPE} with __dlpack__")
        else:
            p = np.from_dlpack(peer_obj)
            if p.dtype != np.float32 or p.shape != SMALL:
                problems.append(f"np.from_dlpack(nanobind ndarray) gave {p.dtype} {p.shape}")
            if data_address(p) != peer_mod.data_address():
                problems.append("np.from_dlpack(nanobind ndarray) does not share the peer's memory")
    here = data_address(b.numpy())
    v = np.from_dlpack(b)
    if v.dtype != np.float32 or v.shape != SMALL:
        problems.append(f"np.from_dlpack(Buffer) gave {v.dtype} {v.shape}")
    if data_address(v) != here:
        problems.append("np.from_dlpack(Buffer) does not share the Buffer's memory")
    if data_address(np.from_dlpack(a)) != data_address(a):
        problems.append("np.from_dlpack(ndarray) copied")
    cap = b.__dlpack__(max_version=V1)
    if type(cap).__name__ != "PyCapsule":
        problems.append(f"Buffer.__dlpack__() returned {type(cap).__name__}")
    if torch is None:
        return problems
    x = torch.from_dlpack(b)
    if x.dtype != torch.float32 or tuple(x.shape) != SMALL:
        problems.append(f"torch.from_dlpack(Buffer) gave {x.dtype} {tuple(x.shape)}")
    if x.data_ptr() != here:
        problems.append("torch.from_dlpack(Buffer) does not share the Buffer's memory")
    xb = torch.from_dlpack(b_bf16)
    if xb.dtype != torch.bfloat16 or xb.data_ptr() != data_address(b_bf16.numpy()):
        problems.append(f"torch.from_dlpack(bfloat16 Buffer) gave {xb.dtype}, or a copy")
    if torch.from_dlpack(a).data_ptr() != data_address(a):
        problems.append("torch.from_dlpack(ndarray) copied")
    if data_address(np.from_dlpack(t)) != t.data_ptr():
        problems.append("np.from_dlpack(Tensor) copied")
    for how, obj in (("exchange API", t), ("capsule path", capsule_only)):
        y = hb.from_dlpack(obj)
        if y.dtype != hb.dtype("float32") or tuple(y.shape) != SMALL:
            problems.append(f"hb.from_dlpack(Tensor) ({how}) gave {y.dtype} {tuple(y.shape)}")
        if data_address(np.asarray(y)) != t.data_ptr():
            problems.append(f"hb.from_dlpack(Tensor) ({how}) does not share the tensor's memory")
    # The two import rows must take the two paths they are named after.
    if not hasattr(type(t), EXCHANGE_API):
        problems.append(f"torch {torch.__version__} has no {EXCHANGE_API}: the exchange API row "
                        f"takes the capsule path too")
    elif "__dlpack__" in python_calls(hb.from_dlpack, t):
        problems.append("hb.from_dlpack(Tensor) called Tensor.__dlpack__: not the exchange API")
    if hasattr(type(capsule_only), EXCHANGE_API) is not False:
        problems.append("CapsuleOnly's type has an exchange API: not the capsule path")
    if "__dlpack__" not in python_calls(hb.from_dlpack, capsule_only):
        problems.append("hb.from_dlpack(CapsuleOnly(Tensor)) called no __dlpack__")
    return problems


def sections_of(peer_obj):
    """(title, key of the reference row) of each section. The NumPy section is taken against the
    nanobind peer, or against NumPy's own export when the peer is unavailable."""
    return [
        ("Buffer -> NumPy",
         "np_from_dlpack_nanobind" if peer_obj is not None else "np_from_dlpack_ndarray"),
        ("Buffer -> PyTorch", "torch_from_dlpack_ndarray"),
        ("PyTorch -> halide_buffer", "hb_from_dlpack_capsule"),
        ("the export alone", "ndarray_dlpack"),
    ]


def make_cases(b, b_bf16, a, t, capsule_only, peer_obj):
    npf = np.from_dlpack
    sections = sections_of(peer_obj)
    # Sections by the key of their reference row (see sections_of).
    sec = {ref: [] for _, ref in sections}
    np_ref = sections[0][1]
    s = sec[np_ref]
    s.append(Case("np_from_dlpack_buffer", "np.from_dlpack(Buffer f32)", "f(x)",
                  {"f": npf, "x": b}, "ours", np_ref))
    if peer_obj is not None:
        s.append(Case("np_from_dlpack_nanobind", "np.from_dlpack(nanobind ndarray)  [peer]",
                      "f(x)", {"f": npf, "x": peer_obj}, "peer", np_ref))
    s.append(Case("np_from_dlpack_ndarray", "np.from_dlpack(ndarray)  [NumPy's own]", "f(x)",
                  {"f": npf, "x": a}, "reference", np_ref))
    if torch is not None:
        tf = torch.from_dlpack
        s = sec["torch_from_dlpack_ndarray"]
        s.append(Case("torch_from_dlpack_buffer", "torch.from_dlpack(Buffer f32)", "f(x)",
                      {"f": tf, "x": b}, "ours", "torch_from_dlpack_ndarray"))
        s.append(Case("torch_from_dlpack_ndarray", "torch.from_dlpack(ndarray)  [reference]",
                      "f(x)", {"f": tf, "x": a}, "reference", "torch_from_dlpack_ndarray"))
        s.append(Case("torch_from_dlpack_buffer_bf16", "torch.from_dlpack(Buffer bf16)", "f(x)",
                      {"f": tf, "x": b_bf16}, "info", "torch_from_dlpack_ndarray"))
        s = sec["hb_from_dlpack_capsule"]
        s.append(Case("hb_from_dlpack_exchange", "hb.from_dlpack(Tensor)  [exchange API]",
                      "f(x)", {"f": hb.from_dlpack, "x": t}, "ours", "hb_from_dlpack_capsule"))
        s.append(Case("hb_from_dlpack_capsule", "hb.from_dlpack(CapsuleOnly(Tensor))  [capsule]",
                      "f(x)", {"f": hb.from_dlpack, "x": capsule_only}, "ours",
                      "hb_from_dlpack_capsule"))
        s.append(Case("np_from_dlpack_tensor", "np.from_dlpack(Tensor)  [peer]", "f(x)",
                      {"f": npf, "x": t}, "peer", "hb_from_dlpack_capsule"))
    s = sec["ndarray_dlpack"]
    s.append(Case("buffer_dlpack", "Buffer.__dlpack__(max_version=(1, 0))",
                  "x.__dlpack__(max_version=v)", {"x": b, "v": V1}, "info", "ndarray_dlpack"))
    s.append(Case("buffer_dlpack_no_keywords", "Buffer.__dlpack__()", "x.__dlpack__()",
                  {"x": b}, "info", "ndarray_dlpack"))
    s.append(Case("buffer_dlpack_stream_none", "Buffer.__dlpack__(stream=None)",
                  "x.__dlpack__(stream=None)", {"x": b}, "info", "ndarray_dlpack"))
    s.append(Case("ndarray_dlpack", "ndarray.__dlpack__(max_version=(1, 0))",
                  "x.__dlpack__(max_version=v)", {"x": a, "v": V1}, "info", "ndarray_dlpack"))
    s.append(Case("call_floor", "id(Buffer)  [timing loop floor]", "f(x)",
                  {"f": id, "x": b}, "info", "ndarray_dlpack"))
    return sections, sec


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20000, help="calls per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; the best counts (default 7)")
    ap.add_argument("--no-peer", action="store_true", help="skip building the nanobind peer")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = ap.parse_args(argv)

    b = hb.Buffer(SMALL, dtype="float32")
    b_bf16 = hb.Buffer(SMALL, dtype="bfloat16")
    a = np.zeros(SMALL, np.float32)
    t = torch.zeros(SMALL, dtype=torch.float32) if torch is not None else None
    capsule_only = CapsuleOnly(t) if torch is not None else None

    with tempfile.TemporaryDirectory(prefix="hb_bench_peer_", ignore_cleanup_errors=True) as tmp:
        if args.no_peer:
            peer_mod, peer_reason = None, "skipped (--no-peer)"
        else:
            peer_mod, peer_reason = build_peer(Path(tmp))
        # Made once: the timed call is np.from_dlpack on it, that is nanobind's __dlpack__.
        peer_obj = peer_mod.matrix() if peer_mod is not None else None

        problems = sanity_checks(b, b_bf16, a, t, capsule_only, peer_mod, peer_obj)
        order, sections = make_cases(b, b_bf16, a, t, capsule_only, peer_obj)
        cases = [c for _, ref in order for c in sections[ref]]
        run_cases(cases, args.number, args.repeat)
        del peer_obj

    by_key = {c.key: c for c in cases}
    best = {k: c.rounds_ns.best for k, c in by_key.items()}
    torch_line = (f"torch {torch.__version__}" if torch is not None
                  else f"torch unavailable: {TORCH_REASON}")
    peer_line = (f"built from {PEER_SOURCE.name} with nanobind {peer_mod.nanobind_version}"
                 if peer_mod is not None else f"unavailable: {peer_reason}")

    print(f"DLPack exchange: best of {args.repeat} x {args.number} calls, float32 {SMALL} "
          f"unless noted")
    print(f"{environment_line()}, {torch_line}")
    print(f"peer (nanobind ndarray): {peer_line}")
    print()
    w = max(len(c.label) for c in cases) + 2
    print(f"{'case':<{w}}  {'best ns':>8}  {'median':>8}  {'vs ref':>8}")
    print("-" * (w + 2 + 8 + 2 + 8 + 2 + 8))
    for title, ref in order:
        if not sections[ref]:
            continue
        print(f"{title} (vs ref: {by_key[ref].label.split('  [')[0]})")
        for c in sections[ref]:
            print(f"  {c.label:<{w - 2}}  {c.rounds_ns.best:8.1f}  {c.rounds_ns.median:8.1f}  "
                  f"{fmt_ratio(ratio(c.rounds_ns.best, best[c.ref])):>8}")
    print()

    def r(ours, ref):
        return ratio(best.get(ours), best.get(ref))

    floor = best["call_floor"]

    def net(ours, ref):
        return None if ref not in best else ratio(best[ours] - floor, best[ref] - floor)

    r_nb = r("np_from_dlpack_buffer", "np_from_dlpack_nanobind")
    r_nb_net = net("np_from_dlpack_buffer", "np_from_dlpack_nanobind")
    r_nb_paired = paired(by_key, "np_from_dlpack_buffer", "np_from_dlpack_nanobind")
    r_nb_numpy = r("np_from_dlpack_nanobind", "np_from_dlpack_ndarray")
    r_np = r("np_from_dlpack_buffer", "np_from_dlpack_ndarray")
    r_np_net = ratio(best["np_from_dlpack_buffer"] - floor, best["np_from_dlpack_ndarray"] - floor)
    r_np_paired = paired(by_key, "np_from_dlpack_buffer", "np_from_dlpack_ndarray")
    r_torch = r("torch_from_dlpack_buffer", "torch_from_dlpack_ndarray")
    r_torch_paired = paired(by_key, "torch_from_dlpack_buffer", "torch_from_dlpack_ndarray")
    r_gain = r("hb_from_dlpack_exchange", "hb_from_dlpack_capsule")
    r_gain_paired = paired(by_key, "hb_from_dlpack_exchange", "hb_from_dlpack_capsule")
    r_import_torch = r("hb_from_dlpack_exchange", "torch_from_dlpack_ndarray")
    r_import_np = r("hb_from_dlpack_exchange", "np_from_dlpack_tensor")
    r_export = r("buffer_dlpack", "ndarray_dlpack")
    keywords_ns = best["buffer_dlpack_stream_none"] - best["buffer_dlpack_no_keywords"]
    np_met = None if r_nb is None else r_nb <= TARGET_NUMPY
    torch_met = None if r_torch is None else r_torch <= TARGET_TORCH

    def verdict(met):
        return "met" if met else "NOT met"

    if r_nb is not None:
        print(f"np.from_dlpack(Buffer) / np.from_dlpack(nanobind ndarray):  {r_nb:.2f}x "
              f"(target <= {TARGET_NUMPY:.2f}x: {verdict(np_met)}; {r_nb_net:.2f}x net of the "
              f"loop floor)")
        print(f"  same, median of per-round ratios:                         {r_nb_paired:.2f}x")
    else:
        print(f"np.from_dlpack(Buffer) / np.from_dlpack(nanobind ndarray):  - (target <= "
              f"{TARGET_NUMPY:.2f}x: not measured; peer unavailable: {peer_reason})")
    print(f"np.from_dlpack(Buffer) / np.from_dlpack(ndarray):           {r_np:.2f}x "
          f"(NumPy's own export, reference; {r_np_net:.2f}x net of the loop floor)")
    print(f"  same, median of per-round ratios:                         {r_np_paired:.2f}x")
    if r_nb_numpy is not None:
        print(f"np.from_dlpack(nanobind ndarray) / np.from_dlpack(ndarray): {r_nb_numpy:.2f}x")
    if torch is not None:
        print(f"torch.from_dlpack(Buffer) / torch.from_dlpack(ndarray):     {r_torch:.2f}x "
              f"(target <= {TARGET_TORCH:.2f}x: {verdict(torch_met)})")
        print(f"  same, median of per-round ratios:                         {r_torch_paired:.2f}x")
        print(f"hb.from_dlpack(Tensor), exchange API / capsule path:        {r_gain:.2f}x "
              f"({1 / r_gain:.2f}x as fast)")
        print(f"  same, median of per-round ratios:                         {r_gain_paired:.2f}x")
        print(f"hb.from_dlpack(Tensor) / torch.from_dlpack(ndarray):        {r_import_torch:.2f}x")
        print(f"hb.from_dlpack(Tensor) / np.from_dlpack(Tensor):            {r_import_np:.2f}x")
    else:
        print(f"PyTorch rows: {torch_line}")
    print(f"Buffer.__dlpack__(max_version) / ndarray.__dlpack__(...):   {r_export:.2f}x "
          f"(passing a keyword costs {keywords_ns:.0f} ns: __dlpack__(stream=None) - __dlpack__())")
    noisy = noisy_timings(cases)
    env = environment()
    env["torch"] = torch.__version__ if torch is not None else None
    finish(
        args, "dlpack", problems, noisy, "a ratio and its per-round median disagree", environment_=env,
        number=args.number,
        repeat=args.repeat,
        shape=list(SMALL),
        peer={"available": peer_mod is not None, "reason": peer_reason,
              "nanobind": peer_mod.nanobind_version if peer_mod is not None else None},
        torch={"available": torch is not None, "reason": TORCH_REASON,
               "exchange_api": torch is not None and hasattr(type(t), EXCHANGE_API)},
        cases=cases_json(cases),
        ratios={
            "np_from_dlpack_vs_nanobind": r_nb,
            "np_from_dlpack_vs_nanobind_net_of_floor": r_nb_net,
            "np_from_dlpack_vs_nanobind_paired_median": r_nb_paired,
            "nanobind_vs_numpy": r_nb_numpy,
            "np_from_dlpack_vs_numpy": r_np,
            "np_from_dlpack_vs_numpy_net_of_floor": r_np_net,
            "np_from_dlpack_vs_numpy_paired_median": r_np_paired,
            "torch_from_dlpack_vs_numpy": r_torch,
            "torch_from_dlpack_vs_numpy_paired_median": r_torch_paired,
            "torch_from_dlpack_bf16_vs_numpy": r("torch_from_dlpack_buffer_bf16",
                                                 "torch_from_dlpack_ndarray"),
            "import_exchange_vs_capsule": r_gain,
            "import_exchange_vs_capsule_paired_median": r_gain_paired,
            "import_exchange_vs_torch_from_ndarray": r_import_torch,
            "import_exchange_vs_np_from_tensor": r_import_np,
            "dlpack_export_vs_numpy": r_export,
            "dlpack_keywords_ns": keywords_ns,
        },
        target={
            "np_from_dlpack_vs_nanobind_max": TARGET_NUMPY, "np_met": np_met,
            "torch_from_dlpack_vs_numpy_max": TARGET_TORCH, "torch_met": torch_met,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
