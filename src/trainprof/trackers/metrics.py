"""What trainprof logs to a tracker: metric names and values, and the findings as rows.

Names start with ``trainprof/``; on a job of several ranks the per-rank figures carry
``rank{R}/`` after it. Every metric is explained in docs/trackers.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainprof.analysis.results import Analysis, RankAnalysis

PREFIX = "trainprof/"
#: The columns of the findings table.
FINDING_COLUMNS = ("rank", "id", "severity", "saving_pct", "saving_ms", "title")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _rank_prefix(analysis: Analysis, rank: RankAnalysis) -> str:
    if len(analysis.ranks) == 1:
        return PREFIX
    window = f".w{rank.window}" if rank.window else ""
    return f"{PREFIX}rank{rank.rank}{window}/"


def _peak_memory(rank: RankAnalysis) -> float | None:
    memory = rank.sections.memory
    devices = memory.to_dict().get("devices", []) if memory is not None else []
    peaks = [d.get("peak_allocated") for d in devices if _finite(d.get("peak_allocated"))]
    return max(peaks) if peaks else None


def summary_metrics(analysis: Analysis) -> dict[str, float]:
    """One value per metric for the whole run: step time, shares, GPU figures, peak memory."""
    out: dict[str, float] = {}
    for rank in analysis.ranks:
        p = _rank_prefix(analysis, rank)
        values: dict[str, Any] = {
            "step_ms_median": rank.steps.median_ms,
            "step_ms_mean": rank.steps.mean_ms,
            "step_ms_p90": rank.steps.p90_ms,
            "steps": rank.steps.count,
            "peak_memory_bytes": _peak_memory(rank),
        }
        values.update({f"phase/{k}_pct": v for k, v in rank.phases_pct.items()})
        values.update({f"breakdown/{k}_pct": v for k, v in rank.breakdown_pct.items()})
        gpu = rank.gpu
        if gpu is not None:
            values.update({f"gpu/{k}": v for k, v in gpu.to_dict().items() if k != "device"})
        out.update({p + k: float(v) for k, v in values.items() if _finite(v)})
    out[PREFIX + "findings"] = float(len(analysis.findings))
    return out


def step_series(analysis: Analysis) -> list[tuple[int, dict[str, float]]]:
    """(step number, {name: step time in ms}) for each step, every rank's under its name."""
    by_step: dict[int, dict[str, float]] = {}
    for rank in analysis.ranks:
        key = _rank_prefix(analysis, rank) + "step_ms"
        for row in rank.steps.per_step:
            if _finite(row.get("ms")) and isinstance(row.get("step"), int):
                by_step.setdefault(row["step"], {})[key] = float(row["ms"])
    return sorted(by_step.items())


def finding_rows(analysis: Any) -> list[list[Any]]:
    """The findings, most costly first, as rows of ``FINDING_COLUMNS``."""
    rows = []
    for f in analysis.findings:
        d = f.to_dict() if hasattr(f, "to_dict") else f
        rows.append([d.get("rank"), d["id"], str(d["severity"]), float(d["saving_pct"]),
                     float(d["saving_ms"]), d["title"]])
    return rows


def finding_tags(analysis: Any) -> dict[str, str]:
    """``trainprof.finding.<id>``: its severity, for trackers that filter runs by tag."""
    return {f"trainprof.finding.{row[1]}": row[2] for row in finding_rows(analysis)}


def timer_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The step timer's per-step record (``step_ms``, ``data_ms``...) as metric names."""
    return {PREFIX + k: float(v) for k, v in record.items()
            if k != "step" and _finite(v)}


def timer_summary_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The step timer's ``summary()``: step time, samples/s, tokens/s, MFU, peak memory."""
    values: dict[str, Any] = {
        "samples_per_s": summary.get("samples_per_s"),
        "tokens_per_s": summary.get("tokens_per_s"),
        "mfu": summary.get("mfu"),
        "peak_memory_bytes": summary.get("peak_memory_bytes"),
        "steps": summary.get("steps"),
    }
    step_ms = summary.get("step_ms")
    if isinstance(step_ms, dict):
        values.update({f"step_ms_{k}": v for k, v in step_ms.items()})
    phases = summary.get("phases_ms")
    if isinstance(phases, dict):
        values.update({f"phase/{k}_ms": v for k, v in phases.items()})
    return {PREFIX + k: float(v) for k, v in values.items() if _finite(v)}
