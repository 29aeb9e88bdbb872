"""Draws the documentation's figures, docs/figures/*.svg, from their sources in docs/figures/.

    python tools/draw_figures.py           # writes every figure
    python tools/draw_figures.py --check   # writes nothing; exit status 1 when one differs

Two kinds of source, both TOML:

- a diagram (`layers.toml`, `residency.toml`, `allocation.toml`): boxes (`[[node]]`) and
  arrows (`[[edge]]`) laid out by hand, in pixels. An edge naming the nodes it joins (`from`,
  `to`) must start and end on their borders, so the picture cannot join other boxes than its
  source says.
- `benchmarks.toml`: one bar chart per `[[chart]]` of the ratios docs/performance.md records,
  on a log scale around 1 (the peer), one bar per series and row. tests/test_figures.py checks
  every figure against the page's tables.

The SVG is written as text, with no program beyond Python: every label is a `<text>` element
(searchable, selectable), `code` in backticks is set in a monospace font, and each figure has a
white background so that it reads on light and dark pages. The output depends on the source
alone, so tests/test_figures.py regenerates every figure and compares it with the committed one.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from xml.sax.saxutils import escape

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"
DIAGRAMS = ("layers", "residency", "allocation")
CHARTS = "benchmarks"

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
SIZE = 13                    # labels, in px
LINE = 16                    # from one label line to the next
INK, MUTED = "#222222", "#666666"
NODE_STYLES = {              # fill and stroke of a node, by its `style`
    "box": ("#f4f7fb", "#3a5f8f"),
    "group": ("#ffffff", "#8a9bb0"),
    "folder": ("#eef3f8", "#7d93ad"),
}
# Where a chart's axis may end: powers of two, and closer steps around 1 for narrow ranges.
ENDS = (*(2.0 ** k for k in range(-12, 0)), 0.75, 1.0, 1.25, 1.5, *(2.0 ** k for k in range(1, 8)))
SERIES_COLOURS = ("#3f6fa8", "#e08a2c", "#5b9f5b", "#9467bd")
GOAL_COLOUR = "#c0392b"


# ------------------------------------------------------------------------------------------
# Text

def text_width(line: str, size: float = SIZE) -> float:
    """About how wide a label is: code (in backticks) is monospace, the rest proportional."""
    width = 0.0
    for i, part in enumerate(line.split("`")):
        width += len(part) * size * (0.61 if i % 2 else 0.56)
    return width


def text(x: float, y: float, line: str, *, anchor: str = "start", size: float = SIZE,
         weight: str | None = None, fill: str = INK, halo: bool = False) -> str:
    """A <text> element; the parts of `line` in backticks become monospace <tspan>s."""
    spans = []
    for i, part in enumerate(line.split("`")):
        if not part:
            continue
        spans.append(f'<tspan font-family="{MONO}">{escape(part)}</tspan>' if i % 2 else escape(part))
    attrs = f' text-anchor="{anchor}"' if anchor != "start" else ""
    attrs += f' font-size="{num(size)}"' if size != SIZE else ""
    attrs += f' font-weight="{weight}"' if weight else ""
    attrs += f' fill="{fill}"' if fill != INK else ""
    attrs += ' stroke="#ffffff" stroke-width="3" paint-order="stroke"' if halo else ""
    return f'<text x="{num(x)}" y="{num(y)}"{attrs}>{"".join(spans)}</text>'


def num(value: float) -> str:
    """A coordinate as few characters as it needs (one decimal at most)."""
    return f"{round(value, 1):g}"


def svg(width: float, height: float, title: str, body: list[str]) -> str:
    """A complete SVG document: a title for screen readers, a white page, then `body`."""
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(height)}" '
        f'viewBox="0 0 {num(width)} {num(height)}" font-family="{FONT}" font-size="{SIZE}" '
        f'fill="{INK}" role="img">',
        f"<title>{escape(title)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{INK}"/>'
        "</marker></defs>",
        '<rect width="100%" height="100%" fill="#ffffff"/>',
        *body,
        "</svg>",
        "",
    ])


# ------------------------------------------------------------------------------------------
# Diagrams

def on_border(point: list[float], node: dict) -> bool:
    """Whether a point lies on the border of a node's box."""
    x, y = point
    left, top, right, bottom = node["x"], node["y"], node["x"] + node["w"], node["y"] + node["h"]
    inside = left <= x <= right and top <= y <= bottom
    return inside and min(abs(x - left), abs(x - right), abs(y - top), abs(y - bottom)) < 0.5


