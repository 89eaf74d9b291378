"""The terminal report: rich tables, times in ms, shares that add up to 100%."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trainprof.analysis.job.rank_table import rank_table
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.overview.breakdown import ALL_CATEGORIES
from trainprof.analysis.overview.phases import PHASES
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import (
    MINOR_SAVING_PCT,
    is_minor,
    saving_phrase,
    shared_number,
    where_text,
)
from trainprof.formatting import counted, number
from trainprof.report.labels import (
    TENSOR_CORE_OF_COMPUTE,
    TENSOR_CORE_OF_COMPUTE_NOTE,
    category_label,
)
from trainprof.report.quantities import ByWidth
from trainprof.report.sections.registry import BY_NAME
from trainprof.report.sections.view import ViewContext
from trainprof.report.terminal.rank_spread import SPREAD_HEAD, spread_rows, spread_shown
from trainprof.structs import replace
from trainprof.vocabulary import SEVERITY_STYLES

_BAR = 24


def _bar(pct: float) -> Text:
    filled = round(max(0.0, min(pct, 100.0)) / 100 * _BAR)
    return Text("█" * filled + "·" * (_BAR - filled), style="cyan")


def _fmt(value: float | None, unit: str = "%", digits: int = 1) -> str:
    return number(value, digits, unit)


def step_table(r: RankAnalysis) -> Table:
    s = r.steps
    t = Table(title=f"Step time ({counted(s.count, 'step')}, from {r.step_source})", title_justify="left")
    for col in ("mean", "median", "p90", "min", "max"):
        t.add_column(col, justify="right")
    t.add_column("CV", justify="right")
    t.add_row(*(f"{ms:.1f} ms" for ms in (s.mean_ms, s.median_ms, s.p90_ms, s.min_ms, s.max_ms)),
              f"{s.cv * 100:.1f}%")
    return t


def breakdown_table(r: RankAnalysis) -> Table:
    t = Table(title="Where the step time goes", title_justify="left")
    t.add_column("category")
    t.add_column("ms/step", justify="right")
    t.add_column("share", justify="right")
    t.add_column("")
    device_only = ("kernel", "memcpy", "memset", "runtime") if r.gpu is None else ("memset",)
    for c in ALL_CATEGORIES:
        pct = r.breakdown_pct[c]
        if pct < 0.05 and (c in device_only or c == "communication"):
            continue
        t.add_row(category_label(c), f"{r.breakdown_ms[c]:.2f}", f"{pct:.1f}%", _bar(pct))
    return t


def phases_table(r: RankAnalysis) -> Table:
    t = Table(title="Training phases (host timeline)", title_justify="left")
    t.add_column("phase")
    t.add_column("ms/step", justify="right")
    t.add_column("share", justify="right")
    t.add_column("")
    for p in PHASES:
        pct = r.phases_pct[p]
        t.add_row(p, f"{r.phases_ms[p]:.2f}", f"{pct:.1f}%", _bar(pct))
    return t


def gpu_table(r: RankAnalysis) -> Table | None:
    if not r.gpus:
        return None
    t = Table(title="GPU (over the step window)", title_justify="left",
              caption=f"* estimated from launch sizes; {TENSOR_CORE_OF_COMPUTE_NOTE}",
              caption_justify="left")
    for col in ("device", "utilisation", "SM efficiency*", "occupancy*", TENSOR_CORE_OF_COMPUTE):
        t.add_column(col, justify="right")
    for g in r.gpus:
        t.add_row(str(g.device), _fmt(g.utilization_pct), _fmt(g.sm_efficiency_pct),
                  _fmt(g.achieved_occupancy_pct), _fmt(g.tensor_core_pct))
    return t


def timeline_table(r: RankAnalysis) -> Table | None:
    tl = r.timeline
    if tl is None:
        return None
    t = Table(title=f"GPU timeline ({tl.span_ms:.1f} ms analysed)", title_justify="left")
    t.add_column("")
    t.add_column("share", justify="right")
    t.add_column("")
    rows = (
        ("busy", tl.busy_pct),
        ("idle", tl.idle_pct),
        ("compute", tl.compute_pct),
        ("communication", tl.communication_pct),
        ("  exposed (not under compute)", tl.exposed_communication_pct),
        ("memcpy / memset", tl.memcpy_pct),
        ("  exposed", tl.exposed_memcpy_pct),
    )
    for label, pct in rows:
        t.add_row(label, _fmt(pct), _bar(pct))
    if tl.comm_comp_overlap_pct is not None:
        t.add_row("communication hidden by compute", _fmt(tl.comm_comp_overlap_pct), "")
    return t


def view_context(options: AnalyzeOptions, rank: RankAnalysis | None = None,
                 analysis: Analysis | None = None) -> ViewContext:
    """What the sections' text renderers read besides their results: rows per table, the
    module tree, every rank's row, as ``options`` ask."""
    return ViewContext(rank=rank, analysis=analysis, rows=options.top, modules=options.modules,
                       all_ranks=options.all_ranks)


