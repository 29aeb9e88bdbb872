"""Every code example of the README and docs/*.md runs, and the values its comments state hold.

The rules are in doc_examples.py (and, for authors, docs/contributing.md). Each page runs once,
in a process of its own in a new folder, the first time one of its examples is reported; each
example is a test of its own, so a failure names the page and line.
"""

import subprocess
import sys
import textwrap

import pytest

import doc_examples

EXAMPLES = [block for page in doc_examples.pages() for block in doc_examples.examples(page)]
DRIVER = doc_examples.__file__


def run_page(page, folder):
    """Runs a page's examples in folder: ({line: 'ok' or 'fail'}, exit status, output)."""
    results = folder / f"results-{page.replace('/', '_')}.txt"
    proc = subprocess.run([sys.executable, "-W", "error", DRIVER, page, str(results)], cwd=folder,
                          env=doc_examples.child_environment(), capture_output=True, text=True,
                          timeout=600)
    outcomes = {}
    if results.exists():
        for line in results.read_text().splitlines():
            word, number = line.split()
            outcomes[int(number)] = word
    return outcomes, proc.returncode, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}"


class PageRuns:
    """Runs each page once, after the pages it names with 'after', in a folder of its own."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.done = {}

    def __call__(self, page):
        if page not in self.done:
            folder = self.tmp_path_factory.mktemp("doc_examples")
            first = {after for block in doc_examples.examples(page) for after in block.after}
            failed = ""
            for other in sorted(first):
                _, status, output = run_page(other, folder)
                if status != 0:
                    failed += f"{other}, which {page} runs after, failed:\n{output}\n"
            self.done[page] = ({}, 1, failed) if failed else run_page(page, folder)
        return self.done[page]


@pytest.fixture(scope="session")
def page_runs(tmp_path_factory):
    return PageRuns(tmp_path_factory)


@pytest.mark.parametrize("block", EXAMPLES, ids=[f"{b.page}:{b.line}" for b in EXAMPLES])
def test_example(block, page_runs):
    if block.skip:
        pytest.skip(f"{block.page}:{block.line}: {block.skip}")
    outcomes, _, output = page_runs(block.page)
    outcome = outcomes.get(block.line)
    if outcome is None:
        pytest.fail(f"{block.page}:{block.line} did not run: an earlier step failed\n{output}")
    assert outcome == "ok", f"{block.page}:{block.line} failed\n{output}"


# -- the runner's own rules, on pages written here --------------------------------------------


def page(tmp_path, text):
    """A Markdown page in tmp_path and its path."""
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text))
    return str(path)


def run_here(path, tmp_path):
    """The outcome of each example of the page at path, and the process's output."""
    outcomes, _, output = run_page(path, tmp_path)
    return [outcomes.get(b.line) for b in doc_examples.examples(path)], output


def test_stated_values_are_checked(tmp_path):
    path = page(tmp_path, """\
        ```python
        x = (1, 2)
        x        # (1, 2): a literal, then prose
        len(x)   # two: prose, not checked
        ```

        ```python
        x[0]     # 5
        ```
        """)
    outcomes, output = run_here(path, tmp_path)
    assert outcomes == ["ok", "fail"]
    assert "x[0] is 1; the comment says 5" in output


def test_a_stated_value_may_go_on_below(tmp_path):
    path = page(tmp_path, """\
        ```python
        [1,      # no value: not an expression's last line
         2]      # [1,
                 #  3]
        ```
        """)
    outcomes, output = run_here(path, tmp_path)
    assert outcomes == ["fail"]
    assert "[1, 2] is [1, 2]; the comment says [1, 3]" in output


def test_blocks_share_a_namespace_and_bash_runs_only_when_marked(tmp_path):
    path = page(tmp_path, """\
        ```bash
        touch not-made
        ```

        <!-- test: run -->
        ```bash
        python -c 'open("made", "w").write("7")'
        ```

        ```python
        import os
        value = int(open("made").read())
        ```

        ```python
        value, os.path.exists("not-made")   # (7, False)
        ```
        """)
    assert [b.lang for b in doc_examples.examples(path)] == ["bash", "python", "python"]
    outcomes, output = run_here(path, tmp_path)
    assert outcomes == ["ok", "ok", "ok"], output


def test_skipped_blocks_do_not_run(tmp_path):
    path = page(tmp_path, """\
        <!-- test: skip (needs hardware this machine lacks) -->
        ```python
        raise SystemExit(3)
        ```
        """)
    (block,) = doc_examples.examples(path)
    assert block.skip == "needs hardware this machine lacks"
    outcomes, output = run_here(path, tmp_path)
    assert outcomes == [None] and "exit status 0" in output


@pytest.mark.parametrize("marker, message", [
    ("skip", "unknown marker 'skip'"),
    ("skipp (no GPU)", "unknown marker"),
    ("run", "'run' marks a bash block"),
])
def test_a_bad_marker_is_an_error(tmp_path, marker, message):
    path = page(tmp_path, f"<!-- test: {marker} -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match=message):
        doc_examples.examples(path)
