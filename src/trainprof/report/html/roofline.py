"""The HTML report's roofline: a log-log chart (one point per op and shape, the device's
ceilings) and the collectives' bus bandwidth table. Every trace string is escaped here or by
the template."""

from __future__ import annotations

import math

from markupsafe import Markup, escape

from trainprof.analysis.job.collective_ranks import CollectiveRanks
from trainprof.analysis.roofline.collectives import Collectives
from trainprof.analysis.roofline.section import Roofline
from trainprof.formatting import counted
from trainprof.report.html import svg
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import Column, Table, num, text

#: Our colours per op class (never from a trace).
CLASS_COLORS = {"gemm": "#4e79a7", "conv_fwd": "#59a14f", "conv_bwd": "#8cd17d",
                "attention_fwd": "#e15759", "attention_bwd": "#ff9d9a", "norm": "#b07aa1",
                "softmax": "#f28e2b", "elementwise": "#9c755f"}
CEILING_COLOR = "#555555"
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 12, 24, 40


def _decades(low: float, high: float) -> tuple[int, int]:
    return math.floor(math.log10(low)), math.ceil(math.log10(high))


def roofline_chart(roof: Roofline | None) -> Chart | None:
    """Achieved TFLOP/s against arithmetic intensity, log-log, under the device's roofs."""
    rows = [r for r in (roof.shapes if roof is not None else [])
            if r.intensity > 0 and r.achieved_tflops > 0]
    device = roof.device if roof is not None else None
    if not rows or roof is None or device is None:
        return None
    bandwidth = float(device.hbm_tb_s)
    peaks: dict[str, float] = {c: peak for r in rows for c in (r.ceiling or "").split(",")
                               if c and (peak := device.peak_tflops.get(c))}
    xs = [r.intensity for r in rows] + [p / bandwidth for p in peaks.values()]
    ys = [r.achieved_tflops for r in rows] + list(peaks.values())
    x0, x1 = _decades(min(xs) / 2, max(xs) * 4)
    y0, y1 = _decades(min(ys) / 2, max(ys) * 2)
    w, h = svg.WIDTH - _LEFT - _RIGHT, svg.HEIGHT - _TOP - _BOTTOM

    def x_of(x: float) -> float:
        return _LEFT + w * (math.log10(x) - x0) / (x1 - x0)

    def y_of(y: float) -> float:
        y = min(max(y, 10.0**y0), 10.0**y1)
        return _TOP + h * (1 - (math.log10(y) - y0) / (y1 - y0))

    body = []
    for d in range(y0, y1 + 1):
        y = svg._n(y_of(10.0**d))
        body.append(f'<line class="grid" x1="{_LEFT}" x2="{svg.WIDTH - _RIGHT}" y1="{y}" '
                    f'y2="{y}"/><text class="tick" x="{_LEFT - 6}" y="{y}" text-anchor="end" '
                    f'dominant-baseline="middle">{escape(f"{10.0**d:g}")}</text>')
    for d in range(x0, x1 + 1):
        body.append(f'<text class="tick" x="{svg._n(x_of(10.0**d))}" '
                    f'y="{svg.HEIGHT - _BOTTOM + 14}" text-anchor="middle">'
                    f'{escape(f"{10.0**d:g}")}</text>')
    body.append(f'<text class="axis" x="{_LEFT - 6}" y="{_TOP - 12}" text-anchor="end">'
                "TFLOP/s</text>")
    body.append(f'<text class="axis" x="{svg._n(_LEFT + w / 2)}" y="{svg.HEIGHT - 6}" '
                'text-anchor="middle">FLOP per byte (arithmetic intensity)</text>')
    lo, hi = 10.0**x0, 10.0**x1
    for name, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        ridge = peak / bandwidth
        pts = " ".join(f"{svg._n(x_of(x))},{svg._n(y_of(y))}"
                       for x, y in ((lo, lo * bandwidth), (ridge, peak), (hi, peak)))
        tip = (f"{name} roof: {peak:g} TFLOP/s, {bandwidth:g} TB/s, ridge at "
               f"{ridge:.0f} FLOP/B")
        body.append(f'<polyline fill="none" stroke="{CEILING_COLOR}" stroke-width="1.5" '
                    f'points="{pts}"><title>{escape(tip)}</title></polyline>')
        body.append(f'<text class="tick" x="{svg.WIDTH - _RIGHT - 4}" '
                    f'y="{svg._n(y_of(peak) - 5)}" text-anchor="end">{escape(name)}</text>')
    for r in rows:
        color = CLASS_COLORS.get(r.op_class, "#999999")
        pct = r.pct_of_roofline
        tip = (f"{r.op} {r.shape} {r.dtype}: {r.achieved_tflops:.2f} TFLOP/s at "
               f"{r.intensity:.1f} FLOP/B" + ("" if pct is None else f", {pct:.1f}% of "
                                              "roofline") + f", {counted(r.calls, 'call')}")
        body.append(f'<circle cx="{svg._n(x_of(r.intensity))}" '
                    f'cy="{svg._n(y_of(r.achieved_tflops))}" r="4" fill="{color}" '
                    f'fill-opacity="0.8"><title>{escape(tip)}</title></circle>')
    classes = sorted({r.op_class for r in rows})
    legend = svg.legend([svg.Series(c, CLASS_COLORS.get(c, "#999999")) for c in classes]
                        + [svg.Series("device roofs", CEILING_COLOR)])
    caption = (f"{device.name} ({roof.device_source}): one point per op, shape and "
               "dtype; hover for figures.")
    return Chart(Markup(svg._svg(body, "Roofline: achieved TFLOP/s against FLOP per byte")),
                 legend, caption)


