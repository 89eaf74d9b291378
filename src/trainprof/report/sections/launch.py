"""The launch section's renderers: kernel launches and their host cost, and whether the GPU
waits for a CPU that cannot launch fast enough."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from trainprof.analysis.sections.launch import BACK_TO_BACK_US, SMALL_KERNEL_US, LaunchStats
from trainprof.formatting import counted
from trainprof.report.quantities import add_number_columns, compact_table, pct
from trainprof.report.sections.view import SectionView, ViewContext


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def text(result: LaunchStats, ctx: ViewContext) -> Group | None:
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
    parts: list[RenderableType] = [head, t, *(Text(line) for line in lines)]
    if result.cpu_bound:
        parts.append(Text("→ CPU-bound: the GPU waits for kernels the CPU cannot launch fast "
                          "enough.", style="bold yellow"))
    return Group(*parts)


VIEW = SectionView("launch", text=text)
