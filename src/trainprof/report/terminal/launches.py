"""Terminal views of the launch-overhead and synchronisation sections."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from trainprof.analysis.options import DEFAULT_TOP
from trainprof.analysis.sections.launch import BACK_TO_BACK_US, SMALL_KERNEL_US, LaunchStats
from trainprof.analysis.sections.syncs import PROFILER_SYNC, SyncStats
from trainprof.formatting import counted
from trainprof.report.quantities import (
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    pct,
)
from trainprof.report.terminal.hotspots import file_line

#: The widest the sync table's columns of names get (in a wide terminal).
CALL_WIDTH = 22
OPS_WIDTH = 26
WHERE_WIDTH = 40


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def render_launch(result: LaunchStats) -> Group | None:
    if not result.launches:
        return None
    head = Text(f"Kernel launches in the steps ({counted(result.launches, 'call')}, {result.kernels} "
                "kernels)", style="italic")
    t = compact_table()
    t.add_column("")
    add_number_columns(t, "median µs", "p90 µs", "max µs")
    for label, d in (("launch call (CPU)", result.launch_us),
                     ("launch end → kernel start", result.delay_us),
                     ("kernel duration", result.kernel_us)):
        t.add_row(label, _us(d.median), _us(d.p90), _us(d.max))
    lines = [
        f"kernels under {SMALL_KERNEL_US:.0f} µs: {pct(result.small_kernel_pct)}; shorter than "
        f"their own launch call: {pct(result.shorter_than_launch_pct)}; launched onto an idle "
        f"GPU: {pct(result.starved_kernel_pct)}",
        f"GPU idle {pct(result.gpu_idle_pct)} of the step time; idle while the CPU launched "
        f"back to back (gaps ≤ {BACK_TO_BACK_US:.0f} µs): {pct(result.cpu_bound_pct)}",
    ]
    parts: list = [head, t, *(Text(line) for line in lines)]
    if result.cpu_bound:
        parts.append(Text("→ CPU-bound: the GPU waits for kernels the CPU cannot launch fast "
                          "enough.", style="bold yellow"))
    return Group(*parts)


def render_syncs(result: SyncStats, top: int = DEFAULT_TOP) -> Group | None:
    """The syncs and their ``top`` call sites."""
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
    for s in result.sites[:top]:
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
