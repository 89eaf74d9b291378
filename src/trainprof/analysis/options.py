"""How the operator and kernel tables are grouped, sorted and cut, for the command line.

The Python API takes these as arguments (``operator_stats(..., by_shape=True)``); the command
line sets them for one ``analyze`` run with ``using_table_options``, which the registered
sections and their renderers read. Plain data, no numpy: the CLI imports it to build its parser.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import msgspec

#: Columns the operator table can be sorted by (largest first; ``name`` alphabetically).
OPERATOR_SORT_COLUMNS = ("device_self_us", "device_total_us", "host_self_us", "host_total_us",
                         "calls", "name")
#: Rows the text report shows per table.
DEFAULT_TOP = 10


class TableOptions(msgspec.Struct, frozen=True):
    """``sort_by`` None means device self time on GPU traces, host self time otherwise."""

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


_DEFAULT = TableOptions()
_CURRENT: ContextVar[TableOptions | None] = ContextVar("trainprof_table_options", default=None)


def table_options() -> TableOptions:
    """The options in force (the defaults unless ``using_table_options`` set others)."""
    return _CURRENT.get() or _DEFAULT


@contextmanager
def using_table_options(options: TableOptions) -> Iterator[TableOptions]:
    """Use these options for the sections and renderers run inside the ``with`` block."""
    token = _CURRENT.set(options)
    try:
        yield options
    finally:
        _CURRENT.reset(token)
