"""The compilation section's renderers: torch.compile's compilations and untraced time."""

from __future__ import annotations

from trainprof.report.sections.view import SectionView
from trainprof.report.terminal.compilation import render_compilation

VIEW = SectionView("compilation", text=lambda result, ctx: render_compilation(result))
