"""The critical path in the HTML report: one step's path on a time axis, a lane per host thread
and device stream, and the what-if table beside it. Reads the rank's ``CriticalPath`` record
(analysis/critical_path/result.py)."""

from __future__ import annotations

from markupsafe import Markup, escape

from trainprof.analysis.critical_path.result import CriticalPath, StepPath
from trainprof.report.html import svg
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import Cell, Column, Table, num
from trainprof.report.names import distinct_names
from trainprof.report.terminal.critical_path import CATEGORY_LABELS

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
    table = Table(columns=[Column("on the path", numeric=False), Column("% of path"),
                           Column("step ms if 0", title="mean step time with it at zero"),
                           Column("if half"), Column("saves ≤ %", title="upper bound")],
                  caption="What if it took no time, or half (the graph replayed)")
    names = distinct_names([item.name for item in items])  # C++ names shortened, told apart
    for item, name in zip(items, names, strict=True):
        whole = f"{item.kind}: {item.name}"
        shown = f"{item.kind}: {name}"
        table.rows.append([Cell(shown, title=whole if shown != whole else ""),
                           num(item.on_path_pct),
                           num(item.step_ms_if_zero, 2), num(item.step_ms_if_half, 2),
                           num(item.saving_pct_if_zero)])
    return table


def split_table(section: CriticalPath | None) -> Table | None:
    split = {} if section is None else section.split_pct
    if not split:
        return None
    table = Table(columns=[Column("where the path's time goes", numeric=False),
                           Column("% of step")])
    for key, pct in sorted(split.items(), key=lambda kv: -kv[1]):
        if pct > 0:
            table.rows.append([Cell(CATEGORY_LABELS.get(key, key)), num(pct)])
    return table