def roofline_table(roof: Roofline | None) -> Table | None:
    rows = roof.classes if roof is not None else []
    if not rows:
        return None
    cols = [Column("op class", numeric=False), Column("dtype", numeric=False), Column("calls"),
            Column("ms"), Column("TFLOP/s"), Column("TB/s"), Column("bound", numeric=False),
            Column("% of roofline"), Column("ms lost", title="time beyond the roofline")]
    table = Table(cols)
    for r in rows:
        lost = r.lost_us
        table.rows.append([text(r.op_class), text(r.dtype), num(r.calls, 0),
                           num(r.time_us / 1000, 2), num(r.achieved_tflops, 1),
                           num(r.achieved_tb_s, 2), text(r.bound or "n/a"),
                           num(r.pct_of_roofline, 1, "%"),
                           num(None if lost is None else lost / 1000, 2)])
    return table


def collectives_table(coll: Collectives | None) -> Table | None:
    rows = coll.rows if coll is not None else []
    if not rows:
        return None
    cols = [Column("collective", numeric=False), Column("MB"), Column("ranks"),
            Column("calls"), Column("ms"), Column("algbw GB/s"),
            Column("busbw GB/s", title="nccl-tests' bus bandwidth"),
            Column("% of link", title="of the per-direction link (or NIC) peak")]
    table = Table(cols)
    for r in rows:
        table.rows.append([text(r.type), num(r.bytes / 1e6, 2), num(r.group_size, 0),
                           num(r.count, 0), num(r.time_us / 1000, 2), num(r.algbw_gb_s, 1),
                           num(r.busbw_gb_s, 1), num(r.pct_of_peak, 1, "%")])
    return table


def collective_ranks_table(job: CollectiveRanks | None) -> Table | None:
    """Each rank's bus bandwidth (two ranks or more), the slowest marked."""
    rows = job.rows if job is not None else []
    if len(rows) < 2:
        return None
    cols = [Column("rank"), Column("calls"), Column("ms"), Column("busbw GB/s"),
            Column("% of link"), Column("", numeric=False)]
    table = Table(cols)
    for r in rows:
        slowest = job.slowest if job is not None else None
        table.rows.append([num(r.rank, 0), num(r.calls, 0), num(r.time_us / 1000, 2),
                           num(r.busbw_gb_s, 1), num(r.pct_of_peak, 1, "%"),
                           text("slowest" if slowest is not None and r.rank == slowest.rank
                                else "")])
    return table
