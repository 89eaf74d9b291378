"""The whole pipeline behind ``trainprof.analyze``: read, analyse, diagnose."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from trainprof.analysis import analyze as overview
from trainprof.analysis.options import AnalyzeOptions, defaults_in_force
from trainprof.analysis.results import Analysis
from trainprof.analysis.streaming.memory_budget import parse_memory
from trainprof.diagnose.engine import diagnose
from trainprof.hardware.table import Device, load_hardware_file
from trainprof.structs import replace
from trainprof.trace.load import Progress
from trainprof.trace.model import Trace

if TYPE_CHECKING:
    from concurrent.futures import Executor


def analyze(
    source: str | os.PathLike[str] | Iterable[Trace], progress: Progress | None = None,
    workers: int | None = None, executor: Executor | None = None,
    max_memory: int | str | None = None, *, options: AnalyzeOptions | None = None,
    hardware: Device | str | os.PathLike[str] | None = None, step_marker: str | None = None,
    sort_by: str | None = None, top: int | None = None, by_shape: bool | None = None,
    modules: bool | None = None, all_ranks: bool | None = None,
) -> Analysis:
    """Analyse a trace file, a folder of ranks, a cluster summary, or loaded traces, and
    diagnose the result. ``workers``: processes for a folder's traces (None: by cores and
    memory; 1: this process only). ``executor``: any ``concurrent.futures.Executor`` to run
    one task per trace file on instead (a Dask client's ``get_executor()``; docs/cluster.md).

    The options of ``trainprof analyze`` (analysis/options.py), each as on the command line:
    ``max_memory``: bytes (or ``"4G"``, ``"512M"``) one trace's analysis may take; a trace
    that would not fit read whole is analysed window by window from disk (default: half the
    available memory; docs/performance.md). ``hardware``: a ``trainprof.hardware.Device`` or
    the JSON file that describes one (``--hardware``; docs/roofline.md). ``step_marker``: the
    NVTX ranges that mark steps in an Nsight Systems export (docs/nsys.md). ``sort_by``,
    ``top``, ``by_shape``: the operator table; ``modules``: the module tree in the text
    report; ``all_ranks``: every rank's row in the per-rank tables. ``options``: an
    ``AnalyzeOptions`` holding them all (the arguments given beside it override it; the
    default is ``AnalyzeOptions()``, or those of a deprecated ``using_options`` block). The
    result keeps the options it was made with (``Analysis.options``) for the renderers.

    Raises ``trainprof.TraceError`` when the input cannot be read as Kineto traces or an
    Nsight Systems export, ``ValueError`` for a bad option, ``trainprof.errors.HardwareError``
    for a hardware file that does not describe a device.
    """
    if isinstance(max_memory, str):
        max_memory = parse_memory(max_memory)
    if hardware is not None and not isinstance(hardware, Device):
        hardware = load_hardware_file(Path(hardware))
    given = {"max_memory": max_memory, "hardware": hardware, "step_marker": step_marker,
             "sort_by": sort_by, "top": top, "by_shape": by_shape, "modules": modules,
             "all_ranks": all_ranks}
    chosen = replace(options or defaults_in_force(),
                     **{k: v for k, v in given.items() if v is not None})
    analysis = overview.analyze_ranks(source, progress=progress, workers=workers,
                                      executor=executor, options=chosen)
    analysis.findings = diagnose(analysis)
    return analysis
