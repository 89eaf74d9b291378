"""A chart of the HTML report: the SVG, its colour key and a caption."""

from __future__ import annotations

import msgspec
from markupsafe import Markup


class Chart(msgspec.Struct):
    svg: Markup
    legend: Markup | None = None
    caption: str = ""
