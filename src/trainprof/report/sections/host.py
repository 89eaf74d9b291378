"""The host section: its figures feed the findings and the rank table; no view of its own."""

from __future__ import annotations

from trainprof.report.sections.view import SectionView

VIEW = SectionView("host")
