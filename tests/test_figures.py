"""The documentation's figures (docs/figures/*.svg) are drawn from their sources by
tools/draw_figures.py, shown by the pages, and say what the pages' text and tables say: the
residency states and transitions of docs/architecture.md, the benchmark figures of
docs/performance.md. Needs no docs tools (tests/test_docs_site.py builds the site)."""

import copy
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
spec = importlib.util.spec_from_file_location("draw_figures", ROOT / "tools" / "draw_figures.py")
draw_figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(draw_figures)

IMAGE = re.compile(r"!\[[^\]]+\]\(figures/([^)\s]+)\)")


def section(markdown, heading):
    """The text under the heading that starts with `heading`, up to the next heading."""
    starts = [m for m in re.finditer(r"^#+ (.*)$", markdown, re.M) if m.group(1).startswith(heading)]
    assert len(starts) == 1, f"want one heading starting with {heading!r}, found {len(starts)}"
    rest = markdown[starts[0].end():]
    following = re.search(r"^#+ ", rest, re.M)
    return rest[:following.start()] if following else rest


def tables(text):
    """The Markdown tables of a text, each a list of rows of cells (the header first, no rule)."""
    found, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            found.append(rows)
            rows = []
    return found


def figures_in(cell):
    """The numbers of a ratio cell, before any bracket: `**0.98x**`, `0.77x, 0.74x, 0.74x (...)`."""
    return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", cell.replace("**", "").split("(")[0])]


def test_every_figure_is_drawn_from_its_source():
    stale = [name for name, drawing in draw_figures.figures().items()
             if not (DOCS / "figures" / name).is_file() or (DOCS / "figures" / name).read_text() != drawing]
    assert not stale, f"{', '.join(stale)} differ from their sources: run python tools/draw_figures.py"


def test_every_figure_is_shown_and_every_image_exists():
    shown = {name for page in DOCS.glob("*.md") for name in IMAGE.findall(page.read_text())}
    committed = {p.name for p in (DOCS / "figures").glob("*.svg")}
    assert shown <= committed, f"images the pages show that docs/figures/ lacks: {sorted(shown - committed)}"
    assert committed <= shown, f"figures no page shows: {sorted(committed - shown)}"
    assert committed == set(draw_figures.figures()), "a figure in docs/figures/ no source draws"


def test_an_edge_must_join_the_nodes_it_names():
    source = copy.deepcopy(draw_figures.load("residency"))
    edge = next(e for e in source["edge"] if e.get("from") == "HOST ONLY" and e["to"] == "HOST NEWER")
    edge["to"] = "IN SYNC"
    with pytest.raises(SystemExit, match="not on IN SYNC's border"):
        draw_figures.draw_diagram(source, "residency")


def test_the_residency_states_are_those_of_the_architecture():
    architecture = (DOCS / "architecture.md").read_text()
    states_table = tables(section(architecture, "States"))[0]
    states = [row[0] for row in states_table[1:]]
    source = draw_figures.load("residency")
    assert [node["name"] for node in source["node"]] == states, \
        "docs/figures/residency.toml's states are not those of the States table"
    for state in states:
        assert any(e.get("from") == state for e in source["edge"]), f"no transition leaves {state}"
        assert any(e.get("to") == state for e in source["edge"]), f"no transition reaches {state}"
        assert state in (DOCS / "devices.md").read_text(), f"docs/devices.md does not name {state}"
    ends = {e.get("from", states[0]) for e in source["edge"]} | {e["to"] for e in source["edge"]}
    assert ends <= set(states), f"transitions between no states: {sorted(ends - set(states))}"


def test_the_residency_transitions_are_named_in_the_architecture():
    transitions = section((DOCS / "architecture.md").read_text(), "Transitions")
    source = draw_figures.load("residency")
    names = {name for e in source["edge"] for line in e.get("label", []) for name in line.split("`")[1::2]}
    assert names, "the residency figure names no operation"
    missing = sorted(name for name in names if name not in transitions)
    assert not missing, f"the residency figure names operations the Transitions table does not: {missing}"


def test_the_benchmark_charts_hold_the_figures_of_the_tables():
    performance = (DOCS / "performance.md").read_text()
    for chart in draw_figures.load("benchmarks")["chart"]:
        text = section(performance, chart["section"])
        for s, series in enumerate(chart["series"]):
            header, *rows = tables(text)[series.get("table", chart.get("table", 1)) - 1]
            column = header.index(series["column"])
            for row in chart["row"]:
                case = [row["case"]] if isinstance(row["case"], str) else row["case"]
                matching = [r for r in rows if r[:len(case)] == case]
                assert len(matching) == 1, f"{chart['file']}: want one row {case} in {chart['section']!r}"
                wanted = draw_figures.values_of(row["values"][s])
                assert figures_in(matching[0][column]) == wanted, \
                    f"{chart['file']}: {case}, {series['column']!r}: the table says {matching[0][column]}"
