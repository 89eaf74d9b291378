"""The copies section's renderers (host-device copies)."""

from __future__ import annotations

from trainprof.report.sections.view import SectionView
from trainprof.report.terminal.copies import render_copies

VIEW = SectionView("copies", text=lambda result, ctx: render_copies(result))
