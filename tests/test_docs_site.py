"""The documentation site builds with no warning (`mkdocs build --strict`, the README's command):
every page of docs/ is in the nav, every link between pages and every image resolves, and the API
reference is generated from the package's docstrings and stubs."""

import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import halide_buffer as hb

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python")


def missing_tools():
    """The docs tools this environment lacks."""
    missing = []
    for name in TOOLS:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # its parent package is missing
            found = False
        if not found:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if missing_tools():
        pytest.skip(f"the docs tools are not installed ({', '.join(missing_tools())}): "
                    "python -m pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    return out


def text_of(path):
    """The visible text of an HTML page."""
    page = re.sub(r"<script.*?</script>", "", path.read_text(), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_every_page_is_built(site):
    pages = ["readme", "changelog", "api"] + [p.stem for p in (ROOT / "docs").glob("*.md") if p.stem != "index"]
    for name in pages:
        assert (site / name / "index.html").is_file(), name
    assert (site / "index.html").is_file()


def test_repository_links_become_site_links(site):
    readme = (site / "readme" / "index.html").read_text()
    assert 'href="../buffers/"' in readme and 'href="../changelog/"' in readme
    assert 'href="docs/' not in readme
    assert 'href="readme/"' in (site / "index.html").read_text()


def test_the_reference_documents_the_package(site):
    reference = text_of(site / "api" / "index.html")
    for name in ("halide_buffer.aot", "halide_buffer.opencl", "halide_buffer.cuda", "load", "as_array",
                 "wrap", "from_dlpack", "get_include", "dlpack_type", "transposed"):
        assert name in reference, name
    # Signatures from the stubs, docstrings from the compiled extension where the stubs have none
    # (less pybind11's signature line), Sphinx roles as code.
    assert "copy_to_device(device: Device | None = None) -> None" in reference
    assert hb.Buffer.copy_to_host.__doc__.strip().splitlines()[-1] in reference
    assert "copy_to_host(self" not in reference
    assert ":class:" not in reference


def test_the_pages_show_the_figures(site):
    # A missing figure fails the strict build itself; here, the shown ones reach the site as
    # images and their sources stay out of it.
    assert 'src="../figures/residency.svg"' in (site / "devices" / "index.html").read_text()
    assert 'src="../figures/layers.svg"' in (site / "architecture" / "index.html").read_text()
    assert 'src="../figures/bench_calls.svg"' in (site / "performance" / "index.html").read_text()
    shown = sorted(p.name for p in (site / "figures").iterdir())
    assert shown == sorted(p.name for p in (ROOT / "docs" / "figures").glob("*.svg"))
