"""`RunRecord`: one row of the history, and how it is stored (plain values, JSON, float32 steps).

Only the standard library and numpy: the step timer imports this while training.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, TypedDict

import numpy as np
from msgspec import field

from trainprof.structs import Record, asdict, fields

#: Per-step times kept per row; longer runs keep this many, evenly spaced over the run (enough
#: for the bootstrap of the median, at 8 KB a row).
MAX_STORED_STEPS = 2048
_JSON_COLUMNS = ("phases_ms", "findings", "extra")


class RunRecord(Record):
    """A recorded run: where and when, its step-time figures, phases, memory and findings.

    ``kind`` says what measured it: ``analysis`` (a trace), ``step_timer``, ``run``
    (``trainprof run``: the step timer plus the trace's findings) or ``cluster`` (a
    ``cluster_summary.json``). ``step_times_ms`` holds every step (all ranks, rank by rank, as
    ``step_ranks`` [[rank, count], ...] says), thinned to ``MAX_STORED_STEPS``. Its JSON
    (``to_dict``: the pending file's line, the JSON export's row) is every field.
    """

    name: str
    kind: str
    recorded_at: float = field(default_factory=time.time)
    source: str = ""
    git_commit: str | None = None
    host: str | None = None
    devices: str | None = None
    world_size: int | None = None
    rank: int | None = None
    job: str | None = None
    steps: int = 0
    step_ms_mean: float | None = None
    step_ms_median: float | None = None
    step_ms_p90: float | None = None
    step_ms_min: float | None = None
    step_ms_max: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    samples_per_step: float | None = None
    peak_memory_bytes: int | None = None
    phases_ms: dict[str, float | None] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    step_times_ms: list[float] = field(default_factory=list)
    step_ranks: list[list[int]] = field(default_factory=list)
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    id: int | None = None

    @property
    def top_finding(self) -> dict[str, Any] | None:
        return self.findings[0] if self.findings else None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_row(self) -> dict[str, Any]:
        """Column values for the ``runs`` table (no ``id``: the database gives it)."""
        row = {k: v for k, v in asdict(self).items()
               if k not in ("id", "step_times_ms", "step_ranks")}
        for key in _JSON_COLUMNS:
            row[key] = json.dumps(row[key], default=_plain)
        row["step_times"] = (np.asarray(self.step_times_ms, "<f4").tobytes()
                             if self.step_times_ms else None)
        row["step_ranks"] = json.dumps(self.step_ranks) if self.step_ranks else None
        return row

    @classmethod
    def from_row(cls, row: Any) -> RunRecord:
        """A record from a ``sqlite3.Row`` of the ``runs`` table."""
        data = dict(row)
        for key in _JSON_COLUMNS:
            data[key] = json.loads(data[key]) if data.get(key) else ({} if key != "findings" else [])
        blob = data.pop("step_times", None)
        data["step_times_ms"] = np.frombuffer(blob, "<f4").astype(float).tolist() if blob else []
        ranks = data.get("step_ranks")
        data["step_ranks"] = json.loads(ranks) if ranks else []
        return cls.from_dict(data)


def _plain(value: Any) -> Any:
    """numpy scalars in the JSON columns."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in the history")


def thin(per_rank: list[tuple[int, list[float]]], limit: int = MAX_STORED_STEPS
         ) -> tuple[list[float], list[list[int]]]:
    """Every rank's step times concatenated, each rank thinned evenly so the total fits."""
    total = sum(len(times) for _, times in per_rank)
    keep = 1.0 if total <= limit else limit / total
    out: list[float] = []
    ranks: list[list[int]] = []
    for rank, times in per_rank:
        n = len(times)
        k = n if keep == 1.0 else max(1, int(n * keep))
        picked = times if k >= n else [times[i] for i in np.linspace(0, n - 1, k).round().astype(int)]
        out.extend(float(t) for t in picked)
        ranks.append([int(rank), len(picked)])
    return out, ranks


class StepFigures(TypedDict, total=False):
    """A record's step-time columns, as far as they are known."""

    step_ms_mean: float | None
    step_ms_median: float | None
    step_ms_p90: float | None
    step_ms_min: float | None
    step_ms_max: float | None


def step_figures(step_ms: list[float]) -> StepFigures:
    """Mean, median, p90, min and max of step times (ms), as the record's columns."""
    if not step_ms:
        return {}
    a = np.asarray(step_ms, float)
    return {"step_ms_mean": float(a.mean()), "step_ms_median": float(np.median(a)),
            "step_ms_p90": float(np.percentile(a, 90)), "step_ms_min": float(a.min()),
            "step_ms_max": float(a.max())}
