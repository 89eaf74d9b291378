"""The critical path's renderers (docs/critical_path.md): what sets the step time, and the
what-if table. The HTML page draws one step's path on a time axis, a lane per host thread and
device stream, with the split and the what-if table beside it; trace strings are escaped here
(the chart) or by the template (the tables), and go through md_text in the Markdown."""

from __future__ import annotations

from markupsafe import Markup, escape
from rich.console import Group, RenderableType
from rich.text import Text

from trainprof.analysis.critical_path.result import CriticalPath, StepPath
from trainprof.formatting import counted, number
from trainprof.report.html import svg
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import Cell, Column, Table, num
from trainprof.report.markdown.text import md_text, table
from trainprof.report.names import distinct_names
from trainprof.report.names import short_name as short_kernel_name
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    name_room,
    pct,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: How the split's keys read in the report.
CATEGORY_LABELS = {
    "host_compute": "host compute (ops)",
    "launch_overhead": "launch overhead",
    "gpu_compute": "GPU compute",
    "gpu_communication": "GPU communication",
    "copies": "copies",
    "sync_wait": "sync waits",
    "data_loading": "data loading",
    "untraced_host": "untraced host time",
}
ITEM_WIDTH = 48
#: The what-if table's number columns.
WHAT_IF_HEADERS = ("% of path", "step ms if 0", "if half", "saves ≤")
#: Colours of the path's categories (ours, never from a trace).
PATH_COLORS = {
    "host_compute": "#4e79a7",
    "launch_overhead": "#f28e2b",
    "gpu_compute": "#59a14f",
    "gpu_communication": "#b07aa1",
    "copies": "#edc948",
    "sync_wait": "#e15759",
    "data_loading": "#9c755f",
    "untraced_host": "#bab0ac",
}
LANE_HEIGHT, LANE_GAP, LABEL_WIDTH, AXIS_HEIGHT = 22, 6, 150, 30


def text(result: CriticalPath, ctx: ViewContext) -> Group | None:
    if not result.steps or result.step_ms is None:
        return None
    head = Text(f"Critical path: what sets the step time ({result.step_ms:.2f} ms a step, "
                f"{counted(len(result.steps), 'step')})", style="italic")
    split = compact_table()
    split.add_column("")
    add_number_columns(split, "ms/step", "% of step")
    n = len(result.steps)
    for key, us in sorted(result.split_us.items(), key=lambda kv: -kv[1]):
        if us > 0:
            split.add_row(CATEGORY_LABELS[key], f"{us / n / 1000:.2f}", pct(result.split_pct[key]))
    parts: list[RenderableType] = [head, split]
    if result.items:
        parts += [Text("What if one item on the path took no time, or half (the graph "
                       "replayed, so work that moves onto the path is counted):"),
                  ByWidth(lambda width: _what_if(result, width))]
    parts += [Text(note, style="dim") for note in result.notes]
    return Group(*parts)


def _what_if(result: CriticalPath, width: int) -> RenderableType:
    """The what-if table: each item's name shortened (C++ names, report/names.py) to the room
    its column has, and never two alike."""
    numbers = [[pct(item.on_path_pct), f"{item.step_ms_if_zero:.2f}",
                f"{item.step_ms_if_half:.2f}", pct(item.saving_pct_if_zero)]
               for item in result.items]
    room = name_room(width, [[h, *(row[i] for row in numbers)]
                             for i, h in enumerate(WHAT_IF_HEADERS)])
    kinds = [f"{item.kind}: " for item in result.items]
    longest_kind = max(map(len, kinds))
    names = distinct_names([item.name for item in result.items], max(room - longest_kind, 8))
    t = compact_table()
    add_name_column(t, "on the path", ITEM_WIDTH)
    add_number_columns(t, *WHAT_IF_HEADERS)
    for kind, name, row in zip(kinds, names, numbers, strict=True):
        t.add_row(name_cell(kind + name, ITEM_WIDTH), *row)
    return t


def html(path: CriticalPath | None, ctx: ViewContext) -> list[HtmlBlock]:
    chart = path_chart(path)
    if chart is None:
        return []
    tables = [t for t in (split_table(path), what_if_table(path)) if t]
    return [HtmlBlock("Critical path: what sets the step time", [chart, *tables], beside=True)]


