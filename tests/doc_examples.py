"""The code examples of the README and docs/*.md, found and run as the reader would run them.

The rules (docs/contributing.md states them for authors):

- The ```python blocks of a page run in order, in one namespace, in a fresh Python process
  (warnings are errors) whose working directory is a new, empty folder.
- ```bash blocks are commands for the reader (installs, test runs) and do not run, except those
  marked `<!-- test: run -->`: they run in that folder, in order with the Python blocks, with
  the same Python first on PATH.
- `<!-- test: after PAGE -->` (PAGE from the repository root): the page's examples run after
  PAGE's, in the same folder, so they can use the files PAGE makes (a pipeline it builds).
- `<!-- test: skip (REASON) -->`: the block does not run; it is reported as skipped with REASON.
  Only for what the machine running the tests may lack (an NVIDIA GPU, CuPy).
- A top-level expression whose line ends in a comment that is a Python literal, or starts with
  one followed by ": ", must evaluate to that value: `b.shape  # (480, 640)`. The comment may go
  on in comment lines right below that start in the same column. A comment that is not a
  literal (`# e.g. ...`, prose) is not checked.

Markers are HTML comments on the lines right above the block's fence (invisible once rendered).
Run as a script, `python doc_examples.py PAGE RESULTS` runs one page's examples in the current
folder and writes `ok LINE` / `fail LINE` to RESULTS as each block finishes.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*test:\s*(?P<text>.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip \((?P<reason>.+)\)$")
AFTER = re.compile(r"^after (?P<page>\S+\.md)$")


@dataclass
class Block:
    """One fenced code block of a page."""

    page: str  # as given: from the repository root for the project's pages
    line: int  # the line of its first line of code (1-based)
    lang: str
    code: str
    skip: str | None = None  # the reason it does not run
    run: bool = False  # a bash block marked to run
    after: list[str] = field(default_factory=list)

    @property
    def is_example(self) -> bool:
        """Python blocks and the bash blocks marked to run: the blocks the tests report."""
        return self.lang == "python" or (self.lang == "bash" and self.run)


def pages() -> list[str]:
    """The pages whose examples run: the README and every page of docs/."""
    return ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))


def apply_marker(block: Block, text: str) -> None:
    """Records one marker on its block; a marker the runner does not know is an error."""
    where = f"{block.page}:{block.line - 1}"
    if text == "run":
        if block.lang != "bash":
            raise ValueError(f"{where}: 'run' marks a bash block; Python blocks always run")
        block.run = True
    elif m := SKIP.match(text):
        block.skip = m["reason"]
    elif m := AFTER.match(text):
        block.after.append(m["page"])
    else:
        raise ValueError(f"{where}: unknown marker {text!r}; the markers are 'skip (reason)', "
                         "'run' and 'after PAGE'")


def blocks(page: str, text: str | None = None) -> list[Block]:
    """Every fenced block of a page, with its markers."""
    lines = (ROOT / page).read_text().splitlines() if text is None else text.splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, start = len(m["indent"]), m["fence"], i
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            i += 1
        code = "\n".join(line[indent:] for line in lines[start + 1:i]) + "\n"
        block = Block(page, start + 2, m["lang"], code)
        markers = []
        k = start - 1
        while k >= 0 and (marker := MARKER.match(lines[k])):
            markers.insert(0, marker["text"])
            k -= 1
        for marker in markers:
            apply_marker(block, marker)
        found.append(block)
        i += 1
    return found


def examples(page: str, text: str | None = None) -> list[Block]:
    """The blocks of a page the tests report: Python blocks and bash blocks marked to run."""
    return [b for b in blocks(page, text) if b.is_example]


# -- checked values --------------------------------------------------------------------------

NOTHING = object()


def comments(code: str) -> dict[int, tuple[int, str, bool]]:
    """{row: (column, text after '#', whether the row holds only the comment)}, rows from 1."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            alone = not tok.line[:col].strip()
            found[row] = (col, tok.string[1:].strip(), alone)
    return found


def literal(text: str):
    """The value a comment states: the whole comment or its part before ': ', if a literal."""
    for candidate in (text, text.split(": ", 1)[0]):
        try:
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if value is not Ellipsis:
            return value
    return NOTHING


def stated_value(stmt: ast.stmt, notes: dict[int, tuple[int, str, bool]]):
    """What the comment ending an expression statement says it evaluates to, or NOTHING."""
    if not isinstance(stmt, ast.Expr) or stmt.end_lineno not in notes:
        return NOTHING
    col, text, alone = notes[stmt.end_lineno]
    if alone:
        return NOTHING
    row = stmt.end_lineno + 1
    while row in notes and notes[row][2] and notes[row][0] == col:
        text += " " + notes[row][1]
        row += 1
    return literal(text)


# -- running a page (in the child process) ----------------------------------------------------


def run_python(block: Block, filename: str, namespace: dict) -> None:
    """Runs a Python block statement by statement, checking the values its comments state."""
    notes = comments(block.code)
    tree = ast.parse(block.code, filename)
    for stmt in tree.body:
        expected = stated_value(stmt, notes)
        ast.increment_lineno(stmt, block.line - 1)
        if expected is NOTHING:
            exec(compile(ast.Module([stmt], type_ignores=[]), filename, "exec"), namespace)
            continue
        value = eval(compile(ast.Expression(stmt.value), filename, "eval"), namespace)
        if not bool(value == expected):
            raise AssertionError(f"{block.page}:{stmt.lineno}: {ast.unparse(stmt.value)} is {value!r}; "
                                 f"the comment says {expected!r}")


def run_bash(block: Block) -> None:
    """Runs a bash block in the current folder, stopping at the first failing command."""
    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], check=True)


def run_page(page: str, results: str) -> int:
    """Runs a page's examples here, in order; 0 when all of them passed."""
    filename = str(ROOT / page)  # a path from the repository root, or an absolute one
    text = Path(filename).read_text()
    namespace = {"__name__": "__main__"}
    with open(results, "a") as out:
        for block in examples(page, text):
            if block.skip:
                continue
            try:
                if block.lang == "python":
                    run_python(block, filename, namespace)
                else:
                    run_bash(block)
            except BaseException as e:
                tb = e.__traceback__  # from the page's first frame on, if it has one
                while tb is not None and tb.tb_frame.f_code.co_filename != filename:
                    tb = tb.tb_next
                traceback.print_exception(type(e), e, tb or e.__traceback__)
                print(f"fail {block.line}", file=out, flush=True)
                return 1
            print(f"ok {block.line}", file=out, flush=True)
    return 0


def child_environment() -> dict[str, str]:
    """The environment of a page's process: this Python first on PATH (for `python` in bash)."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


if __name__ == "__main__":
    sys.exit(run_page(sys.argv[1], sys.argv[2]))
