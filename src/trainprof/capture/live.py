"""The live view of ``StepTimer(live=True)`` and ``trainprof run --live``.

In a terminal, a rich panel redrawn every ``REFRESH_S``: step time with a sparkline of the
latest steps, the phases, samples/s (tokens/s, MFU), memory and the top finding. When standard
output is not a terminal (a log file, a CI job), a log line every ``LOG_EVERY_S`` instead.
Shown by one rank: ``$TRAINPROF_LIVE_RANK``, else rank 0. ``$TRAINPROF_LIVE_EVERY`` sets the
interval in seconds for both.

The view is drawn from the training loop, at the end of a step once the interval has passed
(no thread reads the timer while it writes): a check of the clock per step, and a few
milliseconds per redraw. A failure while drawing warns once and turns the view off; training
goes on. See docs/live.md.
"""

from __future__ import annotations

import atexit
import os
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from trainprof.capture.live_figures import LiveFigures, figures_of
from trainprof.capture.ranks import current_rank
from trainprof.capture.safety import WarnOnce
from trainprof.capture.step_times import PHASES, log_line
from trainprof.formatting import size
from trainprof.sparkline import sparkline
from trainprof.vocabulary import PHASE_TERMINAL_COLORS, SEVERITY_STYLES

REFRESH_S = 2.0
LOG_EVERY_S = 30.0
EVERY_ENV = "TRAINPROF_LIVE_EVERY"
RANK_ENV = "TRAINPROF_LIVE_RANK"
PHASE_COLORS = PHASE_TERMINAL_COLORS
BAR_WIDTH = 50


def live_view(timer: Any, console: Console | None = None) -> LiveView | None:
    """The view for this process, or None on the ranks that do not show it."""
    shown = os.environ.get(RANK_ENV, "0")
    rank = current_rank()
    if rank != (int(shown) if shown.isdigit() else 0):
        return None
    return LiveView(timer, rank, console)


class LiveView:
    """Draws the panel (or writes the log line) when ``tick()`` finds the interval has passed."""

    def __init__(self, timer: Any, rank: int = 0, console: Console | None = None,
                 every_s: float | None = None) -> None:
        self.timer = timer
        self.rank = rank
        self.console = console or Console()
        self.terminal = self.console.is_terminal
        self.every_s = every_s or _env_seconds() or (REFRESH_S if self.terminal else LOG_EVERY_S)
        self._started = time.monotonic()
        self._due = self._started + self.every_s
        self._live: Live | None = None
        self._logged = 0  # steps measured at the last log line
        self._warn = WarnOnce()
        self._off = False
        atexit.register(self.stop)

    def tick(self) -> None:
        """Called at the end of each step: redraws once the interval has passed."""
        now = time.monotonic()
        if now < self._due or self._off:
            return
        self._due = now + self.every_s
        self.show()

    def show(self, final: bool = False) -> None:
        try:
            self.timer._read_back(wait=final)
            figures = figures_of(self.timer, self.rank, time.monotonic() - self._started)
            if figures is None:
                return
            if not self.terminal:
                if figures.measured != self._logged:  # no repeated line at close
                    self._logged = figures.measured
                    self.timer._log(log_text(figures))
            elif self._live is None:
                self._live = Live(panel(figures), console=self.console, auto_refresh=False,
                                  redirect_stdout=True, redirect_stderr=True)
                self._live.start(refresh=True)
            else:
                self._live.update(panel(figures), refresh=True)
        except Exception as error:  # drawing must never stop training
            self._off = True
            self._close_live()
            self._warn("the live view failed and was turned off; training goes on", error)

    def stop(self) -> None:
        """Draws the final figures and gives the terminal back (idempotent)."""
        atexit.unregister(self.stop)
        if not self._off:
            self.show(final=True)
            self._off = True
        self._close_live()

    def _close_live(self) -> None:
        live, self._live = self._live, None
        if live is None:
            return
        try:
            live.stop()
        except Exception as error:  # the terminal is gone: nothing more to give back
            self._warn("the live view failed and was turned off; training goes on", error)


def panel(f: LiveFigures) -> Panel:
    """The live panel for one set of figures."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    spark = Text(sparkline(f.recent_ms, 60), style="cyan")
    grid.add_row("step time", Text.assemble(
        f"{f.mean_ms:.1f} ms/step  median {f.median_ms:.1f}  p90 {f.p90_ms:.1f}   ", spark))
    pct = f.phase_pct()
    phases = Text("  ".join(f"{p} {ms / f.recent.steps:.1f} ({pct[p]:.0f}%)"
                            for p, ms in zip(PHASES, f.recent.phase_ms, strict=True)) + "  ms")
    grid.add_row("phases", Group(phases, _phase_bar(pct)))
    grid.add_row("throughput", _throughput(f))
    grid.add_row("memory", _memory(f))
    grid.add_row("top finding", _finding_text(f))
    title = (f"trainprof live · rank {f.rank} · step {f.last_step} · {f.measured} measured · "
             f"{_clock(f.elapsed_s)}")
    return Panel(grid, title=title, title_align="left", border_style="cyan",
                 subtitle=f"latest {f.recent.steps} steps", subtitle_align="right")


def log_text(f: LiveFigures) -> str:
    """The log line that stands in for the panel when output is not a terminal."""
    line = log_line(f.last_step, f.recent, f.mfu)
    if f.samples_per_s is None:
        line += ", samples/s unknown"
    line += f"; {_memory(f).plain}"
    found = f.finding
    return line + (f"; top finding: {found.id} ({found.severity}): {found.title}" if found
                   else "; no finding above the diagnosis thresholds")


def _phase_bar(pct: dict[str, float]) -> Text:
    bar = Text()
    for p in PHASES:
        bar.append("█" * round(pct[p] / 100 * BAR_WIDTH), style=PHASE_COLORS[p])
    return bar


def _throughput(f: LiveFigures) -> Text:
    parts = [f"{f.samples_per_s:,.0f} samples/s" if f.samples_per_s is not None
             else "samples/s unknown (no batch size seen)"]
    if f.tokens_per_s is not None:
        parts.append(f"{f.tokens_per_s:,.0f} tokens/s")
    if f.mfu is not None:
        parts.append(f"MFU {f.mfu:.1%}")
    return Text("  ".join(parts))


def _memory(f: LiveFigures) -> Text:
    if f.peak_memory_bytes is None:
        return Text("memory unknown")
    text = f"peak memory {size(f.peak_memory_bytes)}"
    if f.device_memory_bytes:
        text += f" ({f.peak_memory_bytes / f.device_memory_bytes:.0%} of the GPU)"
    else:
        text += " (process peak RSS)"
    return Text(text)


def _finding_text(f: LiveFigures) -> Text:
    found = f.finding
    if found is None:
        return Text("none above the diagnosis thresholds", style="green")
    style = SEVERITY_STYLES.get(found.severity, "")
    return Text.assemble((f"{found.title} ({found.id}, {found.severity})", style),
                         f"\nfix: {found.fix.summary}")


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _env_seconds() -> float | None:
    try:
        value = float(os.environ.get(EVERY_ENV, ""))
    except ValueError:
        return None
    return value if value > 0 else None
