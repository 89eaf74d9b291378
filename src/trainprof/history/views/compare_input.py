"""History ids as ``trainprof compare`` inputs: ``history:12`` or ``@12``.

The row becomes a light ``Analysis`` through the saved-result path (``report.saved``): every
stored step time per rank, the phases and the breakdown. The history keeps no operator or kernel
tables, so a comparison with a history row lists no changed ops. The database is
``$TRAINPROF_HISTORY_DB``, else ``.trainprof/history.db``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from trainprof.analysis.decode import analysis_from_dict
from trainprof.analysis.results import SCHEMA, Analysis
from trainprof.history.store.database import History
from trainprof.history.store.rows import RunRecord
from trainprof.history.views.terminal import when

_ID = re.compile(r"^(?:history:|@)(\d+)$")


def history_id(x: Any) -> int | None:
    """The id in ``history:12`` or ``@12``; None for anything else, or for a file of that name."""
    if not isinstance(x, str | os.PathLike):
        return None
    text = os.fspath(x)
    found = _ID.match(text)
    if found is None or Path(text).exists():
        return None
    return int(found.group(1))


def analysis_from_history(run_id: int, db: str | os.PathLike[str] | None = None) -> Analysis:
    """The stored run as an ``Analysis`` that ``analysis.diff`` and ``compare`` read."""
    record = History(db).get(run_id)
    analysis = analysis_from_dict(result_of(record))
    if not record.step_times_ms:
        analysis.notes.append(f"history:{run_id} keeps no per-step times (only its summary).")
    return analysis


def result_of(record: RunRecord) -> dict[str, Any]:
    """A saved-result dict (``trainprof.analysis/1``) holding what the row knows."""
    times = record.step_times_ms
    spans = record.step_ranks or ([[record.rank or 0, len(times)]] if times else [])
    ranks, start = [], 0
    for rank, count in spans:
        ranks.append(_rank(record, int(rank), times[start:start + count]))
        start += count
    if not ranks:
        ranks.append(_rank(record, record.rank or 0, []))
    return {"schema": SCHEMA, "ranks": ranks, "findings": record.findings, "notes": [],
            "source": f"history:{record.id} {record.name} ({when(record.recorded_at)})"}


def _rank(record: RunRecord, rank: int, times: list[float]) -> dict[str, Any]:
    steps = {"count": len(times), "median_ms": record.step_ms_median,
             "mean_ms": record.step_ms_mean, "per_step": [{"step": i, "ms": t}
                                                          for i, t in enumerate(times)]}
    return {"rank": rank, "device": record.devices or "", "steps": steps,
            "phases_ms": {k: v for k, v in record.phases_ms.items() if v is not None},
            "breakdown_ms": dict(record.extra.get("breakdown_ms") or {})}
