"""Cluster summaries: each rank's summary of its own traces, and the job's document.

In a distributed job (capture/job_summary.py) every rank calls ``summarize_traces`` on the files
it wrote, and rank 0 turns the gathered entries into ``cluster_summary.json`` with
``cluster_document`` and ``write_cluster_summary``: per-rank figures, the per-rank table,
stragglers and the job-level findings. The same calls work offline. docs/distributed.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from trainprof.analysis import analyze as overview
from trainprof.analysis.job.cluster_file import (
    CLUSTER_SCHEMA,
    ClusterDocument,
    FailedRank,
    RankEntry,
)
from trainprof.analysis.job.summary import RankSummary, encode, rank_from_summary, rank_summary
from trainprof.analysis.sections.registry import run_job_sections
from trainprof.diagnose.engine import diagnose, rank_findings
from trainprof.diagnose.path_bounds import summary_bounds
from trainprof.fileio import atomic_write_bytes
from trainprof.jsontext import formatted
from trainprof.trace.discover import CLUSTER_SUMMARY_NAME
from trainprof.trace.load import load_file

__all__ = ["cluster_document", "summarize_traces", "write_cluster_summary"]


def summarize_traces(files: Sequence[str | os.PathLike[str]], rank: int | None = None
                     ) -> list[RankSummary]:
    """One summary per trace file (one rank's windows), with the rank's own findings.

    ``rank`` overrides the rank the traces name. Raises ``TraceError`` for an unreadable file.
    """
    analysis = overview.analyze_ranks(load_file(path) for path in files)
    out = []
    for r in analysis.ranks:
        if rank is not None:
            r.rank = rank
        out.append(rank_summary(r, [f.to_dict() for f in rank_findings(r)],
                                summary_bounds(r)))
    return out


def cluster_document(entries: Sequence[RankEntry | None], world_size: int,
                     notes: Sequence[str] = ()) -> ClusterDocument:
    """The job's document from every rank's entry (None: that rank sent nothing)."""
    summaries: list[RankSummary] = []
    doc = ClusterDocument(schema=CLUSTER_SCHEMA, world_size=world_size, complete=True,
                          ranks=summaries, notes=list(notes))
    arrived = {e.rank: e for e in entries if e is not None}
    for rank in range(max(world_size, max(arrived, default=-1) + 1)):
        entry = arrived.get(rank)
        if entry is None:
            doc.missing.append(rank)
        elif entry.error is not None:
            doc.failed.append(FailedRank(rank=rank, error=entry.error))
        elif not entry.recorded:
            doc.not_recorded.append(rank)
        else:
            summaries += entry.summaries
    doc.complete = not doc.missing
    ranks = [rank_from_summary(s, Path(CLUSTER_SUMMARY_NAME)) for s in summaries]
    if ranks:
        job = overview.Analysis(ranks=ranks, job=run_job_sections(ranks))
        doc.job = msgspec.json.decode(formatted({k: v.to_dict() for k, v in job.job.items()}))
        doc.findings = [f.to_dict() for f in diagnose(job)]
    return doc


def write_cluster_summary(out_dir: str | os.PathLike[str], doc: ClusterDocument) -> Path:
    """``out_dir/cluster_summary.json``, written atomically (compact JSON)."""
    return atomic_write_bytes(Path(out_dir) / CLUSTER_SUMMARY_NAME, encode(doc) + b"\n")
