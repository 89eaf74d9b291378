"""``trainprof history --export csv|json``: the rows that match, with each one's verdict.

JSON (``schema: trainprof.history/1``) keeps everything but the per-step times; CSV has one
flat row per run (phases as ``<phase>_ms`` columns, the top finding's id and saving).
"""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import msgspec

from trainprof.history.store.rows import RunRecord
from trainprof.history.views.regress import Point, RegressionVerdict, Series
from trainprof.history.views.terminal import verdict_of, verdicts_by_id
from trainprof.tidy import tidy
from trainprof.vocabulary import PHASES

SCHEMA = "trainprof.history/1"
CSV_COLUMNS = (
    "id", "recorded_at", "name", "kind", "source", "git_commit", "host", "devices", "world_size",
    "rank", "job", "steps", "step_ms_mean", "step_ms_median", "step_ms_p90", "step_ms_min",
    "step_ms_max", "samples_per_s", "tokens_per_s", "samples_per_step", "peak_memory_bytes",
    *(f"{p}_ms" for p in PHASES), "findings", "top_finding", "top_finding_saving_pct", "status",
    "change_pct", "baseline_ms",
)


def iso(t: float) -> str:
    """A recorded time as ISO 8601 UTC (``2024-06-01T10:31:05Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def to_json(records: list[RunRecord], series: list[Series], db: str) -> str:
    verdicts = verdicts_by_id(series)
    runs = []
    for r in records:
        row = {k: v for k, v in r.to_dict().items() if k not in ("step_times_ms", "step_ranks")}
        row["recorded_at"] = iso(r.recorded_at)
        row["verdict"] = _verdict(verdict_of(verdicts, r))
        runs.append(row)
    flagged = [{"name": s.name, "kind": s.kind, "runs": p.ids, **v.to_dict()}
               for s in series for p, v in s.flagged()]
    data = {"schema": SCHEMA, "db": db, "runs": runs, "changes": flagged}
    return msgspec.json.format(msgspec.json.encode(tidy(data)), indent=2).decode() + "\n"


def to_csv(records: list[RunRecord], series: list[Series]) -> str:
    verdicts = verdicts_by_id(series)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in records:
        row: dict[str, Any] = r.to_dict()
        row["recorded_at"] = iso(r.recorded_at)
        row.update({f"{p}_ms": r.phases_ms.get(p) for p in PHASES})
        top = r.top_finding or {}
        row.update(findings=len(r.findings), top_finding=top.get("id"),
                   top_finding_saving_pct=top.get("saving_pct"))
        verdict = _verdict(verdict_of(verdicts, r)) or {}
        row.update(status=verdict.get("status"), change_pct=verdict.get("change_pct"),
                   baseline_ms=verdict.get("baseline_ms"))
        writer.writerow(tidy(row))
    return out.getvalue()


def _verdict(found: tuple[Point, RegressionVerdict] | None) -> dict[str, Any] | None:
    return None if found is None else found[1].to_dict()
