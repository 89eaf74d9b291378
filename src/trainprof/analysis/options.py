"""The options of one analysis: the command line's ``analyze`` options, in one place.

``trainprof.analyze(path, hardware=..., step_marker=..., ...)`` (or ``options=AnalyzeOptions(...)``)
and ``trainprof analyze --hardware ... --step-marker ...`` build the same ``AnalyzeOptions``; they
are in force for that analysis (``using_options``), where the sections that depend on them (the
operator table's grouping and order, the roofline's peaks, the rank table, the memory budget,
the nsys step marker) and the renderers read them with ``analyze_options()``. Plain data, no
numpy: the CLI imports it to build its parser.

``TableOptions``, ``table_options`` and ``using_table_options`` are the old names (until 0.x);
they still work, with a ``DeprecationWarning``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
_CURRENT: ContextVar[AnalyzeOptions | None] = ContextVar("trainprof_table_options", default=None)


def analyze_options() -> AnalyzeOptions:
    """The options in force (the defaults unless ``using_options`` set others)."""
    return _CURRENT.get() or _DEFAULT


@contextmanager
def using_options(options: AnalyzeOptions) -> Iterator[AnalyzeOptions]:
    """Use these options for the sections and renderers run inside the ``with`` block."""
    token = _CURRENT.set(options)
    try:
        yield options
    finally:
        _CURRENT.reset(token)


__getattr__ = old_names(__name__, {"TableOptions": "AnalyzeOptions",
                                 "table_options": "analyze_options",
                                 "using_table_options": "using_options"})
