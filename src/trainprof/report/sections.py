"""Terminal renderers of the deep-analysis sections (see analysis/sections.py).

Each renderer takes the section's result and returns a rich renderable, or None to show nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: section name -> renderer
RENDERERS: dict[str, Callable[[Any], Any]] = {}
