"""What can be recorded, turned into a `RunRecord`: an ``Analysis``, a saved JSON result, a
``cluster_summary.json``, a StepTimer summary.

Each source becomes a list of per-rank figures (plain dicts), combined in one place. The cluster
summary reader is tolerant: it takes a JSON object with a ``"ranks"`` list and reads, per rank,
whichever of the keys in ``docs/history.md`` it finds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from trainprof.history.store.errors import HistoryInputError
from trainprof.history.store.rows import RunRecord, StepFigures, step_figures, thin

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis

_FINDING_KEYS = ("id", "severity", "title", "saving_pct", "rank")


def from_analysis(analysis: Any, name: str, **context: Any) -> RunRecord:
    """A record of a fresh ``trainprof.analyze`` result (steps of every rank and window)."""
    ranks = [_rank_of_analysis(r) for r in analysis.ranks]
    findings = [f.to_dict() if hasattr(f, "to_dict") else f for f in analysis.findings]
    return combine(ranks, findings, name=name, kind="analysis",
                   source=context.pop("source", None) or analysis.source, **context)


def from_result(data: dict[str, Any], name: str, **context: Any) -> RunRecord:
    """A record of a saved JSON result (``trainprof analyze --format json``)."""
    ranks = [_rank_of_dict(r, i) for i, r in enumerate(data.get("ranks") or [])]
    return combine(ranks, list(data.get("findings") or []), name=name, kind="analysis",
                   source=context.pop("source", None) or str(data.get("source", "")), **context)


def from_cluster_summary(data: dict[str, Any], name: str, **context: Any) -> RunRecord:
    """A record of a ``cluster_summary.json``: a JSON object with a ``"ranks"`` list."""
    entries = data.get("ranks")
    if not isinstance(entries, list) or not entries:
        raise HistoryInputError("The cluster summary has no \"ranks\" list to record.")
    ranks = [_rank_of_dict(r, i) for i, r in enumerate(entries) if isinstance(r, dict)]
    world = data.get("world_size")
    context.setdefault("world_size", world if isinstance(world, int) else len(ranks))
    findings = data.get("findings") or (data.get("job") or {}).get("findings") or []
    return combine(ranks, findings, name=name, kind="cluster", **context)


def from_step_timer(summary: dict[str, Any], name: str, step_times_ms: list[float] | None = None,
                    **context: Any) -> RunRecord:
    """A record of ``StepTimer.summary()`` (and, when known, every measured step's time)."""
    dist = summary.get("step_ms") or {}
    times = list(step_times_ms or [])
    rank = context.get("rank")
    stored, step_ranks = thin([(rank or 0, times)]) if times else ([], [])
    samples, mean = summary.get("samples_per_s"), dist.get("mean")
    extra = {k: summary.get(k) for k in ("mfu", "flops_per_step", "peak_flops", "excluded_steps")
             if summary.get(k) is not None}
    context.setdefault("devices", summary.get("device"))
    return RunRecord(
        name=name, kind=context.pop("kind", "step_timer"), steps=int(summary.get("steps") or 0),
        step_ms_mean=mean, step_ms_median=dist.get("median"), step_ms_p90=dist.get("p90"),
        step_ms_min=dist.get("min"), step_ms_max=dist.get("max"),
        samples_per_s=samples, tokens_per_s=summary.get("tokens_per_s"),
        samples_per_step=round(samples * mean / 1e3, 3) if samples and mean else None,
        peak_memory_bytes=summary.get("peak_memory_bytes"),
        phases_ms=dict(summary.get("phases_ms") or {}), step_times_ms=stored,
        step_ranks=step_ranks, extra=extra, **context,
    )


def from_timer_record(plain: dict[str, Any], name: str, **context: Any) -> RunRecord:
    """A record of a step timer's plain record (``StepTimer.to_run_record()``: its summary,
    every measured step's time, rank, world size and device); ``context`` overrides them."""
    for key in ("rank", "world_size", "devices"):
        context.setdefault(key, plain.get(key))
    return from_step_timer(plain["summary"], name, plain.get("step_times_ms"), **context)


def from_json(data: Any, name: str, **context: Any) -> RunRecord:
    """A saved result, a cluster summary or a StepTimer summary, told apart by their keys."""
    if not isinstance(data, dict):
        raise HistoryInputError("A JSON object is needed to record a run.")
    schema = str(data.get("schema", ""))
    if schema.startswith("trainprof.analysis/"):
        return from_result(data, name, **context)
    if isinstance(data.get("ranks"), list):
        return from_cluster_summary(data, name, **context)
    if "step_ms" in data and "phases_ms" in data:
        return from_step_timer(data, name, **context)
    raise HistoryInputError(
        "The JSON is neither a saved result, a cluster summary (a \"ranks\" list) nor a "
        "StepTimer summary; to record traces, run trainprof analyze PATH --record.")


# -- per-rank figures -------------------------------------------------------------------------


def _rank_of_analysis(r: RankAnalysis) -> dict[str, Any]:
    memory = r.sections.memory
    peaks = [d.peak_allocated for d in getattr(memory, "devices", [])
             if d.peak_allocated is not None and d.device != "cpu"]
    return {"rank": r.rank, "per_step_ms": [s["ms"] for s in r.steps.per_step],
            "phases_ms": r.phases_ms, "breakdown_ms": r.breakdown_ms, "device": r.device,
            "world_size": (r.environment or {}).get("world_size"),
            "peak_memory_bytes": max(peaks) if peaks else None}


def _rank_of_dict(r: dict[str, Any], index: int) -> dict[str, Any]:
    """Per-rank figures from a saved result's rank or a cluster summary's rank (tolerant)."""
    steps = _dict(r.get("steps"))
    dist = _dict(r.get("step_ms"))
    times = _first_list(r.get("per_step_ms"), r.get("step_times_ms"), steps.get("per_step"),
                        r.get("step_ms"))
    memory = _dict(r.get("memory"))
    peaks = [d.get("peak_allocated") for d in memory.get("devices") or []
             if isinstance(d, dict) and d.get("device") != "cpu"]
    peak = _number(r.get("peak_memory_bytes"), memory.get("peak_bytes"),
                   max((p for p in peaks if _is_number(p)), default=None))
    return {
        "rank": int(r["rank"]) if _is_number(r.get("rank")) else index,
        "per_step_ms": times,
        "count": _number(steps.get("count"), r.get("steps") if _is_number(r.get("steps")) else None),
        "median_ms": _number(dist.get("median"), steps.get("median_ms"), r.get("median_step_ms"),
                             r.get("median_ms")),
        "mean_ms": _number(dist.get("mean"), steps.get("mean_ms"), r.get("mean_step_ms")),
        "p90_ms": _number(dist.get("p90"), steps.get("p90_ms")),
        "phases_ms": r.get("phases_ms") if isinstance(r.get("phases_ms"), dict) else {},
        "breakdown_ms": r.get("breakdown_ms") if isinstance(r.get("breakdown_ms"), dict) else {},
        "device": _text(r.get("device")), "host": _text(r.get("host"), r.get("hostname")),
        "world_size": (r.get("environment") or {}).get("world_size"),
        "samples_per_s": _number(r.get("samples_per_s")),
        "tokens_per_s": _number(r.get("tokens_per_s")), "peak_memory_bytes": peak,
    }


def _first_list(*candidates: Any) -> list[float]:
    """The first candidate that is a list of step times (numbers, or {"ms": ...} entries)."""
    for c in candidates:
        if isinstance(c, list) and c:
            values = [x.get("ms") if isinstance(x, dict) else x for x in c]
            numbers = [v for v in values if _is_number(v)]
            if len(numbers) == len(values):
                return [float(v) for v in numbers]
    return []


def _text(*candidates: Any) -> str | None:
    """The first candidate that is a non-empty string (a saved result's ``host`` is a section)."""
    return next((c for c in candidates if isinstance(c, str) and c), None)


def _dict(x: Any) -> dict[str, Any]:
    """``x`` if it is a JSON object, else an empty one."""
    return x if isinstance(x, dict) else {}


def _is_number(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and np.isfinite(x)


def _number(*candidates: Any) -> float | None:
    return next((float(c) for c in candidates if _is_number(c)), None)


# -- one record from the ranks ----------------------------------------------------------------


def combine(ranks: list[dict[str, Any]], findings: list[Any], *, name: str, kind: str,
            **context: Any) -> RunRecord:
    """One record from per-rank figures: steps pooled over ranks, phases averaged, throughput
    summed, memory at its highest."""
    per_rank = [(r["rank"], r["per_step_ms"]) for r in ranks if r.get("per_step_ms")]
    pooled = [x for _, times in per_rank for x in times]
    figures = step_figures(pooled) if pooled else _from_summaries(ranks)
    stored, step_ranks = thin(per_rank) if per_rank else ([], [])
    devices = sorted({str(r["device"]) for r in ranks if r.get("device")})
    world = next((r["world_size"] for r in ranks if _is_number(r.get("world_size"))), None)
    context.setdefault("world_size", int(world) if world else len({r["rank"] for r in ranks}))
    context.setdefault("devices", ", ".join(devices) or None)
    hosts = sorted({str(r["host"]) for r in ranks if r.get("host")})
    if hosts:
        context.setdefault("host", hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts")
    breakdown = _mean_of(ranks, "breakdown_ms")
    return RunRecord(
        name=name, kind=kind,
        steps=len(pooled) or int(sum(r.get("count") or 0 for r in ranks)),
        **figures, samples_per_s=_sum_of(ranks, "samples_per_s"),
        tokens_per_s=_sum_of(ranks, "tokens_per_s"),
        peak_memory_bytes=_max_of(ranks, "peak_memory_bytes"),
        phases_ms=_mean_of(ranks, "phases_ms"), findings=brief_findings(findings),
        step_times_ms=stored, step_ranks=step_ranks,
        extra={"breakdown_ms": breakdown, "ranks": len(ranks)} if breakdown else {"ranks": len(ranks)},
        **context,
    )


def brief_findings(findings: list[Any]) -> list[dict[str, Any]]:
    """Each finding's id, severity, title, saving and rank, in the order given (most costly
    first, as the diagnosis ranks them)."""
    out = []
    for f in findings:
        d = f.to_dict() if hasattr(f, "to_dict") else f
        if isinstance(d, dict) and (d.get("id") or d.get("title")):
            out.append({k: d.get(k) for k in _FINDING_KEYS})
    return out


def _from_summaries(ranks: list[dict[str, Any]]) -> StepFigures:
    """Step figures when no rank gave its step times: the median of the ranks' medians."""
    medians = [r["median_ms"] for r in ranks if r.get("median_ms") is not None]
    means = [r["mean_ms"] for r in ranks if r.get("mean_ms") is not None]
    p90s = [r["p90_ms"] for r in ranks if r.get("p90_ms") is not None]
    return {"step_ms_median": float(np.median(medians)) if medians else None,
            "step_ms_mean": float(np.mean(means)) if means else None,
            "step_ms_p90": max(p90s) if p90s else None}


def _mean_of(ranks: list[dict[str, Any]], key: str) -> dict[str, float | None]:
    values: dict[str, list[float]] = {}
    for r in ranks:
        for k, v in (r.get(key) or {}).items():
            if _is_number(v):
                values.setdefault(k, []).append(float(v))
    return {k: float(np.mean(v)) for k, v in values.items()}


def _sum_of(ranks: list[dict[str, Any]], key: str) -> float | None:
    values = [r.get(key) for r in ranks]
    numbers = [v for v in values if _is_number(v)]
    return float(sum(numbers)) if numbers and len(numbers) == len(values) else None


def _max_of(ranks: list[dict[str, Any]], key: str) -> int | None:
    values = [r[key] for r in ranks if _is_number(r.get(key))]
    return int(max(values)) if values else None
