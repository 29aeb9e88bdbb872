"""benchmarks/bench_calls.py --check: the comparison of instruction ratios with the committed
figures (measuring is not tested here: it needs valgrind and takes seconds)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
FIGURES = BENCHMARKS / "bench_calls_instructions.json"


@pytest.fixture(scope="module")
def bench_calls():
    sys.path.insert(0, str(BENCHMARKS))  # bench_calls imports bench_common beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_calls", BENCHMARKS / "bench_calls.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def measured(**ratios):
    return {key: {"ours": 100.0 * r, "peer": 100.0, "ratio": r} for key, r in ratios.items()}


def committed(**ratios):
    return {"rows": {key: {"ratio": r} for key, r in ratios.items()}}


def test_a_ratio_grown_past_the_tolerance_fails_naming_the_row(bench_calls):
    compared, failures, notes = bench_calls.check_rows(measured(slice=2.3, asarray=1.0),
                                                       committed(slice=2.0, asarray=1.0))
    assert compared == ["slice", "asarray"]
    assert failures == ["row 'b[1:3] / a[1:3]': instruction ratio 2.300x, committed 2.000x (+15.0%, "
                        "more than the +10% allowed)"]
    assert notes == []


def test_growth_within_the_tolerance_and_improvements_pass(bench_calls):
    compared, failures, _ = bench_calls.check_rows(measured(slice=2.19, asarray=0.5, aot_call=1.0),
                                                   committed(slice=2.0, asarray=1.0, aot_call=1.0))
    assert compared == ["slice", "asarray", "aot_call"]
    assert failures == []


def test_just_past_the_tolerance_fails(bench_calls):
    _, failures, _ = bench_calls.check_rows(measured(buffer_new=2.21), committed(buffer_new=2.0))
    assert len(failures) == 1 and "Buffer((4, 4)" in failures[0]


def test_skipped_and_uncommitted_rows_are_not_compared_and_say_why(bench_calls):
    rows = {**measured(slice=5.0, asarray=1.0), "from_halide": {"skipped": "no halide wheel"}}
    compared, failures, notes = bench_calls.check_rows(rows, committed(asarray=1.0, from_halide=1.0))
    assert compared == ["asarray"]
    assert failures == []
    assert any("b[1:3]" in n and "no ratio" in n for n in notes)
    assert any("from_halide(h)" in n and "no halide wheel" in n for n in notes)


def test_the_committed_figures_hold_a_ratio_for_every_row(bench_calls):
    figures = json.loads(FIGURES.read_text())
    assert sorted(figures["rows"]) == sorted(r.key for r in bench_calls.ROWS)
    for key, row in figures["rows"].items():
        assert row["ratio"] == pytest.approx(row["ours"] / row["peer"], rel=1e-3), key
    for what in ("python", "numpy", "halide"):
        assert figures["environment"][what], what
