"""The HTML report's memory-snapshot section: the snapshots of a report's input (a snapshot file,
or a folder that holds some beside its traces; ``commands/report.py`` reads and analyses them)
drawn as plain data and charts.

The results go into the report's JSON as ``memory_snapshots`` (a list of
``diagnose.snapshot.snapshot_result`` dicts, or ``{"source", "error"}`` for one that could not be
read), read once into their records (``SnapshotResult``, ``UnreadSnapshot``). Strings stay plain ``str`` for the template to escape; charts are ``report.html.svg`` Markup,
which escapes its own text. The timeline is our own drawing: nothing is fetched.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import field

from trainprof.analysis.decode import record
from trainprof.analysis.snapshot.analyze import DeviceState, SnapshotResult, UnreadSnapshot
from trainprof.analysis.snapshot.breakdown import MemoryBreakdown
from trainprof.analysis.snapshot.history import History
from trainprof.analysis.snapshot.sites import Site
from trainprof.diagnose.findings import typed_findings
from trainprof.diagnose.snapshot import SPLIT_FREE_NOTE_PCT
from trainprof.report.html import svg, tables
from trainprof.report.html.tables import Table
from trainprof.report.html.view import Chart, finding_view
from trainprof.report.quantities import size
from trainprof.report.terminal.memory_breakdown import dtype_rows, parts, rule_of_thumb
from trainprof.report.terminal.snapshot import HOLDER_LABELS, OOM_CAUSES, oom_line, title_of
from trainprof.tidy import tidy_float

_MB = 1e6
#: Stacks shown under the sites table (the largest sites).
SHOWN_STACKS = 5
#: A history shorter than this is drawn in µs, so the time axis has whole ticks.
SHORT_HISTORY_MS = 20.0


class SnapshotView(msgspec.Struct):
    anchor: str
    title: str
    error: str = ""
    oom: list[str] = field(default_factory=list)
    verdict: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    breakdown: Chart | None = None
    breakdown_table: Table | None = None
    breakdown_notes: list[str] = field(default_factory=list)
    devices: Table | None = None
    holders: Table | None = None
    timelines: list[Chart] = field(default_factory=list)
    live_sites: Table | None = None
    allocated_sites: Table | None = None
    stacks: list[tuple[str, str]] = field(default_factory=list)
    steps: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def snapshot_entries(data: dict[str, Any]) -> list[SnapshotResult | UnreadSnapshot]:
    """The report's ``memory_snapshots`` as records: a snapshot, or one that could not be read."""
    return [record(s, UnreadSnapshot if "error" in s else SnapshotResult, "memory snapshot")
            for s in data.get("memory_snapshots") or []]


def memory_headline(data: dict[str, Any]) -> str | None:
    """The page's headline when a snapshot saw an out-of-memory error, or when there is nothing
    but snapshots; None otherwise (the traces' headline stands)."""
    shots = [s for s in snapshot_entries(data) if isinstance(s, SnapshotResult)]
    ooms = [o for s in shots for o in s.ooms]
    if ooms:
        return f"{oom_line(ooms[0]).split('. ')[0]}: {OOM_CAUSES[ooms[0].cause]}."
    if data.get("ranks") or not shots:
        return None
    findings = [f for s in shots for f in typed_findings(s.findings)]
    if findings:
        return f"{findings[0].title} (memory snapshot)."
    verdicts = [v for s in shots for v in s.verdict]
    if verdicts:
        return verdicts[0]
    split = [d for s in shots for d in s.devices
             if (d.fragmentation_pct or 0.0) >= SPLIT_FREE_NOTE_PCT]
    if split:
        return ("Memory snapshot: no out-of-memory error, growth or fragmentation finding; "
                "the free memory in split segments is usable (see the notes).")
    return "Memory snapshot: no out-of-memory error, fragmentation or growth found."


def memory_views(data: dict[str, Any]) -> list[SnapshotView]:
    return [snapshot_view(s, i) for i, s in enumerate(snapshot_entries(data))]


def snapshot_view(s: SnapshotResult | UnreadSnapshot, index: int) -> SnapshotView:
    anchor = f"snapshot-{index}"
    if isinstance(s, UnreadSnapshot):
        return SnapshotView(anchor, s.source, error=s.error)
    view = SnapshotView(anchor, title_of(s), oom=[oom_line(o) for o in s.ooms],
                        verdict=list(s.verdict),
                        findings=[finding_view(f, i) for i, f in
                                  enumerate(typed_findings(s.findings), 1)])
    breakdown = s.recorder.memory_breakdown
    if breakdown is not None:
        _add_breakdown(view, breakdown)
    view.devices = _devices_table(s.devices) if s.devices else None
    view.holders = _holders_table(s)
    view.timelines = [c for c in (_timeline(h) for h in s.histories) if c is not None]
    view.live_sites = _sites_table(s.live_sites, "blocks", "live at the snapshot")
    view.allocated_sites = _sites_table(s.allocated_sites, "allocations",
                                        "allocated over the history")
    view.stacks = [(site.site, "\n".join(site.stack))
                   for site in s.live_sites[:SHOWN_STACKS] if site.stack]
    view.steps = [_steps_table(h) for h in s.histories if h.steps]
    view.notes = s.notes + [n for h in s.histories for n in h.notes]
    return view


