import os, pytest
from test_residency_model import run, pipelines  # noqa
@pytest.mark.parametrize("device", ["opencl-zero-copy"])
def test_quick(pipelines, device):
    run(device, pipelines, int(os.environ.get("N", "100")))
