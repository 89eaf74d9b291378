"""`trainprof memory`: a memory snapshot's analysis in the terminal, from its JSON result
(`diagnose.snapshot.memory_snapshot_report`), so a saved result prints the same: read once into
its records (`analysis.snapshot.analyze.MemorySnapshotReport`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trainprof.analysis.decode import record
from trainprof.analysis.snapshot.analyze import (
    MemorySnapshotReport,
    OutOfMemory,
    SnapshotResult,
)
from trainprof.analysis.snapshot.history import History
from trainprof.analysis.snapshot.sites import Site
from trainprof.diagnose.findings import Finding, typed_findings
from trainprof.report.labels import evidence_text
from trainprof.report.quantities import ByWidth, clip, compact_table, pct, size
from trainprof.report.terminal.memory_breakdown import breakdown_renderable
from trainprof.vocabulary import SEVERITY_STYLES

#: Sites listed per table, and stack frames shown under the top ones.
SHOWN_SITES = 8
SHOWN_STACKS = 3
SHOWN_FRAMES = 6
_SEVERITY_STYLE = SEVERITY_STYLES
OOM_CAUSES = {
    "fragmentation": "fragmentation: enough memory was free in total, but no free block was "
                     "large enough",
    "capacity": "capacity: even all free memory together was less than the request",
    "unknown": "cause unknown: a large enough block was free when the snapshot was taken",
}


def title_of(s: SnapshotResult) -> str:
    """`file (rank R, step N)` or `(rank R, at an out-of-memory error)`."""
    by = s.recorder
    what = []
    if by.rank is not None:
        what.append(f"rank {by.rank}")
    if by.reason == "oom":
        what.append("at an out-of-memory error")
    elif by.step is not None:
        what.append(f"recorded window ending at step {by.step}")
    return s.source + (f" ({', '.join(what)})" if what else "")


def oom_line(o: OutOfMemory) -> str:
    where = f"cuda:{o.device}" if o.device is not None else "the device"
    return (f"Out of memory on {where}: {size(o.requested)} requested; largest free block "
            f"{size(o.largest_free_block)}, {size(o.cached_free)} free in the cache, "
            f"{size(o.device_free)} free outside it. {OOM_CAUSES.get(o.cause, o.cause)}.")


_DEVICE_COLUMNS = ("segments", "reserved", "allocated", "requested", "free in split segments",
                   "releasable", "largest free block", "split free")


def devices_table(s: SnapshotResult) -> ByWidth:
    """One row per device where the columns fit the terminal; else turned on its side (one row
    per quantity, one column per device), so that no header or number is cut."""
    rows = [[f"cuda:{d.device}", str(d.segments), size(d.reserved), size(d.allocated),
             size(d.requested), size(d.inactive_split), size(d.releasable),
             size(max(d.largest_free.values(), default=0)), pct(d.fragmentation_pct)]
            for d in s.devices]
    heads = ("device", *_DEVICE_COLUMNS)
    wide = sum(max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(heads))

    def build(width: int) -> Table:
        t = compact_table("Segments and blocks at the snapshot")
        if wide + 3 * (len(heads) - 1) <= width:
            for col in heads:
                t.add_column(col, justify="left" if col == "device" else "right", no_wrap=True)
            for row in rows:
                t.add_row(*row)
            return t
        t.min_width = len(t.title or "")  # the title on one line above a narrow table
        t.add_column("", justify="left", no_wrap=True)
        for row in rows:
            t.add_column(row[0], justify="right", no_wrap=True)
        for i, head in enumerate(_DEVICE_COLUMNS, 1):
            t.add_row(head, *(row[i] for row in rows))
        return t

    return ByWidth(build)


def sites_table(title: str, sites: list[Site], count: str) -> Group:
    t = compact_table(title)
    t.add_column("site (first frame outside PyTorch)", overflow="fold", max_width=80)
    t.add_column("bytes", justify="right", no_wrap=True)
    t.add_column(count, justify="right", no_wrap=True)
    for site in sites[:SHOWN_SITES]:
        t.add_row(site.site, size(site.bytes), str(site.count))
    stacks = []
    for site in sites[:SHOWN_STACKS]:
        if site.stack:
            stacks.append(Text(f"  stack of {clip(site.site, 70)}:", style="dim"))
            stacks += [Text(f"    {frame}", style="dim") for frame in site.stack[:SHOWN_FRAMES]]
    return Group(t, *stacks)


def history_renderables(h: History) -> list[Any]:
    unit = "ms" if h.has_time else "events"
    out: list[Any] = [Text(
        f"cuda:{h.device}: {h.events} allocator events; live memory peaks at "
        f"{size(h.peak_live)} ({h.peak_ms or 0:,.1f} {unit} in"
        + (f", step {h.peak_step}" if h.peak_step is not None else "") + ")"
        + (f"; {h.growth_mb_per_step:+.1f} MB per step" if h.growth_mb_per_step
           is not None else ""))]
    if h.steps:
        t = compact_table(f"Allocations per step on cuda:{h.device}")
        for col in ("step", "allocations", "allocated", "live at the end"):
            t.add_column(col, justify="right")
        for step in h.steps:
            t.add_row(str(step.step), str(step.allocations), size(step.bytes),
                      size(step.live_at_end))
        out.append(t)
    return out


HOLDER_LABELS = {"parameters": "parameters", "gradients": "gradients (and backward temporaries)",
                 "optimizer_state": "optimizer state", "activations": "activations",
                 "other": "other (a Python stack none of the rules name)",
                 "unknown": "unknown (no stack, or C++ frames only)"}


def holders_table(s: SnapshotResult) -> Table | None:
    """Bytes per holder at each device's peak and at the snapshot (an estimate from stacks)."""
    peaks = {p.device: p.holders for p in s.peaks}
    holders = s.holders
    if not holders:
        return None
    t = compact_table("What holds the memory (estimated from the allocation stacks)")
    t.add_column("device", no_wrap=True)
    t.add_column("holder", overflow="fold")
    t.add_column("at the peak", justify="right", no_wrap=True)
    t.add_column("at the snapshot", justify="right", no_wrap=True)
    for device, at_end in holders.items():
        at_peak = peaks.get(device, {})
        for name, label in HOLDER_LABELS.items():
            if at_end.get(name) or at_peak.get(name):
                t.add_row(f"cuda:{device}", label,
                          size(at_peak[name]) if name in at_peak else "n/a", size(at_end[name]))
    return t


