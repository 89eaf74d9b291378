"""The compilation section's renderers: torch.compile's compilations and untraced time per
step, shown only when a step compiles or holds untraced time."""

from __future__ import annotations

from rich.table import Table

from trainprof.analysis.sections.compilation import Compilation
from trainprof.report.quantities import compact_table, ms, pct
from trainprof.report.sections.view import SectionView, ViewContext


def text(result: Compilation, ctx: ViewContext) -> Table | None:
    if not result.steps_compiling and not result.untraced_ms:
        return None
    kinds = (f"{result.first_compilations} first, {result.recompilations} recompilations"
             if result.steps_compiling else "none")
    t = compact_table(f"Compilation and untraced time (compilations: {kinds})")
    for col in ("step", "compile ms", "untraced ms"):
        t.add_column(col, justify="right")
    untraced = dict(result.untraced_per_step_ms)
    for step, compile_ms in result.compile_per_step_ms:
        if compile_ms or untraced.get(step):
            t.add_row(str(step), ms(compile_ms, 1), ms(untraced.get(step), 1))
    t.add_row("mean", ms(result.compile_ms, 1), ms(result.untraced_ms, 1))
    t.add_row("share", pct(result.compile_pct), pct(result.untraced_pct))
    return t


VIEW = SectionView("compilation", text=text)
