"""``cluster_summary.json``: every rank's summary, written by rank 0 during the job.

The file is typed (msgspec structs): ``schema``, the world size, one ``RankSummary`` per rank
and window, the ranks that failed to summarise (with the error), that sent nothing before the
timeout, or that were not recorded, and the job-level view computed when it was written
(``job``, ``findings``). Readers recompute that view from the summaries. docs/distributed.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import field

from trainprof.analysis.job.summary import RankSummary, rank_from_summary
from trainprof.analysis.results import RankAnalysis
from trainprof.errors import TraceError

CLUSTER_SCHEMA = "trainprof.cluster/2"
#: What changed from each older schema (docs/distributed.md), said when one is refused.
_OLDER = {"trainprof.cluster/1": "its ranks' parallelism sections are in the shape written "
                                 "before 2026-11-29"}


class RankEntry(msgspec.Struct):
    """What one rank sends to rank 0: its summaries, or why it has none."""

    rank: int
    summaries: list[RankSummary] = []
    error: str | None = None  # summarising failed: the exception, in one line
    recorded: bool = True  # False: this rank was not recorded (``ranks=``) or wrote no trace


class FailedRank(msgspec.Struct):
    rank: int
    error: str


class ClusterDocument(msgspec.Struct):
    schema: str
    world_size: int
    complete: bool  # every rank's entry arrived
    ranks: list[RankSummary]
    failed: list[FailedRank] = []
    missing: list[int] = []  # ranks whose entry never arrived (the gather failed or timed out)
    not_recorded: list[int] = []
    notes: list[str] = []
    job: dict[str, Any] = {}
    findings: list[dict[str, Any]] = []


class Summarised(msgspec.Struct):
    """The ranks read from cluster summaries, the file each came from, and what to tell."""

    ranks: list[RankAnalysis] = field(default_factory=list)
    files: dict[int, Path] = field(default_factory=dict)  # rank -> its summary file
    failed: dict[int, str] = field(default_factory=dict)  # rank -> note
    notes: list[str] = field(default_factory=list)


def read_cluster_summaries(paths: list[Path]) -> Summarised:
    """Every rank of these summaries; ``TraceError`` for an unreadable file or two files that
    claim one rank."""
    out = Summarised()
    for path in paths:
        doc = decode_document(path)
        for s in doc.ranks:
            if s.rank in out.files and out.files[s.rank] != path:
                raise TraceError(f"Two cluster summaries claim rank {s.rank}: "
                                 f"{out.files[s.rank]} and {path}.")
            out.files[s.rank] = path
            out.ranks.append(_rank(s, path))
        for f in doc.failed:
            out.failed[f.rank] = f"Rank {f.rank} could not summarise its trace ({f.error})."
        if doc.missing:
            out.notes.append(f"{path.name}: {rank_list(doc.missing)} sent no summary in time.")
        if doc.not_recorded:
            out.notes.append(f"{path.name}: {rank_list(doc.not_recorded)} not recorded.")
        out.notes += doc.notes
    return out


def decode_entry(raw: bytes, rank: int) -> RankEntry:
    """A rank's entry as sent (JSON); an error entry for ``rank`` when it cannot be read."""
    try:
        return msgspec.json.decode(raw, type=RankEntry)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
        return RankEntry(rank=rank, error=f"its summary could not be read ({exc})")


def decode_document(path: Path) -> ClusterDocument:
    """The file, validated; ``TraceError`` in one sentence when it is not a cluster summary."""
    try:
        data = path.read_bytes()
        schema = msgspec.json.decode(data, type=_Schema).schema
        if schema != CLUSTER_SCHEMA:
            why = f" ({_OLDER[schema]}: analyse the traces again)" if schema in _OLDER else ""
            raise TraceError(f"{path} is a cluster summary of schema {schema!r}{why}; this "
                             f"trainprof reads {CLUSTER_SCHEMA}.")
        return msgspec.json.decode(data, type=ClusterDocument)
    except OSError as exc:
        raise TraceError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceError(f"{path} is not a valid cluster summary: {exc}.") from None


class _Schema(msgspec.Struct):
    schema: str


def _rank(s: RankSummary, path: Path) -> RankAnalysis:
    try:
        return rank_from_summary(s, path)
    except (msgspec.ValidationError, ValueError) as exc:
        raise TraceError(f"{path}: rank {s.rank}'s summary is not valid ({exc}).") from None


def rank_list(ranks: list[int] | set[int]) -> str:
    """``rank 3`` or ``ranks 0-3, 7``."""
    ordered = sorted(set(ranks))
    runs: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(runs)