def findings_renderable(findings: list[Finding]) -> Panel | None:
    if not findings:
        return None
    parts: list[Any] = []
    for i, f in enumerate(findings, 1):
        head = Text(f"{i}. ")
        head.append(f"[{f.severity}] ", style=_SEVERITY_STYLE.get(f.severity, "bold"))
        head.append(f.title, style="bold")
        parts.append(head)
        # Each line wraps under its own text, not back at the panel's edge.
        parts += [Padding(Text(evidence_text(e), style="dim"), (0, 0, 0, 5))
                  for e in f.evidence]
        parts.append(Padding(Text(f"Fix: {f.fix.summary}", style="green"), (0, 0, 0, 5)))
        parts += [Padding(Text(line, style="green"), (0, 0, 0, 7))
                  for line in f.fix.pytorch.splitlines()]
        parts.append(Padding(Text(f"See {f.docs}", style="dim"), (0, 0, 0, 5)))
    return Panel(Group(*parts), title="Advice", title_align="left")


def snapshot_renderables(s: SnapshotResult) -> list[Any]:
    """Everything about one snapshot, in reading order."""
    out: list[Any] = [Text(f"Memory snapshot: {title_of(s)}", style="bold")]
    out += [Text(oom_line(o), style="bold red") for o in s.ooms]
    out += [Text(sentence, style="bold") for sentence in s.verdict]
    advice = findings_renderable(typed_findings(s.findings))
    out += [advice] if advice is not None else []
    breakdown = s.recorder.memory_breakdown
    out += [breakdown_renderable(breakdown)] if breakdown is not None else []
    out += [devices_table(s)] if s.devices else []
    holders = holders_table(s)
    out += [holders] if holders is not None else []
    if s.live_sites:
        out.append(sites_table("Top allocation sites, live at the snapshot", s.live_sites, "blocks"))
    for peak in s.peaks:
        if peak.sites:
            out.append(sites_table(f"Top allocation sites, live at cuda:{peak.device}'s peak",
                                   peak.sites, "blocks"))
    if s.allocated_sites:
        out.append(sites_table("Top allocation sites over the history (bytes allocated)",
                               s.allocated_sites, "allocations"))
    for h in s.histories:
        out += history_renderables(h)
    settings = s.allocator_settings
    if settings:
        out.append(Text("allocator settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()
                                                            if v not in (None, "", {})), style="dim"))
    notes = s.notes + [n for h in s.histories for n in h.notes]
    out += [Text(f"note: {n}", style="yellow") for n in notes]
    return out


def print_memory_report(report: dict[str, Any], console: Console | None = None) -> None:
    """Print every snapshot of a `memory_snapshot_report` result (read once into its records)."""
    console = console or Console()
    result: MemorySnapshotReport = record(report, MemorySnapshotReport, "memory report")
    for s in result.snapshots:
        for part in snapshot_renderables(s):
            console.print(part)
        console.print()