def _add_breakdown(view: SnapshotView, b: MemoryBreakdown) -> None:
    shown = [(svg.Series(label, color), pct) for label, _, pct, color in parts(b) if pct is not None]
    if shown:
        view.breakdown = Chart(svg.share_bar(shown, "Where the memory goes"),
                               svg.legend([s for s, _ in shown]))
    table = Table([tables.Column("part", False), tables.Column("device", False),
                   tables.Column("dtype", False), tables.Column("bytes"), tables.Column("tensors")])
    for label, nbytes, _, _ in parts(b):
        table.rows.append([tables.text(label), tables.text(b.device), tables.text(""),
                           tables.Cell(size(nbytes), nbytes), tables.text("")])
    for category, device, dtype, nbytes, count in dtype_rows(b):
        table.rows.append([tables.text(f"  of which {category}"), tables.text(device),
                           tables.text(dtype), tables.Cell(size(nbytes), nbytes),
                           tables.num(count, 0)])
    table.caption = f"peak {size(b.bytes.peak)} ({b.peak_source})"
    view.breakdown_table = table
    view.breakdown_notes = [x for x in [rule_of_thumb(b), *b.notes] if x]


def _holders_table(s: SnapshotResult) -> Table | None:
    """Bytes per holder at each device's peak and at the snapshot (an estimate from stacks)."""
    holders = s.holders
    if not holders:
        return None
    peaks = {p.device: p.holders for p in s.peaks}
    table = Table([tables.Column("device", False), tables.Column("holder", False),
                   tables.Column("at the peak"), tables.Column("at the snapshot")])
    for device, at_end in holders.items():
        at_peak = peaks.get(device, {})
        for name, label in HOLDER_LABELS.items():
            if at_end.get(name) or at_peak.get(name):
                table.rows.append([tables.text(f"cuda:{device}"), tables.text(label),
                                   tables.Cell(size(at_peak.get(name)), at_peak.get(name)),
                                   tables.Cell(size(at_end.get(name)), at_end.get(name))])
    table.caption = "estimated from the stacks that allocated each block (docs/memory_snapshots.md)"
    return table


def _devices_table(devices: list[DeviceState]) -> Table:
    cols = [tables.Column("device", False), tables.Column("segments"), tables.Column("reserved"),
            tables.Column("allocated"), tables.Column("requested", title="what the tensors asked "
                                                      "for; the rest of allocated is rounding"),
            tables.Column("free in split segments", title="free blocks in segments that also "
                                                          "hold live ones: stranded"),
            tables.Column("releasable", title="wholly free segments: empty_cache() returns them"),
            tables.Column("largest free block"),
            tables.Column("split free", title="free in split segments, % of reserved: "
                                              "fragmentation only when no large block holds it")]
    table = Table(cols, sortable=False)
    for d in devices:
        table.rows.append([
            tables.text(f"cuda:{d.device}"), tables.num(d.segments, 0),
            *[tables.Cell(size(v), v) for v in (d.reserved, d.allocated, d.requested,
                                                d.inactive_split, d.releasable)],
            tables.Cell(size(max(d.largest_free.values(), default=0))),
            tables.num(_tidy(d.fragmentation_pct), 1, "%")])
    return table


def _tidy(x: float | None) -> float | None:
    """A figure derived again from a record, as the report's JSON writes it (its sort key)."""
    return None if x is None else tidy_float(x)


def _sites_table(sites: list[Site], count: str, what: str) -> Table | None:
    if not sites:
        return None
    table = Table([tables.Column("site (first frame outside PyTorch)", False),
                   tables.Column("bytes"), tables.Column(count)], caption=f"bytes {what}")
    for site in sites:
        table.rows.append([tables.text(site.site), tables.Cell(size(site.bytes), site.bytes),
                           tables.num(site.count, 0)])
    return table


def _steps_table(h: History) -> Table:
    table = Table([tables.Column("step"), tables.Column("allocations"), tables.Column("allocated"),
                   tables.Column("live at the end")], caption=f"cuda:{h.device}")
    for step in h.steps:
        table.rows.append([tables.num(step.step, 0), tables.num(step.allocations, 0),
                           tables.Cell(size(step.bytes), step.bytes),
                           tables.Cell(size(step.live_at_end), step.live_at_end)])
    return table


def _timeline(h: History) -> Chart | None:
    line = h.timeline
    if len(line.ms) < 2:
        return None
    unit = "ms from the first allocator event" if h.has_time else "allocator event"
    scale = 1.0
    if h.has_time and line.ms[-1] < SHORT_HISTORY_MS:  # whole ticks: µs for a short one
        unit, scale = "µs from the first allocator event", 1e3
    lines = [svg.Line(svg.Series("live (allocated) memory", "#4e79a7"), [v / _MB for v in line.live]),
             svg.Line(svg.Series("reserved by the caching allocator", "#f28e2b"),
                      [v / _MB for v in line.reserved])]
    peak = None
    if h.peak_live is not None and h.peak_ms is not None:
        peak = (h.peak_ms * scale, h.peak_live / _MB, f"peak {size(h.peak_live)} live")
    chart = svg.line_chart([x * scale for x in line.ms], lines, unit, "MB",
                           f"Live memory of cuda:{h.device}", peak)
    caption = f"cuda:{h.device}: {h.events} allocator events"
    if h.growth_mb_per_step is not None:
        caption += f"; {h.growth_mb_per_step:+.1f} MB per step at step ends"
    return Chart(chart, svg.legend([ln.series for ln in lines]), caption)
