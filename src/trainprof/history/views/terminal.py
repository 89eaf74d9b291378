"""``trainprof history`` in the terminal: the runs, a sparkline trend per run name, and the
regressions with the numbers behind them."""

from __future__ import annotations

import time

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from trainprof.history.store.rows import RunRecord
from trainprof.history.views.regress import Point, RegressionVerdict, Series
from trainprof.report.quantities import clip, compact_table, size
from trainprof.sparkline import sparkline

#: Points drawn in a trend's sparkline (the most recent).
TREND_WIDTH = 40
#: Terminal columns from which the runs table shows host, ranks, p90 and peak memory too.
WIDE = 140
_WRAPPED = {"name": 10}  # the columns that wrap, and their least width
_ALWAYS = ("id", "recorded", "name", "steps", "median", "vs base")
_MARKS = {"regression": ("▲", "bold red"), "improvement": ("▼", "bold green"),
          "new setup": ("new setup", "yellow"), "first": ("first", "dim"),
          "unknown": ("no steps", "dim"), "steady": ("", ""), "baseline": ("", "dim")}


def when(t: float, short: bool = False) -> str:
    """A recorded time in this machine's local time, to the minute (``short``: no year)."""
    return time.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M", time.localtime(t))


def print_history(records: list[RunRecord], series: list[Series], console: Console | None = None,
                  db: str = "") -> None:
    """The runs table, then each series' trend and flagged changes."""
    console = console or Console()
    if not records:
        console.print(f"No runs match in {escape(db) or 'the history'}.")
        return
    verdicts = verdicts_by_id(series)
    console.print(runs_table(records, verdicts, db, console.width))
    console.print()
    for s in series:
        print_trend(s, console)


def verdicts_by_id(series: list[Series]) -> dict[int, tuple[Point, RegressionVerdict]]:
    """Each row's point and verdict (the rows of one job share them)."""
    return {row_id: (p, v) for s in series for p, v in zip(s.points, s.verdicts, strict=True)
            for row_id in p.ids}


def verdict_of(verdicts: dict[int, tuple[Point, RegressionVerdict]], r: RunRecord
               ) -> tuple[Point, RegressionVerdict] | None:
    """The row's point and verdict; None for a row not judged (or not yet stored, no id)."""
    return verdicts.get(r.id) if r.id is not None else None


def runs_table(records: list[RunRecord], verdicts: dict[int, tuple[Point, RegressionVerdict]], db: str,
               width: int = 120) -> Table:
    """One line per run; below ``WIDE`` columns, host, ranks, p90 and memory are left out
    (``trainprof history show ID`` has them)."""
    wide = width >= WIDE
    table = compact_table(f"Runs in {db} (step times in ms)" if db else "Runs (step times in ms)")
    columns: list[tuple[str, JustifyMethod]] = [
        ("id", "right"), ("recorded", "left"), ("name", "left"), ("commit", "left")]
    columns += [("host", "left"), ("ranks", "right")] if wide else []
    columns += [("steps", "right"), ("median", "right")]
    columns += [("p90", "right")] if wide else []
    columns += [("samples/s", "right")]
    columns += [("peak mem", "right")] if wide else []
    columns += [("vs base", "left"), ("top finding", "left")]
    rows = [_cells(r, verdicts, wide) for r in records]
    columns = [(h, j) for h, j in columns if h in _ALWAYS or any(str(c[h]) for c in rows)]
    for head, justify in columns:
        table.add_column(head, justify=justify, no_wrap=head not in _WRAPPED,
                         min_width=_WRAPPED.get(head), overflow="ellipsis")
    for cells in rows:
        table.add_row(*(cells[head] for head, _ in columns))
    return table


