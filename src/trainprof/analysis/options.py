"""The options of one analysis: the command line's ``analyze`` options, in one place.

``trainprof.analyze(path, hardware=..., step_marker=..., ...)`` (or ``options=AnalyzeOptions(...)``)
and ``trainprof analyze --hardware ... --step-marker ...`` build the same ``AnalyzeOptions``, and
pass it down as an argument: the sections that depend on it are built from it
(``analysis.sections.registry.sections_for``: the operator table's grouping and order, the
roofline's peaks), the file workers get it with each task, and the result keeps it
(``Analysis.options``, not in the JSON result) for the renderers (rows per table, the module
tree, every rank's row). Plain data, no numpy: the CLI imports it to build its parser.

``analyze_options()`` and ``using_options()`` are deprecated (a ``DeprecationWarning``): a
``using_options`` block only sets the defaults of the ``trainprof.analyze`` calls made inside
it. ``TableOptions``, ``table_options`` and ``using_table_options`` are their older names.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any

import msgspec

from trainprof.deprecated import old_names

#: Columns the operator table can be sorted by (largest first; ``name`` alphabetically).
OPERATOR_SORT_COLUMNS = ("device_self_us", "device_total_us", "host_self_us", "host_total_us",
                         "calls", "name")
#: Rows the text report shows per table.
DEFAULT_TOP = 10


class AnalyzeOptions(msgspec.Struct, frozen=True):
    """Every option of an analysis. ``sort_by`` None means device self time on GPU traces, host
    self time otherwise. A bad value raises ``ValueError``."""

    sort_by: str | None = None
    top: int = DEFAULT_TOP
    by_shape: bool = False
    #: Show the module tree (``analyze --modules``; docs/modules.md).
    modules: bool = False
    #: A ``trainprof.hardware.Device`` from ``--hardware FILE.json``, used for every trace.
    hardware: Any = None
    all_ranks: bool = False  # every rank's row in the per-rank tables (analysis/job/rank_table.py)
    #: Bytes one trace's analysis may take (``--max-memory``); a trace that would not fit read
    #: whole is streamed (analysis/streaming/streamed.py). None: half the available memory.
    max_memory: int | None = None
    #: A regular expression naming the NVTX ranges that mark steps in an Nsight Systems export
    #: (``analyze --step-marker``; its first group of digits is the step number; docs/nsys.md).
    step_marker: str | None = None

    def __post_init__(self) -> None:
        if self.sort_by is not None and self.sort_by not in OPERATOR_SORT_COLUMNS:
            raise ValueError(f"cannot sort operators by {self.sort_by!r}; choose one of "
                             f"{', '.join(OPERATOR_SORT_COLUMNS)}")
        if self.top < 1:
            raise ValueError("top must be at least 1")
        if self.max_memory is not None and self.max_memory < 1:
            raise ValueError("max_memory must be a positive number of bytes")


_DEFAULT = AnalyzeOptions()
#: The defaults a deprecated ``using_options`` block sets for ``trainprof.analyze``.
_IN_FORCE: ContextVar[AnalyzeOptions | None] = ContextVar("trainprof_table_options", default=None)
_DEPRECATED = ("{} is deprecated: pass the options to trainprof.analyze (options=AnalyzeOptions"
               "(...) or top=..., sort_by=...); the result keeps them for the renderers "
               "(Analysis.options).")


def defaults_in_force() -> AnalyzeOptions:
    """The options ``trainprof.analyze`` starts from: ``AnalyzeOptions()``, or those of the
    (deprecated) ``using_options`` block it is called in."""
    return _IN_FORCE.get() or _DEFAULT


def analyze_options() -> AnalyzeOptions:
    """Deprecated: the defaults ``using_options`` set (``AnalyzeOptions()`` outside one)."""
    warnings.warn(_DEPRECATED.format("analyze_options()"), DeprecationWarning, stacklevel=2)
    return defaults_in_force()


def using_options(options: AnalyzeOptions) -> AbstractContextManager[AnalyzeOptions]:
    """Deprecated: inside the ``with`` block, ``trainprof.analyze`` starts from ``options``
    (its own arguments still override them)."""
    warnings.warn(_DEPRECATED.format("using_options()"), DeprecationWarning, stacklevel=2)
    return _defaults(options)


@contextmanager
def _defaults(options: AnalyzeOptions) -> Iterator[AnalyzeOptions]:
    token = _IN_FORCE.set(options)
    try:
        yield options
    finally:
        _IN_FORCE.reset(token)


__getattr__ = old_names(__name__, {"TableOptions": "AnalyzeOptions",
                                 "table_options": "analyze_options",
                                 "using_table_options": "using_options"})
