"""``python -m halide_buffer``: the report is computed live, not read from a list."""

import os
import subprocess
import sys

import pytest

import halide_buffer as hb
from halide_buffer import cli


def test_main_job_runs_and_lists_every_dtype():
    out = subprocess.run([sys.executable, "-m", "halide_buffer"], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith(f"halide_buffer {hb.__version__}\n")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    for t in hb.dtypes():
        assert t.name in rows
    # bfloat16 has no PEP 3118 format: no buffer protocol, but __array__ carries it.
    assert rows["bfloat16"][-5:] == ["no", "yes", "yes", "yes", "yes"]
    assert rows["float32"][-5:] == ["yes", "yes", "yes", "yes", "yes"]
    assert rows["complex128"][-2] == "no"  # Halide has no 128-bit type
    assert "peer libraries:" in out and "numpy" in out and "OpenCL" in out


def test_protocol_probe_follows_the_table():
    # Independent expectations: the buffer protocol carries exactly the rows with a PEP 3118
    # format, Halide exactly the rows with a Halide type, __array__, from_host and DLPack every row.
    for t in hb.dtypes():
        carried = cli.protocols(t)
        assert carried == {"buffer protocol": t.format is not None, "__array__": True,
                           "from_host": True, "Halide": t.halide_type is not None, "DLPack": True}, t.name


def test_unknown_command_is_a_usage_error():
    run = subprocess.run([sys.executable, "-m", "halide_buffer", "frobnicate"], capture_output=True, text=True)
    assert run.returncode == 2 and "invalid choice: 'frobnicate'" in run.stderr


@pytest.mark.parametrize("zero_copy", [True, False], ids=["zero-copy", "copying"])
def test_demo_shows_each_copy_or_map_once(zero_copy):
    """PoCL shares the host's memory: by default the demo maps; with --no-zero-copy it copies."""
    env = {k: v for k, v in os.environ.items() if k != "HALIDE_BUFFER_OPENCL_ZERO_COPY"}
    flags = [] if zero_copy else ["--no-zero-copy"]
    out = subprocess.run([sys.executable, "-m", "halide_buffer", "demo", *flags], capture_output=True, text=True,
                         check=True, env=env).stdout
    if zero_copy and "(zero-copy" not in out.splitlines()[0]:
        pytest.skip("the default OpenCL device does not share the host's memory")
    steps = [line for line in out.splitlines() if "moved:" in line]
    moved = [line.split("moved:")[1].strip() for line in steps]
    up, down = (("1 map host->device (0 B)", "1 map device->host (0 B)") if zero_copy
                else ("1 copy host->device (32 B)", "1 copy device->host (32 B)"))
    assert moved == ["no copy", up, "no copy", down, "no copy", "no copy", up, "no copy", "no copy"]
    assert "[0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]" in steps[3]
    assert "-> 22" in steps[6]  # (0 + 0.5 + ... + 3.5) + 8 * 1 on the device
    total = ("Transfers(to_device=0, to_device_bytes=0, to_host=0, to_host_bytes=0, maps_to_device=2, maps_to_host=1)"
             if zero_copy else "Transfers(to_device=2, to_device_bytes=64, to_host=1, to_host_bytes=32)")
    assert out.rstrip().endswith(total)