def draw_diagram(source: dict, name: str) -> str:
    nodes = {node["name"]: node for node in source["node"]}
    body = []
    for node in source["node"]:
        fill, stroke = NODE_STYLES[node.get("style", "box")]
        x, y, w, h = node["x"], node["y"], node["w"], node["h"]
        body.append(f'<rect x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}" rx="6" '
                    f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>')
        left = node.get("align") == "left"
        tx, anchor = (x + 12, "start") if left else (x + w / 2, "middle")
        title = node.get("title", node["name"])
        body.append(text(tx, y + 21, title, anchor=anchor, weight="bold"))
        for i, line in enumerate(node.get("lines", [])):
            body.append(text(tx, y + 21 + (i + 1) * LINE, line, anchor=anchor, fill=MUTED))
    for edge in source.get("edge", []):
        points = edge["points"]
        for end, point in (("from", points[0]), ("to", points[-1])):
            if end in edge and not on_border(point, nodes[edge[end]]):
                sys.exit(f"{name}.toml: an edge's {end} point {point} is not on {edge[end]}'s border")
        path = " ".join(f"{num(x)},{num(y)}" for x, y in points)
        dash = ' stroke-dasharray="6 4"' if edge.get("dashed") else ""
        body.append(f'<polyline points="{path}" fill="none" stroke="{INK}" stroke-width="1.5"{dash} '
                    'marker-end="url(#arrow)"/>')
        if "label" in edge:
            x, y = edge["label_at"]
            for i, line in enumerate(edge["label"]):
                body.append(text(x, y + i * LINE, line, anchor=edge.get("anchor", "start")))
    for note in source.get("text", []):
        x, y = note["at"]
        for i, line in enumerate(note["lines"]):
            body.append(text(x, y + i * LINE, line, anchor=note.get("anchor", "start"), fill=MUTED))
    return svg(source["width"], source["height"], source["title"], body)


# ------------------------------------------------------------------------------------------
# Bar charts

def values_of(value) -> list[float]:
    """A cell's figures: one number, or one per run."""
    return [float(v) for v in value] if isinstance(value, list) else [float(value)]


def figure(value: float) -> str:
    """A ratio as a bar's label: two decimals, as the tables write them."""
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def draw_chart(chart: dict) -> str:
    """Rows of bars from the 1.0 line on a log scale: left of it below the peer, right above."""
    series, rows = chart["series"], chart["row"]
    every = [v for row in rows for value in row["values"] for v in values_of(value)]
    every += [goal_value(row["goal"]) for row in rows if "goal" in row]
    low = max(end for end in ENDS if end <= min(every + [1.0]) * 0.97)
    high = min(end for end in ENDS if end >= max(every + [1.0]) * 1.03)
    label_w = max(text_width(row_label(row)) for row in rows) + 24
    plot_x, plot_w = 16 + label_w, 480
    goal_x = plot_x + plot_w + 24
    width = goal_x + max([text_width("goal ≤ 1.053")] + [text_width(goal_text(r["goal"]))
                                                          for r in rows if "goal" in r]) + 16

    def x_of(value: float) -> float:
        return plot_x + plot_w * (math.log2(value) - math.log2(low)) / (math.log2(high) - math.log2(low))

    bar_h, gap = 12, 14
    row_h = len(series) * bar_h + gap
    top = 64 if len(series) > 1 else 46
    body = [text(16, 24, chart["title"], weight="bold")]
    if len(series) > 1:
        x = 16
        for colour, s in zip(SERIES_COLOURS, series):
            body.append(f'<rect x="{num(x)}" y="36" width="12" height="12" fill="{colour}"/>')
            body.append(text(x + 18, 47, s["name"]))
            x += 18 + text_width(s["name"]) + 24
    body.append(text(goal_x, top - 6, "goal", fill=MUTED))
    bottom = top + len(rows) * row_h
    for tick in ticks(low, high):
        tx = x_of(tick)
        stroke = ('stroke="#444444" stroke-width="1.5"' if tick == 1 else 'stroke="#dddddd" stroke-width="1"')
        body.append(f'<line x1="{num(tx)}" y1="{num(top - 4)}" x2="{num(tx)}" y2="{num(bottom)}" {stroke}/>')
        body.append(text(tx, bottom + 16, f"{tick:g}×", anchor="middle", fill=MUTED))
    body.append(text(plot_x + plot_w / 2, bottom + 36, chart["axis"], anchor="middle", fill=MUTED))
    one = x_of(1.0)
    value_labels = []  # drawn last, over the bars and goals
    for r, row in enumerate(rows):
        y0 = top + r * row_h + gap / 2
        body.append(text(plot_x - 12, y0 + len(series) * bar_h / 2 + 4.5, row_label(row), anchor="end"))
        for s, (colour, value) in enumerate(zip(SERIES_COLOURS, row["values"])):
            runs = values_of(value)
            y = y0 + s * bar_h
            middle = x_of(statistics.median(runs))
            x, w = min(one, middle), max(abs(middle - one), 1.5)
            body.append(f'<rect x="{num(x)}" y="{num(y + 1)}" width="{num(w)}" height="{num(bar_h - 2)}" '
                        f'fill="{colour}"/>')
            ends = [x_of(min(runs)), x_of(max(runs))]
            if len(runs) > 1:
                body.append(f'<line x1="{num(ends[0])}" y1="{num(y + bar_h / 2)}" x2="{num(ends[1])}" '
                            f'y2="{num(y + bar_h / 2)}" stroke="{INK}" stroke-width="1"/>')
            label = figure(runs[0]) if len(runs) == 1 else f"{figure(min(runs))}–{figure(max(runs))}"
            if middle < one:
                value_labels.append(text(min(ends[0], middle) - 4, y + bar_h - 2, label, anchor="end",
                                         size=11, halo=True))
            else:
                value_labels.append(text(max(ends[1], middle) + 4, y + bar_h - 2, label, size=11, halo=True))
        if "goal" in row:
            gx = x_of(goal_value(row["goal"]))
            body.append(f'<line x1="{num(gx)}" y1="{num(y0 - 3)}" x2="{num(gx)}" '
                        f'y2="{num(y0 + len(series) * bar_h + 3)}" stroke="{GOAL_COLOUR}" '
                        'stroke-width="2.5"/>')
            body.append(text(goal_x, y0 + len(series) * bar_h / 2 + 4.5, goal_text(row["goal"]),
                             fill=GOAL_COLOUR))
    title = chart["title"] + ". " + chart["axis"]
    return svg(width, bottom + 48, title, body + value_labels)


def row_label(row: dict) -> str:
    """A row's label: its own, else the table's cells that name it."""
    if "label" in row:
        return row["label"]
    case = row["case"]
    return case if isinstance(case, str) else ", ".join(case)


def goal_value(goal: str) -> float:
    """The number of a goal, `<= 1.0` or `>= 0.9`."""
    return float(goal.split()[-1])


def goal_text(goal: str) -> str:
    """`<= 1.0` as `≤ 1.0`."""
    return goal.replace("<=", "≤").replace(">=", "≥")


def ticks(low: float, high: float) -> list[float]:
    """The marks of the axis: powers of two, and finer steps where the range is narrow."""
    marks = [m for m in ENDS if math.log2(m).is_integer()]
    if high / low <= 4:
        marks += [0.75, 1.25, 1.5] + ([0.8, 0.9, 1.1] if high / low <= 2 else [])
    return sorted(m for m in marks if low <= m <= high)


# ------------------------------------------------------------------------------------------

def load(name: str) -> dict:
    """A figure source of docs/figures/, parsed."""
    with open(FIGURES / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def figures() -> dict[str, str]:
    """Every figure: its file name in docs/figures/ and its SVG text."""
    drawn = {f"{name}.svg": draw_diagram(load(name), name) for name in DIAGRAMS}
    for chart in load(CHARTS)["chart"]:
        drawn[chart["file"]] = draw_chart(chart)
    return drawn


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    stale = []
    for name, drawing in figures().items():
        path = FIGURES / name
        if path.exists() and path.read_text() == drawing:
            continue
        stale.append(name)
        if not check:
            path.write_text(drawing)
    verb = "differs from its source" if check else "written"
    for name in stale:
        print(f"docs/figures/{name}: {verb}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
