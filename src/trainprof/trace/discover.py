"""Which files are traces, and which rank and recording window each one holds.

The rank comes from ``distributedInfo.rank`` when the trace has it, else from the file name, else
each remaining worker gets a distinct rank (with a warning). Several files of one worker that
differ only by a window token (tensorboard_trace_handler's ``.<timestamp>``, our own
``.step<N>``, or torchtitan's ``iteration_<N>/`` folder) are separate recording windows of that
rank, never merged.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import msgspec

from trainprof.errors import TraceError
from trainprof.lazy import LazyPattern
from trainprof.trace.nsys.detect import is_nsys_name

TRACE_SUFFIXES = (".json", ".json.gz")
#: The job's summary that rank 0 writes beside the traces (docs/distributed.md).
CLUSTER_SUMMARY_NAME = "cluster_summary.json"
#: JSON files trainprof itself writes next to traces; never traces.
NOT_TRACES = frozenset({CLUSTER_SUMMARY_NAME})
#: A cluster summary passed as a file is told by its first key, whatever its name.
_CLUSTER_HEAD = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"trainprof\.cluster/')

_WINDOW_TOKEN = LazyPattern(r"^(?P<worker>.*?)\.(?:step)?(?P<window>\d+)$")
#: torchtitan writes each profiling window to its own folder: iteration_<N>/rank<R>_trace.json.
_WINDOW_FOLDER = LazyPattern(r"^iteration_(\d+)$")
_RANK_PATTERNS = (
    # rank-3, rank_3, rank3
    LazyPattern(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE),
    LazyPattern(r"^profile_(\d+)$"),  # accelerate's Accelerator.profile()
    LazyPattern(r"^worker[-_]?(\d+)$", re.IGNORECASE),  # tensorboard_trace_handler worker names
)


class TraceName(msgspec.Struct, frozen=True):
    """What a trace's file name says: the worker, its window token, and the rank if named."""

    worker: str
    window_token: int | None
    rank: int | None
    #: The folder the worker's windows share (above an ``iteration_<N>`` window folder).
    folder: str = ""


def find_trace_files(path: Path) -> list[Path]:
    """The trace files at ``path``: the file itself, or every trace under a folder."""
    if not path.exists():
        raise TraceError(f"{path} does not exist.")
    if path.is_file():
        return [path]
    if not os.access(path, os.R_OK | os.X_OK):
        raise TraceError(f"Cannot read the folder {path}: permission denied.")
    files, unreadable = _files_under(path)
    if unreadable:
        shown = ", ".join(str(p) for p in unreadable[:3])
        more = f" and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
        warnings.warn(f"Skipped {len(unreadable)} folder(s) that cannot be read: {shown}{more}.",
                      stacklevel=2)
    if not files:
        raise TraceError(f"{path} holds no trace files (*.json or *.json.gz).")
    return files


def _files_under(folder: Path) -> tuple[list[Path], list[Path]]:
    """(trace files under ``folder``, sorted; sub-folders that could not be read)."""
    unreadable: list[Path] = []
    files: list[Path] = []
    seen: set[str] = set()
    walk = os.walk(folder, onerror=lambda e: unreadable.append(Path(e.filename)), followlinks=True)
    for root, dirs, names in walk:
        real = os.path.realpath(root)
        if real in seen:  # a link back up the tree: read each folder once
            dirs.clear()
            continue
        seen.add(real)
        files.extend(Path(root, n) for n in names
                     if (n.endswith(TRACE_SUFFIXES) or is_nsys_name(n)) and n not in NOT_TRACES)
    return sorted(p for p in files if p.is_file()), sorted(unreadable)


def find_inputs(path: Path) -> tuple[list[Path], list[Path]]:
    """(trace files, cluster summaries) at ``path``: a file is one or the other; a folder
    holds any of both."""
    if path.is_file():
        return ([], [path]) if is_cluster_summary(path) else ([path], [])
    if not path.exists():
        raise TraceError(f"{path} does not exist.")
    summaries = sorted(p for p in path.rglob(CLUSTER_SUMMARY_NAME) if p.is_file())
    try:
        return find_trace_files(path), summaries
    except TraceError:
        if summaries:
            return [], summaries
        raise


def is_cluster_summary(path: Path) -> bool:
    """Whether a file is a cluster summary (by its name or its first key)."""
    if path.name == CLUSTER_SUMMARY_NAME:
        return True
    with open(path, "rb") as handle:
        return bool(_CLUSTER_HEAD.match(handle.read(256)))


def parse_name(path: Path) -> TraceName:
    """Split a file name into worker, window token and rank."""
    stem = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        stem = stem.removesuffix(suffix)
    worker, token, folder = stem, None, path.parent
    match = _WINDOW_TOKEN.match(stem)
    if match and match.group("worker"):
        worker, token = match.group("worker"), int(match.group("window"))
    else:
        in_window_folder = _WINDOW_FOLDER.match(path.parent.name)
        if in_window_folder:
            token, folder = int(in_window_folder.group(1)), path.parent.parent
    rank = None
    for pattern in _RANK_PATTERNS:
        found = pattern.search(worker)
        if found:
            rank = int(found.group(1))
            break
    return TraceName(worker=worker, window_token=token, rank=rank, folder=str(folder))


class Placement(msgspec.Struct, frozen=True):
    """Where a file sits in the job: its rank and window number."""

    rank: int
    window: int


def place(files: list[Path], ranks_in_file: list[int | None]) -> tuple[list[Placement], list[str]]:
    """Rank and window for each file, plus warnings; two files claiming one window of one rank
    raise a TraceError naming both."""
    names = [parse_name(f) for f in files]
    warnings: list[str] = []
    group_key: list[tuple] = []
    for n, r in zip(names, ranks_in_file, strict=True):
        rank = r if r is not None else n.rank
        group_key.append(("rank", rank) if rank is not None else ("worker", n.folder, n.worker))
    known = {k[1] for k in group_key if k[0] == "rank"}
    unnamed = sorted({k for k in group_key if k[0] == "worker"})
    next_rank = max(known, default=-1) + 1
    assigned: dict[tuple, int] = {}
    for key in unnamed:
        assigned[key] = next_rank
        next_rank += 1
    if unnamed and len(files) > 1:
        warnings.append(
            f"{len(unnamed)} trace(s) name no rank (no distributedInfo, no rank in the file name); "
            f"numbered them as ranks {sorted(assigned.values())} in file-name order."
        )
    rank_of = [k[1] if k[0] == "rank" else assigned[k] for k in group_key]

    by_rank: dict[int, list[int]] = {}
    for i, rank in enumerate(rank_of):
        by_rank.setdefault(rank, []).append(i)
    placements: list[Placement | None] = [None] * len(files)
    for rank, members in by_rank.items():
        tokens = [names[i].window_token for i in members]
        if len(members) > 1 and (None in tokens or len(set(tokens)) < len(tokens)):
            a, b = _first_clash(members, tokens)
            raise TraceError(
                f"Two files claim rank {rank}: {files[a]} and {files[b]}; "
                "a folder is read as the ranks of one job, so analyse them separately."
            )
        ordered = sorted(members, key=lambda i: names[i].window_token or 0)
        for window, i in enumerate(ordered):
            placements[i] = Placement(rank=rank, window=window)
    return [p for p in placements if p is not None], warnings


def _first_clash(members: list[int], tokens: list[int | None]) -> tuple[int, int]:
    for x in range(len(members)):
        for y in range(x + 1, len(members)):
            if tokens[x] is None or tokens[y] is None or tokens[x] == tokens[y]:
                return members[x], members[y]
    return members[0], members[1]
