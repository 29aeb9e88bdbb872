"""Fixtures and hooks of the whole suite; the helpers the test files share are in common.py."""

import gc
import os
import sys

import pytest
from hypothesis import settings

import halide_buffer as hb

import cuda_standin
import opencl_interposer

# Before any test opens a driver: OpenCL through the interposer (its calls counted, failures
# injectable) and CUDA through the driver stand-in, unless the environment names the libraries.
if not os.environ.get(opencl_interposer.ENV_LIBRARY):
    opencl_interposer.install()
cuda_standin.install()

# The suite's default OpenCL device copies (zero-copy off), so the many tests that count copies
# count bytes that move; tests/test_zero_copy.py, the residency model and the device fault
# injection take the zero-copy device explicitly (hb.opencl.device(zero_copy=True)). Setting the
# variable runs the whole suite either way.
os.environ.setdefault("HALIDE_BUFFER_OPENCL_ZERO_COPY", "0")

# Property tests draw the same examples on every run, so the suite's outcome does not depend on the
# day. Two such profiles differ only in how many examples the tests marked `examples` draw:
# "quick", the default (the README's command, the mutation tool), and "ci", the counts CI runs in a
# step of its own (HYPOTHESIS_PROFILE=ci python -m pytest -m examples). HYPOTHESIS_PROFILE=explore
# draws new examples, CI's counts of them, and remembers failures (in .hypothesis/), for hunting
# bugs rather than gating a change. Each derives from Hypothesis's own defaults, not from the profile
# loaded when this file runs: Hypothesis loads its own "ci" profile (derandomized) wherever a CI
# environment variable is set, and a profile registered without a parent inherits the loaded one.
# None has a deadline: speed is measured in benchmarks/, never asserted by a test on a loaded machine.
PROFILES = ("quick", "ci", "explore")
_DEFAULTS = settings(settings.get_profile("default"), deadline=None)
settings.register_profile("quick", _DEFAULTS, derandomize=True, database=None)
settings.register_profile("ci", _DEFAULTS, derandomize=True, database=None)
settings.register_profile("explore", _DEFAULTS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


def pytest_report_header(config):
    return f"hypothesis profile: {settings.get_current_profile_name()} (HYPOTHESIS_PROFILE: {', '.join(PROFILES)})"


@pytest.fixture
def examples(request):
    """How many examples this property test draws under the loaded profile: its marker's `quick`
    count under "quick", its `ci` count under "ci" and "explore"."""
    marker = request.node.get_closest_marker("examples")
    if marker is None or set(marker.kwargs) != {"quick", "ci"}:
        pytest.fail("the examples fixture needs @pytest.mark.examples(quick=N, ci=M) on its test", pytrace=False)
    if not 0 < marker.kwargs["quick"] <= marker.kwargs["ci"]:
        pytest.fail(f"@pytest.mark.examples{marker.kwargs}: want 0 < quick <= ci", pytrace=False)
    return marker.kwargs["quick" if settings.get_current_profile_name() == "quick" else "ci"]


@pytest.fixture(scope="session")
def dev():
    """The default OpenCL device (PoCL's CPU device on a machine without a GPU)."""
    return hb.opencl.device()


@pytest.fixture(scope="session")
def ctx(dev):
    """pyopencl's view of the default device's context."""
    import pyopencl as cl

    return cl.Context.from_int_ptr(dev.context)


@pytest.fixture(scope="session")
def queue(dev):
    """pyopencl's view of the default device's queue: work on it is ordered with our copies."""
    import pyopencl as cl

    return cl.CommandQueue.from_int_ptr(dev.queue)


@pytest.fixture(scope="session")
def zc():
    """The default OpenCL device with zero-copy on: its memory is the host's (PoCL's CPU device)."""
    d = hb.opencl.device(zero_copy=True)
    if not d.zero_copy:
        pytest.skip(f"{d!r} does not report host-unified memory: no zero-copy to test")
    return d


@pytest.fixture(autouse=True)
def empty_device_pools():
    """Each test starts with nothing kept in the devices' pools, so what it allocates is asked of
    the driver (fault injection fires, allocation counts add up) whatever ran before."""
    for d in [*hb.opencl._devices, *hb.cuda._defaults.values()]:
        d.trim()
    yield


@pytest.fixture(autouse=True)
def cuda_standin_strict():
    """Fails a test whose CUDA driver calls misused the driver stand-in (its strict mode)."""
    yield
    if cuda_standin.active():
        found = cuda_standin.violations()
        cuda_standin.clear_violations()
        cuda_standin.clear_faults()
        if found:
            pytest.fail("CUDA driver stand-in: misuse of the driver:\n  " + "\n  ".join(found), pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    """The stand-in's strict mode at the end: once every test's objects are gone, no allocation
    is alive that halide_buffer does not hold (a test's buffer kept by a module is still held)."""
    if not cuda_standin.loaded():
        return
    gc.collect()
    alive, held = cuda_standin.live_allocations(), hb._core._live_counts()["device_allocations"]
    if alive > held:
        sys.stderr.write(f"\nCUDA driver stand-in: {alive - held} of its {alive} allocations alive at the end "
                         f"of the session, owned by nothing (halide_buffer holds {held} device allocations)\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