def _median_step(steps: list[StepPath]) -> StepPath:
    ordered = sorted(steps, key=lambda s: s.step_us)
    return ordered[len(ordered) // 2]


def path_chart(section: CriticalPath | None) -> Chart | None:
    """The path of the median step (by length), drawn lane by lane: the pieces its JSON shows."""
    steps = [] if section is None else section.steps
    if not steps:
        return None
    step = _median_step(steps)
    pieces = step.shown
    if not pieces:
        return None
    lanes = sorted({p.lane for p in pieces}, key=lambda lane: (not lane.startswith("host"), lane))
    start, length = step.start_us, max(step.step_us, 1e-9)
    width = svg.WIDTH - LABEL_WIDTH - 12
    height = AXIS_HEIGHT + len(lanes) * (LANE_HEIGHT + LANE_GAP)
    body = []
    for i, lane in enumerate(lanes):
        y = AXIS_HEIGHT + i * (LANE_HEIGHT + LANE_GAP)
        body.append(f'<text class="tick" x="{LABEL_WIDTH - 6}" y="{y + LANE_HEIGHT / 2:.1f}" '
                    f'text-anchor="end" dominant-baseline="middle">{escape(lane)}</text>')
    ticks = svg.nice_ticks(length / 1000.0)
    digits = svg.tick_digits(ticks)
    for tick in ticks:
        x = LABEL_WIDTH + width * tick * 1000.0 / length
        if x > LABEL_WIDTH + width + 0.5:
            continue
        body.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{AXIS_HEIGHT - 4}" '
                    f'y2="{height}"/><text class="tick" x="{x:.1f}" y="{AXIS_HEIGHT - 10}" '
                    f'text-anchor="middle">{escape(f"{tick:.{digits}f}")}</text>')
    body.append(f'<text class="axis" x="{LABEL_WIDTH - 6}" y="{AXIS_HEIGHT - 10}" '
                'text-anchor="end">ms</text>')
    for p in pieces:
        y = AXIS_HEIGHT + lanes.index(p.lane) * (LANE_HEIGHT + LANE_GAP)
        x = LABEL_WIDTH + width * (p.start_us - start) / length
        w = max(width * (p.end_us - p.start_us) / length, 0.6)
        what = p.name or "(between recorded ranges)"
        tip = (f"{CATEGORY_LABELS.get(p.category, p.category)}: {what} · "
               f"{(p.end_us - p.start_us) / 1000:.3f} ms")
        color = PATH_COLORS.get(p.category, "#999999")
        body.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{LANE_HEIGHT}" '
                    f'fill="{color}"><title>{escape(tip)}</title></rect>')
    label = f"Critical path of step {step.step}"
    chart = Markup(f'<svg class="chart" viewBox="0 0 {svg.WIDTH} {height}" role="img" '
                   f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
                   + "".join(body) + "</svg>")
    used = [c for c in PATH_COLORS if any(p.category == c for p in pieces)]
    legend = svg.legend([svg.Series(CATEGORY_LABELS[c], PATH_COLORS[c]) for c in used])
    shown = len(pieces)
    caption = (f"Step {step.step} (the median of {len(steps)}), {step.step_us / 1000:.2f} "
               f"ms: the chain of work that ends last; its {shown} longest pieces of "
               f"{step.pieces_total} are drawn.")
    return Chart(svg=chart, legend=legend, caption=caption)


def what_if_table(section: CriticalPath | None) -> Table | None:
    """The split of the path and the what-if rows, one table."""
    items = [] if section is None else section.items
    if not items:
        return None
    out = Table(columns=[Column("on the path", numeric=False), Column("% of path"),
                         Column("step ms if 0", title="mean step time with it at zero"),
                         Column("if half"), Column("saves ≤ %", title="upper bound")],
                caption="What if it took no time, or half (the graph replayed)")
    names = distinct_names([item.name for item in items])  # C++ names shortened, told apart
    for item, name in zip(items, names, strict=True):
        whole = f"{item.kind}: {item.name}"
        shown = f"{item.kind}: {name}"
        out.rows.append([Cell(shown, title=whole if shown != whole else ""),
                         num(item.on_path_pct),
                         num(item.step_ms_if_zero, 2), num(item.step_ms_if_half, 2),
                         num(item.saving_pct_if_zero)])
    return out


def split_table(section: CriticalPath | None) -> Table | None:
    split = {} if section is None else section.split_pct
    if not split:
        return None
    out = Table(columns=[Column("where the path's time goes", numeric=False),
                         Column("% of step")])
    for key, share in sorted(split.items(), key=lambda kv: -kv[1]):
        if share > 0:
            out.rows.append([Cell(CATEGORY_LABELS.get(key, key)), num(share)])
    return out


def markdown(path: CriticalPath | None, ctx: ViewContext) -> str:
    """The path's split and its what-if table (docs/critical_path.md)."""
    if path is None or not path.step_ms:
        return ""
    split = [[CATEGORY_LABELS.get(k, k), number(v, 1, "%")]
             for k, v in sorted(path.split_pct.items(), key=lambda kv: -kv[1]) if v > 0]
    out = [f"{number(path.step_ms, 2)} ms a step, replayed.", "",
           table(["on the path", "% of step"], split, "lr")]
    items = [[md_text(f"{i.kind}: " + (short_kernel_name(i.name) if i.kind == "kernel"
                                        else i.name)), number(i.on_path_pct, 1, "%"),
              number(i.step_ms_if_zero, 2), number(i.step_ms_if_half, 2),
              number(i.saving_pct_if_zero, 1, "%")] for i in path.items]
    if items:
        out += ["", table(["item", "% of path", "step ms if 0", "if half", "saves ≤"], items,
                          "lrrrr")]
    return "\n".join(out)


VIEW = SectionView("critical_path", text=text, html=html, markdown=markdown,
                   markdown_heading="What sets the step time: the critical path")
