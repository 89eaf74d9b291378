"""The launch section's renderers: kernel launches and their host cost."""

from __future__ import annotations

from trainprof.report.sections.view import SectionView
from trainprof.report.terminal.launches import render_launch

VIEW = SectionView("launch", text=lambda result, ctx: render_launch(result))
