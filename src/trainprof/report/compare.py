"""``trainprof compare`` as terminal tables and as Markdown, side by side with deltas."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from trainprof.analysis.deltas import Delta, NameDelta
from trainprof.diagnose.comparison import TOP_CHANGED, Comparison
from trainprof.formatting import number
from trainprof.report.labels import category_label
from trainprof.report.markdown.report import md_text, table
from trainprof.report.names import short_name as short_kernel_name

#: Widest name in the terminal's tables of changed ops and kernels (the rest is cut with "…"),
#: and the columns beside it (borders included), so the table fits the terminal.
NAME_WIDTH = 60
_BESIDE_NAME = 7 + 3 * 9 + 16


_f = number


def _pct(value: float | None) -> str:
    return number(value, 1, "%", sign=True)


def headline_rows(c: Comparison) -> Iterator[tuple[str, Delta, int, bool]]:
    """(label, figures, digits, higher is better) of the step and throughput rows."""
    b, n = c.base, c.new
    yield "median step (ms)", Delta(b.median_ms, n.median_ms), 1, False
    yield "mean step (ms)", Delta(b.mean_ms, n.mean_ms), 1, False
    yield "steps analysed", Delta(float(len(b.step_ms)), float(len(n.step_ms))), 0, True
    yield "steps/s (per rank)", Delta(b.steps_per_s, n.steps_per_s), 2, True
    if b.samples_per_s is not None or n.samples_per_s is not None:
        yield "samples/s", Delta(b.samples_per_s, n.samples_per_s), 1, True


def _section_rows(deltas: dict[str, Delta], label: Callable[[str], str] = str
                  ) -> Iterator[tuple[str, Delta]]:
    for key, d in deltas.items():
        if (d.base or 0) >= 0.005 or (d.new or 0) >= 0.005:
            yield label(key), d


def _style(delta: float | None, higher_is_better: bool) -> str:
    if not delta:
        return ""
    return "green" if (delta > 0) == higher_is_better else "red"


def _delta_table(title: str, rows: Iterable[tuple[Any, ...]], digits: int = 2, higher_is_better: bool = False) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("", "base", "new", "delta", "change"):
        t.add_column(col, justify="left" if not col else "right")
    for label, d, *rest in rows:
        dg = rest[0] if rest else digits
        better = rest[1] if len(rest) > 1 else higher_is_better
        t.add_row(label, _f(d.base, dg), _f(d.new, dg),
                  Text(_f(d.delta, dg) if d.delta is None else f"{d.delta:+,.{dg}f}",
                       style=_style(d.delta, better)), _pct(d.delta_pct))
    return t


def _names_table(title: str, names: list[NameDelta], top: int, width: int,
                 label: Callable[[str], str] = str) -> Table | None:
    if not names:
        return None
    t = Table(title=title, title_justify="left")
    t.add_column("name", overflow="ellipsis", no_wrap=True,
                 max_width=max(16, min(NAME_WIDTH, width - _BESIDE_NAME)))
    t.add_column("change", no_wrap=True, min_width=7)
    for col in ("base", "new", "delta"):
        t.add_column(col, justify="right", no_wrap=True, min_width=7)
    for d in names[:top]:
        base, new = _name_us(d)
        t.add_row(label(d.name), d.change, _f(base, 0), _f(new, 0),
                  Text(f"{d.delta_us:+,.0f}", style=_style(d.delta_us, False)))
    return t


def _name_us(d: NameDelta) -> tuple[float, float]:
    """The figures behind ``delta_us``: device time when that changed more, else host time."""
    base, new = d.base_device_us, d.new_device_us
    if base is not None and new is not None and abs(new - base) > abs(d.new_us - d.base_us):
        return base, new
    return d.base_us, d.new_us


def render_text(c: Comparison, console: Console | None = None, top: int = TOP_CHANGED) -> None:
    console = console or Console()
    console.print(Text(f"BASE: {c.base.label}    NEW: {c.new.label}", style="bold"))
    parts = [
        _delta_table("Step time and throughput", headline_rows(c)),
        _delta_table("Where the step time goes (ms per step)",
                     _section_rows(c.diff.breakdown_ms, category_label)),
        _delta_table("Training phases (ms per step)", _section_rows(c.diff.phases_ms)),
    ]
    parts += [t for t in (_names_table(f"Ops that changed most ({c.diff.op_metric} and device "
                                       "time, µs per step)", c.diff.ops, top, console.width),
                          _names_table("Kernels that changed most (µs per step)", c.diff.kernels,
                                       top, console.width, short_kernel_name)) if t]
    console.print(Group(*parts))
    for note in [*c.diff.notes, *c.notes]:
        console.print(Text(f"note: {note}", style="yellow"))
    if c.gate:
        console.print(Text(c.gate.message(), style="bold red" if c.gate.failed else "bold green"))
    elif c.verdict:
        console.print(Text(c.verdict.message(), style="bold"))


def _md_rows(rows: Iterable[tuple[Any, ...]]) -> list[list[str]]:
    out = []
    for label, d, *rest in rows:
        dg = rest[0] if rest else 2
        delta = "n/a" if d.delta is None else f"{d.delta:+,.{dg}f}"
        out.append([md_text(label), _f(d.base, dg), _f(d.new, dg), delta, _pct(d.delta_pct)])
    return out


def render_markdown(c: Comparison, top: int = TOP_CHANGED) -> str:
    head = ["", "base", "new", "delta", "change"]
    out = [f"## trainprof compare: {md_text(c.base.label)} → {md_text(c.new.label)}", ""]
    if c.gate:
        out += [f"**{md_text(c.gate.message(), None)}**", ""]
    elif c.verdict:
        out += [f"**{md_text(c.verdict.message(), None)}**", ""]
    out += [table(head, _md_rows(headline_rows(c))), "",
            "**Where the step time goes (ms per step)**", "",
            table(head, _md_rows(_section_rows(c.diff.breakdown_ms, category_label))), "",
            "**Training phases (ms per step)**", "",
            table(head, _md_rows(_section_rows(c.diff.phases_ms))), ""]
    for title, names, label in (("Ops that changed most", c.diff.ops, str),
                                ("Kernels that changed most", c.diff.kernels, short_kernel_name)):
        if names:
            rows = [[md_text(label(d.name)), d.change, *(_f(v, 0) for v in _name_us(d)),
                     f"{d.delta_us:+,.0f}"] for d in names[:top]]
            out += [f"**{title}** (µs per step)", "",
                    table(["name", "change", "base", "new", "delta"], rows, "llrrr"), ""]
    out += [f"> Note: {md_text(n, None)}" for n in [*c.diff.notes, *c.notes]]
    return "\n".join(out).rstrip() + "\n"
