"""Terminal renderers of the deep-analysis sections (see analysis/sections.py).

Each renderer takes the section's result and returns a rich renderable, or None to show nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainprof.report.communication import render_communication, render_stragglers
from trainprof.report.compilation import render_compilation
from trainprof.report.copies import render_copies
from trainprof.report.critical_path import render_critical_path
from trainprof.report.hotspots import render_kernels, render_operators
from trainprof.report.idle import render_idle
from trainprof.report.launches import render_launch, render_syncs
from trainprof.report.memory import render_memory
from trainprof.report.modules import render_modules
from trainprof.report.roofline import (
    render_collective_ranks,
    render_collectives,
    render_roofline,
)

#: section name -> renderer
RENDERERS: dict[str, Callable[[Any], Any]] = {}
RENDERERS.update(
    idle=render_idle,
    copies=render_copies,
    memory=render_memory,
    communication=render_communication,
    stragglers=render_stragglers,
)
RENDERERS.update(
    operators=render_operators,
    kernels=render_kernels,
    launch=render_launch,
    syncs=render_syncs,
)
RENDERERS.update(modules=render_modules)
RENDERERS.update(roofline=render_roofline, collectives=render_collectives,
                 collective_ranks=render_collective_ranks)
RENDERERS.update(compilation=render_compilation)
RENDERERS.update(critical_path=render_critical_path)