def rank_panel(r: RankAnalysis, options: AnalyzeOptions | None = None) -> Panel:
    """One rank's overview and sections, rendered with ``options`` (None: the defaults)."""
    parts: list[RenderableType] = [step_table(r), breakdown_table(r), phases_table(r)]
    parts += [x for x in (gpu_table(r), timeline_table(r)) if x is not None]
    context = view_context(options or AnalyzeOptions(), rank=r)
    for name, result in r.sections.items():
        render = BY_NAME[name].text
        shown = render(result, context) if render else None
        if shown is not None:
            parts.append(shown)
    parts += [Text(f"note: {n}", style="yellow") for n in r.notes]
    window = f", window {r.window}" if r.window else ""
    title = f"rank {r.rank}{window} · {r.device} · {r.path.name}"
    return Panel(Group(*parts), title=title, title_align="left")


def ranks_table(a: Analysis) -> ByWidth:
    """The per-rank table (analysis/job/rank_table.py): ms per step, slowest and fastest marked.
    Numbers are never cut: each column is as wide as its widest cell. Where the marks do not
    fit beside them, they go under the table as one line."""
    table = a.job.rank_table or rank_table(a.ranks)
    windows = sum(r.windows for r in table.rows)
    extra = f", {counted(windows, 'window')}" if windows > len(table.rows) else ""
    straggler = _straggler(a)
    shown = table.shown(keep=(straggler,), all_ranks=a.options.all_ranks)
    cells, marks = [], []
    for row in shown:
        idle = _fmt(row.idle_pct, "%", 0) + ("" if row.idle_of == "GPU" else "*")
        marks.append(" ".join(m for m in (row.mark, "straggler" * (row.rank == straggler)) if m))
        cells.append([str(row.rank), _cell_ms(row.step_ms),
                      *(_cell_ms(row.phases_ms[p]) for p in _PHASE_HEADS),
                      _cell_ms(row.comm_ms), _cell_ms(row.exposed_comm_ms),
                      idle if row.idle_pct is not None else "n/a"])
    columns = ["rank", "step", *_PHASE_HEADS.values(), "comm", "exp.", "idle"]
    widths = [max([len(col), *(len(c[i]) for c in cells)]) for i, col in enumerate(columns)]
    captions = []
    if len(shown) < len(table.rows):
        captions.append(f"{len(shown)} of {len(table.rows)} ranks: the slowest, the fastest"
                        f"{' and the straggler' if straggler is not None else ''}; "
                        "--all-ranks shows all, as the JSON result has")
    if any(row.idle_of == "host" for row in shown):
        captions.append("* CPU-only rank: share of the step no op covers")

    def build(width: int) -> Table:
        mark_width = max(map(len, marks), default=0)
        beside = sum(widths) + mark_width + 3 * len(widths) <= width  # 3: padding, rule
        t = Table(title=f"{counted(len(table.rows), 'rank')}{extra} (ms per step; exp.: communication "
                        "not hidden by compute)",
                  title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
        for col, w in zip(columns, widths, strict=True):
            t.add_column(col, justify="right", no_wrap=True, min_width=w)
        if beside:
            t.add_column("", justify="left", no_wrap=True)
        for row_cells, mark in zip(cells, marks, strict=True):
            t.add_row(*row_cells, *([mark] if beside else []))
        below = [] if beside else [
            "marks: " + "; ".join(f"rank {c[0]} {m}" for c, m in zip(cells, marks, strict=True)
                                  if m)] * any(marks)
        t.caption, t.caption_justify = "\n".join(captions + below) or None, "left"
        return t

    return ByWidth(build)


def spread_table(a: Analysis) -> Table | None:
    """How the ranks spread (report/terminal/rank_spread.py), from 8 ranks on, the outliers named under
    it; else None."""
    data = a.job.rank_table
    if data is None or not spread_shown(data):
        return None
    t = Table(title=f"How the {len(data.rows)} ranks spread (histogram: min to max)",
              title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in SPREAD_HEAD[:-1]:
        t.add_column(col, justify="right" if col in SPREAD_HEAD[1:6] else "left", no_wrap=True)
    captions = []
    for row, spread in zip(spread_rows(data.spread), data.spread.values(), strict=True):
        t.add_row(*row[:-1])
        captions.append(f"outliers in {spread.label}: {row[-1]}")
    captions.append("step time: each rank's median step; communication: ms per step")
    t.caption, t.caption_justify = "\n".join(captions), "left"
    return t


def _cell_ms(value: float | None) -> str:
    """ms in a narrow cell: one decimal below 100."""
    if value is None:
        return "n/a"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _straggler(a: Analysis) -> int | None:
    s = a.job.stragglers
    return None if s is None else s.straggler


def _window_in_full(a: Analysis) -> tuple[str, RankAnalysis]:
    """The window shown in full: the straggler's (else the slowest rank's) longest one."""
    table = a.job.rank_table
    straggler = _straggler(a)
    for label, rank in (("straggler", straggler),
                        ("slowest", None if table is None else table.slowest)):
        mine = [r for r in a.ranks if r.rank == rank]
        if mine:
            return label, max(mine, key=lambda r: (r.steps.count, -r.window))
    return "slowest", max(a.ranks, key=lambda r: r.steps.mean_ms)


_PHASE_HEADS = {"data": "data", "forward": "fwd", "backward": "bwd", "optimizer": "opt",
                "other": "other"}


_SEVERITY_STYLE = SEVERITY_STYLES


def findings_panel(a: Analysis, overview: str = "below") -> Panel:
    """The verdict: each finding with its cost, evidence and fix; or, with none, a pointer to
    where the time goes (the overview printed `overview` it)."""
    if not a.findings:
        return Panel(Text(f"No major bottleneck found. Where the time goes is {overview}."),
                     title="Verdict", title_align="left", border_style="green")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)  # the number, so that wrapped lines indent
    grid.add_column()
    minor = []
    for i, f in enumerate(a.findings, 1):
        where = "" if f.rank is None else f" · {where_text(f.rank, f.extra)}"
        if is_minor(f.reported_saving_pct, f.severity):
            minor.append(Text(f"{i}. [{f.severity}] {f.title}{where} · see {f.docs}",
                              style="dim"))
            continue
        head = Text()
        head.append(f"[{f.severity}] ", style=_SEVERITY_STYLE[f.severity])
        head.append(f.title, style="bold")
        head.append(f"{where} · "
                    + saving_phrase(f.reported_saving_pct, f.reported_saving_ms,
                                    shared_number(f, a.findings)))
        lines: list[RenderableType] = [head, *(Padding(Text(str(e), style="dim"), (0, 0, 0, 2)) for e in f.evidence)]
        if f.saving_assumption:
            lines.append(Padding(Text(f"Saving estimate: {f.saving_assumption}",
                                      style="dim italic"), (0, 0, 0, 2)))
        lines.append(Padding(Text(f"Fix: {f.fix.summary}", style="green"), (0, 0, 0, 2)))
        if i == 1 and f.fix.pytorch:  # the costliest one's code; all of them: JSON, HTML, Markdown
            lines.append(Padding(Text(f.fix.pytorch, style="cyan"), (0, 0, 0, 4)))
        lines.append(Padding(Text(f"See {f.docs}", style="dim"), (0, 0, 0, 2)))
        grid.add_row(f"{i}.", Group(*lines))
    parts: list = [grid]
    if minor:
        parts += [Text(f"Also seen, saving under {MINOR_SAVING_PCT}% of a step:", style="dim"),
                  *(Padding(m, (0, 0, 0, 2)) for m in minor)]
    return Panel(Group(*parts), title="Findings, most costly first", title_align="left")


def print_analysis(analysis: Analysis, console: Console | None = None, *,
                   top: int | None = None, modules: bool | None = None) -> None:
    """Print the verdict (the findings) first, as every report opens, then the overview of
    every rank (a summary table first when there are several). Rows per table, the module
    tree and every rank's row as the analysis was asked (``analysis.options``); ``top`` and
    ``modules`` override them."""
    given = {"top": top, "modules": modules}
    options = replace(analysis.options, **{k: v for k, v in given.items() if v is not None})
    if options != analysis.options:
        analysis = replace(analysis, options=options)
    console = console or Console()
    console.print(findings_panel(analysis))
    if len(analysis.ranks) > 1:
        console.print(ranks_table(analysis))
        spread = spread_table(analysis)
        if spread is not None:
            console.print(spread)
        label, shown = _window_in_full(analysis)
        console.print(Text(f"Details of the {label}: rank {shown.rank}", style="bold"))
        console.print(rank_panel(shown, options))
    else:
        console.print(rank_panel(analysis.ranks[0], options))
    context = view_context(options, analysis=analysis)
    for name, result in analysis.job.items():
        render = BY_NAME[name].text
        rendered = render(result, context) if render else None
        if rendered is not None:
            console.print(rendered)
    for note in analysis.notes:
        console.print(Text(f"note: {note}", style="yellow"))
