"""Terminal renderers of the deep-analysis sections (see analysis/sections/registry.py).

Each renderer takes the section's result and returns a rich renderable, or None to show nothing.
Those that depend on the analysis's options (rows per table, the module tree, every rank's row)
take them as keyword arguments: ``renderers_for(options)`` binds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainprof.analysis.options import AnalyzeOptions
from trainprof.report.terminal.communication import render_communication, render_stragglers
from trainprof.report.terminal.compilation import render_compilation
from trainprof.report.terminal.copies import render_copies
from trainprof.report.terminal.critical_path import render_critical_path
from trainprof.report.terminal.hotspots import render_kernels, render_operators
from trainprof.report.terminal.idle import render_idle
from trainprof.report.terminal.launches import render_launch, render_syncs
from trainprof.report.terminal.memory import render_memory
from trainprof.report.terminal.model_parallel import render_experts
from trainprof.report.terminal.modules import render_modules
from trainprof.report.terminal.parallelism import render_parallelism, render_pipeline
from trainprof.report.terminal.roofline import (
    render_collective_ranks,
    render_collectives,
    render_roofline,
)

#: section name -> renderer, with the default options
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
RENDERERS.update(parallelism=render_parallelism, pipeline=render_pipeline)
RENDERERS.update(experts=render_experts)


def renderers_for(options: AnalyzeOptions) -> dict[str, Callable[[Any], Any]]:
    """``RENDERERS`` with these options: ``top`` rows per table, the module tree if
    ``modules``, every rank's row if ``all_ranks``."""
    top = options.top
    return {**RENDERERS,
            "operators": lambda r: render_operators(r, top),
            "kernels": lambda r: render_kernels(r, top),
            "syncs": lambda r: render_syncs(r, top),
            "modules": lambda r: render_modules(r, options.modules),
            "stragglers": lambda r: render_stragglers(r, options.all_ranks)}
