"""The syncs section's renderers: the host's waits for the device, by site."""

from __future__ import annotations

from trainprof.report.sections.view import SectionView
from trainprof.report.terminal.launches import render_syncs

VIEW = SectionView("syncs", text=lambda result, ctx: render_syncs(result, ctx.rows))
