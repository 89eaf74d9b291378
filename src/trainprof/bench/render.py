"""The benchmark and the checklist for people (rich tables) and for tools (JSON)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from trainprof.bench.health import Checklist, PhaseCheck
from trainprof.bench.results import DRIFT_WARN_PCT, BenchResult, StrategyResult
from trainprof.fileio import atomic_write_text, print_or_save
from trainprof.report.json import to_json_bytes
from trainprof.report.quantities import compact_table, ms, size
from trainprof.vocabulary import PHASES

_PHASES = PHASES


def to_json(result: BenchResult | Checklist) -> bytes:
    """The result's JSON (docs/bench.md), pretty-printed."""
    return to_json_bytes(result.to_dict())


def write_result(result: Any, fmt: str, output: Path | None,
                 printer: Callable[[Any, Console], None]) -> None:
    """JSON or the text report, to `output` (written atomically) or to stdout."""
    if fmt != "json":
        print_or_save(lambda console: printer(result, console), output)
    elif output:
        atomic_write_text(output, to_json(result).decode())
    else:
        sys.stdout.write(to_json(result).decode())


class BenchProgress:
    """A benchmark's progress on stderr, on a terminal only: a spinner, the strategy that runs,
    how many are done and the time so far (a strategy can take a minute with nothing printed).
    Its ``on_start`` is `compare()`'s hook; the bar goes away when the results print."""

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._task: Any = None
        self._seen: set[str] = set()

    def __enter__(self) -> BenchProgress:
        if sys.stderr.isatty():
            self._progress = Progress(
                SpinnerColumn(), TextColumn("trainprof bench: {task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                transient=True)
            self._task = self._progress.add_task("preparing the workload", total=None)
            self._progress.start()
        return self

    def on_start(self, strategy: Any, index: int, count: int) -> None:
        again = " again (has the machine's speed changed?)" if strategy.name in self._seen else ""
        self._seen.add(strategy.name)
        if self._progress is not None:
            self._progress.update(self._task, description=f"{strategy.name}{again}",
                                  completed=index, total=count)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def print_bench(result: BenchResult, console: Console | None = None) -> None:
    """Throughput and step times per strategy, where each step's time goes, then the skipped
    and failed strategies with their reasons."""
    console = console or Console()
    ran = [r for r in result.strategies if r.ok]
    if ran:
        console.print(_speed_table(result, ran))
        console.print(_phase_table(ran))
    for row in result.strategies:
        if not row.ok:
            colour = "yellow" if row.status == "skipped" else "red"
            console.print(f"[{colour}]{row.status}[/] {escape(row.name)}: "
                          f"{escape(row.reason or '')}")
    verdict = _verdict(result)
    if verdict:
        console.print(verdict)
    drift = result.drift_pct
    if drift is not None:
        again = f"{result.baseline_again_samples_per_s:,.0f} samples/s ({drift:+.0f}%)"
        console.print(
            f"[bold yellow]The baseline ran again at the end: {again}: the machine's speed "
            "changed during the run (other work?). Compare the rows with care, or run again.[/]"
            if result.drifted else
            f"The baseline ran again at the end: {again}, within {DRIFT_WARN_PCT:.0f}%.")


def _speed_table(result: BenchResult, ran: list[StrategyResult]) -> Table:
    settings, env = result.settings, result.environment
    table = compact_table(
        f"Strategies on {result.device} ({escape(str(env.get('device_name') or '?'))}, "
        f"{env.get('threads')} threads): {settings['repeats']} repeats of {settings['steps']} "
        f"steps after {settings['warmup']} warm-up"
        + (", each strategy in its own process" if settings["isolate"] else ""))
    tokens = any(r.tokens_per_s for r in ran)
    table.add_column("strategy", no_wrap=True)
    table.add_column("samples/s", justify="right", no_wrap=True)
    if tokens:
        table.add_column("tokens/s", justify="right")
    table.add_column(f"vs {escape(result.baseline or '?')}", justify="right")
    table.add_column("step ms", justify="right")
    table.add_column("p90 ms", justify="right")
    table.add_column("peak memory", justify="right")
    fastest = result.fastest()
    for row in ran:
        step = row.step_ms() or {}
        rate, relative = row.samples_per_s, row.relative_to_baseline
        cells = [escape(row.name), "n/a" if rate is None else
                 f"{rate:,.0f} ± {row.samples_per_s_std or 0:,.0f}"]
        if tokens:
            cells.append("n/a" if row.tokens_per_s is None else f"{row.tokens_per_s:,.0f}")
        cells += ["n/a" if relative is None else f"{relative:.2f}×", ms(step.get("median")),
                  ms(step.get("p90")), size(row.peak_memory_bytes)]
        table.add_row(*cells, style="bold green" if row is fastest and len(ran) > 1 else None)
    return table


def _phase_table(ran: list[StrategyResult]) -> Table:
    table = compact_table("Where a step's time goes (mean ms per step, as StepTimer splits it)")
    table.add_column("strategy", no_wrap=True)
    for name in _PHASES:
        table.add_column(name, justify="right")
    for row in ran:
        phases = row.phases_ms or {}
        table.add_row(escape(row.name), *(ms(phases.get(name), 1) for name in _PHASES))
    return table


def _verdict(result: BenchResult) -> str | None:
    """Which strategy is fastest, and whether its lead is larger than the repeats' spread."""
    fastest = result.fastest()
    if fastest is None:
        return None
    if fastest.name == result.baseline or fastest.relative_to_baseline is None:
        return f"Fastest: [bold]{escape(fastest.name)}[/]."
    base = result.row(result.baseline or "")
    lead_pct = 100.0 * (fastest.relative_to_baseline - 1.0)
    drift = result.drift_pct
    if drift is not None and abs(drift) >= lead_pct:
        spread = (f"less than the baseline's own change during the run ({drift:+.0f}%): "
                  "measure again")
    elif min(fastest.repeat_samples_per_s) > max(base.repeat_samples_per_s):
        spread = "every repeat faster than every baseline repeat"
    else:
        spread = "within the repeats' spread: measure again with more --steps or --repeats"
    return (f"Fastest: [bold]{escape(fastest.name)}[/] ({fastest.relative_to_baseline:.2f}× "
            f"{escape(base.name)}; {spread}).")


def print_checklist(check: Checklist, console: Console | None = None) -> None:
    """Each phase's time and share against its healthy range; advice for the flagged ones."""
    console = console or Console()
    table = compact_table(f"Training step phases on {check.device}, each timed on its own "
                          f"({check.step_ms:.2f} ms in all)")
    for name, justify in (("phase", "left"), ("ms", "right"), ("share", "right"),
                          ("healthy", "right"), ("", "left"), ("rule", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for phase in check.phases:
        table.add_row(*_phase_cells(phase), style="bold red" if phase.flagged else None)
    console.print(table)
    flagged = check.flagged()
    if not flagged:
        console.print("Every phase is within its usual range.")
    for phase in flagged:
        console.print(f"[bold]{phase.phase}[/] {phase.pct:.0f}%: {escape(phase.advice or '')}"
                      + (f" (docs/rules.md#{phase.rule.replace('_', '-')})" if phase.rule else ""))


def _phase_cells(phase: PhaseCheck) -> list[Any]:
    low, high = phase.healthy_pct
    verdict = {"ok": "ok", "low": "below", "high": "above"}[phase.status]
    return [phase.phase, ms(phase.ms, 3), f"{phase.pct:.1f}%", f"{low:.0f}-{high:.0f}%",
            verdict, phase.rule or ""]
