"""A CUDA pipeline call lets the GIL go once and never takes it back (the CUDA driver stand-in).

Everything the call needs from Python is resolved before the GIL is let go, as TVM FFI sets its
stream first: the device the call computes on, the package's default device
(``halide_buffer.cuda.device(0)``) where no argument is on a CUDA device, is looked up while the
GIL is held. ``_core._gil_taken_back()`` counts the lookups of the package's CUDA devices made by a
thread that had let the GIL go. The stand-in proves this bookkeeping only: no kernel runs, so the
calls here compute nothing (empty arguments), which still chooses the device and places the
arguments.
"""

import numpy as np
import pytest

import halide_buffer as hb

import cuda_standin as standin
from pipelines import TARGET, brighter_func, c_compiler, compile_and_load

pytestmark = pytest.mark.needs_halide


@pytest.fixture(scope="module")
def brighter(tmp_path_factory):
    if not standin.active():
        pytest.skip(standin.why_inactive())
    return compile_and_load(tmp_path_factory.mktemp("cuda_call_gil"), c_compiler(), *brighter_func(),
                            "hb_cuda_call_gil", target=TARGET + "-cuda")


def test_a_call_on_the_default_cuda_device_looks_it_up_before_letting_the_gil_go(brighter):
    """No argument is on a CUDA device: the call runs on the package's device 0, looked up with
    the GIL held."""
    assert brighter.device_api == "cuda"
    hb.cuda.device(0)  # opened before: what is counted is the lookup, not the device's start
    before = hb._core._gil_taken_back()
    out = hb.Buffer((0, 40), "uint8")
    assert brighter(np.zeros((0, 40), np.uint8), out) is out
    assert hb._core._gil_taken_back() == before