def _cells(r: RunRecord, verdicts: dict[int, tuple[Point, RegressionVerdict]], wide: bool) -> dict:
    found = verdict_of(verdicts, r)
    point, verdict = found if found is not None else (None, None)
    return {
        "id": str(r.id), "recorded": when(r.recorded_at, short=not wide), "name": escape(r.name),
        "commit": (r.git_commit or "")[:7], "host": escape(clip(r.host or "", 16)),
        "ranks": _ranks(r), "steps": str(r.steps), "median": _num(r.step_ms_median),
        "p90": _num(r.step_ms_p90), "samples/s": _num(r.samples_per_s, 0),
        "peak mem": size(r.peak_memory_bytes) if r.peak_memory_bytes else "",
        "vs base": _verdict_cell(point, verdict, r),
        "top finding": escape(clip(_finding(r), 40)),
    }


def print_trend(s: Series, console: Console) -> None:
    """``name (kind, N runs)``, then a sparkline of the median step and one of samples/s (the
    latest TREND_WIDTH runs), then each flagged change."""
    console.print(Text.assemble((s.name, "bold"), f" ({s.kind.replace('_', ' ')}, "
                                                 f"{len(s.points)} runs)"))
    console.print(_trend_line("step ms", [p.median_ms for p in s.points], "cyan", "{:.1f}"))
    rates = [p.samples_per_s for p in s.points]
    if any(r is not None for r in rates):
        console.print(_trend_line("samples/s", rates, "magenta", "{:,.0f}"))
    for p, v in s.flagged():
        console.print(Text("  " + change_sentence(p, v),
                           style="red" if v.status == "regression" else "green"))


def _trend_line(label: str, values: list[float | None], style: str, number: str) -> Text:
    """``  step ms    ▂▂▃▂▇▇  101.2 -> 121.0 (+19.6%)``"""
    known = [v for v in values if v is not None]
    line = Text(f"  {label:<10} ")
    line.append(sparkline(values, TREND_WIDTH), style=style)
    if known:
        line.append(f"  {number.format(known[0])} -> {number.format(known[-1])}")
        if len(known) > 1 and known[0] > 0:
            line.append(f" ({(known[-1] / known[0] - 1) * 100:+.1f}%)")
    return line


def change_sentence(p: Point, v: RegressionVerdict) -> str:
    """``regression at #21 (2024-06-02 10:31, abc1234): median step 121.0 ms, +19.6% against
    101.2 ms (#16-#20); ...``"""
    commit = f", {p.first.git_commit[:8]}" if p.first.git_commit else ""
    base = f"{v.baseline[0]}..{v.baseline[-1]}" if len(v.baseline) > 1 else "".join(v.baseline)
    text = (f"{v.status} at {p.label} ({when(p.first.recorded_at)}{commit}): median step "
            f"{p.median_ms:.1f} ms, {v.change_pct:+.1f}% against {v.baseline_ms:.1f} ms "
            f"(median of {base}); noise allowance {v.allowance_pct:.1f}%")
    if v.odds is not None:
        how = "slower" if v.status == "regression" else "faster"
        text += (f"; that it is more than {v.threshold_pct:g}% {how} is {v.odds.words} "
                 f"({v.odds.probability * 100:.1f}% of bootstrap resamples of the steps)")
    else:
        text += "; judged on medians only (no per-step times)"
    if v.confirmed_by:
        text += f"; confirmed by {v.confirmed_by}"
    return text


def _verdict_cell(point: Point | None, verdict: RegressionVerdict | None, r: RunRecord) -> Text:
    if verdict is None or point is None:
        return Text("")
    if point.ids and r.id != point.ids[0]:
        return Text(f"(with {point.label})", style="dim")
    words, style = _MARKS.get(verdict.status, (verdict.status, ""))
    if verdict.change_pct is not None:
        words = f"{words} {verdict.change_pct:+.1f}%".strip()
    return Text(words, style=style)


def _finding(r: RunRecord) -> str:
    f = r.top_finding
    if not f:
        return ""
    saving = f.get("saving_pct")
    return f"{f.get('id') or f.get('title')}" + (f" ({saving:.0f}%)" if saving else "")


def _ranks(r: RunRecord) -> str:
    if r.rank is not None and r.world_size:
        return f"{r.rank}/{r.world_size}"
    return str(r.world_size or "")


def _num(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"
