"""In the job: each rank summarises its own traces and rank 0 writes ``cluster_summary.json``.

Runs once, when recording stops, on every rank of an initialised default process group. Each
rank analyses the files it wrote, exactly as ``trainprof analyze`` would, and reduces them to
a few KB (``trainprof.cluster_summary``); rank 0 gathers the summaries with ``gather_object`` over a
gloo group made from the job's group for this, with a timeout (whatever the job's backend,
so no GPU memory and no NCCL hang). A rank that fails to summarise still takes part, with an
error entry; a rank that never arrives costs the others the timeout and a warning. Ranks say
when they start recording that they will come, so a job where some ranks record without
trainprof skips the summary instead of waiting. Nothing here raises into training.
docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

#: Longest error message a rank sends for itself.
MAX_ERROR_CHARS = 300
#: The key by which a rank says in the job's store, when it starts recording, that it will
#: share a summary when it stops (recordings are numbered in the order each rank starts them).
JOINED_KEY = "trainprof/cluster_summary/{recording}/{rank}"
_recordings = itertools.count()


def join_cluster_summary() -> int | None:
    """When recording starts: tell the other ranks (a key in the job's store, no waiting) that
    this one will share its summary. Returns the recording's number, or None outside an
    initialised process group or without a store."""
    dist = _initialised_dist()
    if dist is None:
        return None
    number = next(_recordings)
    try:
        store = _default_store()
        store.set(JOINED_KEY.format(recording=number, rank=dist.get_rank()), "1")
    except Exception:
        return None
    return number


def share_cluster_summary(files: list[Path], out_dir: str | os.PathLike[str], recorded: bool,
                          timeout_s: float, warn: Callable[..., None],
                          recording: int | None = None) -> Path | None:
    """Summarise this rank's ``files`` and meet the other ranks; rank 0 writes the summary and
    gets its path. Does nothing outside an initialised process group, nor when some rank did
    not join ``recording`` (it records without trainprof: nobody would come to meet it)."""
    dist = _initialised_dist()
    if dist is None:
        return None
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
    except Exception as error:
        warn("could not read this process's rank for cluster_summary.json", error)
        return None
    if recording is not None and _everyone_joined(recording, world) is False:
        warn("cluster_summary.json is not written: not every rank records with trainprof "
             "(call trainprof.profile on every rank; ranks= chooses which keep traces)")
        return None
    entry = _own_entry(files, rank, recorded, warn)
    gathered, problem = _gather(dist, entry, rank, world, timeout_s)
    if problem is not None:
        warn(f"the ranks did not all meet within {timeout_s:g} s to share their summaries; "
             f"{'cluster_summary.json lacks the others' if rank == 0 else 'rank 0 lacks this one'}",
             problem)
    if rank != 0:
        return None
    try:
        from trainprof.analysis.job.cluster_file import decode_entry
        from trainprof.cluster_summary import cluster_document, write_cluster_summary

        entries = [None if raw is None else decode_entry(raw, i)
                   for i, raw in enumerate(gathered or [entry])]
        notes = [] if problem is None else [f"Only rank 0's summary: the gather failed "
                                            f"({type(problem).__name__}: {problem})."[:500]]
        return write_cluster_summary(out_dir, cluster_document(entries, world, notes))
    except Exception as error:
        warn(f"could not write cluster_summary.json to {str(out_dir)!r}; training goes on", error)
        return None


def _initialised_dist() -> Any:
    try:
        import torch.distributed as dist

        return dist if dist.is_available() and dist.is_initialized() else None
    except Exception:
        return None


def _default_store() -> Any:
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def _everyone_joined(recording: int, world: int) -> bool | None:
    """Whether every rank joined this recording (None: the store cannot say)."""
    try:
        keys = [JOINED_KEY.format(recording=recording, rank=r) for r in range(world)]
        return bool(_default_store().check(keys))
    except Exception:
        return None


def _own_entry(files: list[Path], rank: int, recorded: bool, warn: Callable[..., None]) -> bytes:
    """This rank's entry as JSON: its summaries, or the error that stopped them."""
    from trainprof.analysis.job.cluster_file import RankEntry
    from trainprof.analysis.job.summary import encode

    if not recorded or not files:
        return encode(RankEntry(rank=rank, recorded=False))
    try:
        from trainprof.cluster_summary import summarize_traces

        return encode(RankEntry(rank=rank, summaries=summarize_traces(files, rank=rank)))
    except Exception as error:
        warn("could not summarise this rank's traces for cluster_summary.json; rank 0 is told",
             error)
        message = f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS]
        return encode(RankEntry(rank=rank, error=message))


def _gather(dist: Any, entry: bytes, rank: int, world: int, timeout_s: float
            ) -> tuple[list[Any] | None, BaseException | None]:
    """Every rank's entry on rank 0 (None elsewhere), or the error that stopped the gather."""
    from torch.distributed import distributed_c10d

    group = None
    try:
        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(entry, gathered, dst=0, group=group)
        return gathered, None
    except Exception as error:
        return None, error
    finally:
        if group is not None:
            with contextlib.suppress(Exception):
                distributed_c10d.destroy_process_group(group)


@contextlib.contextmanager
def stop_before_group_ends(stop: Callable[[], None]) -> Iterator[None]:
    """While a script runs under `trainprof run`: when it destroys the default process group,
    ``stop`` first, so that the ranks can still meet and share their summaries."""
    try:
        import torch.distributed as dist
    except ImportError:
        yield
        return
    original = dist.destroy_process_group

    @functools.wraps(original)
    def destroy_process_group(group: Any = None, *args: Any, **kwargs: Any) -> Any:
        if group is None:
            stop()
        return original(group, *args, **kwargs)

    dist.destroy_process_group = destroy_process_group
    try:
        yield
    finally:
        dist.destroy_process_group = original
