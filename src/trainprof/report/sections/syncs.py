"""The syncs section's renderers: the host's waits for the device, by call site (the
``ctx.rows`` heaviest)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from trainprof.analysis.sections.syncs import PROFILER_SYNC, SyncStats
from trainprof.report.names import file_line
from trainprof.report.quantities import add_name_column, compact_table, name_cell, pct
from trainprof.report.sections.view import SectionView, ViewContext

#: The widest the sync table's columns of names get (in a wide terminal).
CALL_WIDTH = 22
OPS_WIDTH = 26
WHERE_WIDTH = 40


def text(result: SyncStats, ctx: ViewContext) -> Group | None:
    """The syncs and their ``ctx.rows`` heaviest call sites."""
    if not result.count:
        return None
    head = f"{result.count} host-device syncs, {result.blocked_us / 1000:.2f} ms blocked"
    if result.mean_per_step is not None:
        head += (f"; the loop's: {result.mean_per_step:.1f} per step, "
                 f"{result.loop_blocked_us / 1000:.2f} ms ({pct(result.blocked_pct)} of the "
                 "step time)")
    if result.profiler_syncs:
        head += f"; {result.profiler_syncs} the profiler's own when it stops"
    t = compact_table()
    add_name_column(t, "call", CALL_WIDTH)
    t.add_column("n", justify="right", no_wrap=True, min_width=4)
    t.add_column("ms", justify="right", no_wrap=True, min_width=6)
    add_name_column(t, "op called › innermost", OPS_WIDTH)
    add_name_column(t, "source / cause", WHERE_WIDTH)
    for s in result.sites[:ctx.rows]:
        ops = s.caller or "(no op)"
        if s.op and s.op != s.caller:
            ops = f"{s.caller} › {s.op.removeprefix('aten::')}"
        where = file_line(s.source) if s.source else (s.cause or "")
        if s.cause == PROFILER_SYNC:  # its source line is the profiler's, not the loop's
            where = "the profiler's own, when it stops"
        t.add_row(name_cell(s.call, CALL_WIDTH), str(s.count), f"{s.total_us / 1000:.2f}",
                  name_cell(ops, OPS_WIDTH), name_cell(where, WHERE_WIDTH))
    return Group(Text(head, style="italic"), t,
                 *(Text(f"note: {n}", style="yellow") for n in result.notes))


VIEW = SectionView("syncs", text=text)
