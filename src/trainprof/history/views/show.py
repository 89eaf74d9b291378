"""``trainprof history show ID``: one recorded run in full."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from trainprof.history.store.rows import RunRecord
from trainprof.history.views.terminal import when
from trainprof.report.quantities import size
from trainprof.sparkline import sparkline

_FACTS = (("kind", "kind"), ("source", "source"), ("git commit", "git_commit"),
          ("host", "host"), ("devices", "devices"), ("world size", "world_size"),
          ("rank", "rank"), ("job", "job"), ("steps", "steps"))


def print_run(r: RunRecord, console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"[bold]history:{r.id}[/] {escape(r.name)}, recorded {when(r.recorded_at)}")
    for label, key in _FACTS:
        value = getattr(r, key)
        if value not in (None, ""):
            console.print(f"  {label:<12} {escape(str(value))}")
    figures = [("mean", r.step_ms_mean), ("median", r.step_ms_median), ("p90", r.step_ms_p90),
               ("min", r.step_ms_min), ("max", r.step_ms_max)]
    shown = ", ".join(f"{k} {v:.2f}" for k, v in figures if v is not None)
    if shown:
        console.print(f"  {'step ms':<12} {shown}")
    if r.step_times_ms:
        console.print(f"  {'every step':<12} {sparkline(r.step_times_ms, 60)}")
    phases = ", ".join(f"{k} {v:.2f}" for k, v in r.phases_ms.items() if v is not None)
    if phases:
        console.print(f"  {'phases ms':<12} {escape(phases)}")
    for label, value in (("samples/s", r.samples_per_s), ("tokens/s", r.tokens_per_s)):
        if value is not None:
            console.print(f"  {label:<12} {value:,.1f}")
    if r.peak_memory_bytes:
        console.print(f"  {'peak memory':<12} {size(r.peak_memory_bytes)}")
    for key, value in r.extra.items():
        if isinstance(value, int | float | str):
            console.print(f"  {key.replace('_', ' '):<12} {escape(str(value))}")
    if r.findings:
        console.print("  findings")
        for f in r.findings:
            saving = f" (saves ~{f['saving_pct']:.0f}%)" if f.get("saving_pct") else ""
            console.print(f"    {escape(str(f.get('severity') or ''))}: "
                          f"{escape(str(f.get('title') or f.get('id')))}{saving}")
