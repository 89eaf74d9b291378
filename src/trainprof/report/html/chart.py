"""A chart of the HTML report: the SVG, its colour key and a caption."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup


@dataclass
class Chart:
    svg: Markup
    legend: Markup | None = None
    caption: str = ""
