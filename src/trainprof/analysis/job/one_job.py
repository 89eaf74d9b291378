"""Whether the traces of a folder can be the ranks of one job (docs/traces.md, "Folders").

A folder is read as one job's ranks. Traces that cannot be one job are refused with one
sentence rather than merged into a job with a slowest and a fastest rank that never ran
together: traces of different GPU models, of different world sizes (or more ranks than the
world size they record), two or more files that name no rank at all, or ranks whose
recordings start far apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from trainprof.analysis.results import RankAnalysis
from trainprof.lazy import LazyPattern
from trainprof.trace.discover import parse_name

#: Ranks of one job start recording within this many seconds of each other: their profilers
#: start at the same step, and every rank waits at the first collective. Windows of one rank
#: may lie far apart; only each rank's first recording is compared.
JOB_START_SPREAD_S = 600.0
#: Device names that say nothing of the model (a trace without device properties).
_GENERIC_DEVICE = LazyPattern(r"^(GPU \d+|CPU)$")
#: Files named in a sentence, at most.
_NAMED_FILES = 3


def why_not_one_job(ranks: list[RankAnalysis]) -> str | None:
    """One sentence saying why these traces cannot be the ranks of one job, or None."""
    if len(ranks) < 2:
        return None
    for check in _CHECKS:
        reason = check(ranks)
        if reason:
            return (f"{reason}: they cannot be the ranks of one job; analyse each run's traces "
                    "on their own (a folder per job).")
    return None


def _files(ranks: list[RankAnalysis]) -> str:
    names = [r.path.name for r in ranks]
    more = f" and {len(names) - _NAMED_FILES} more" if len(names) > _NAMED_FILES else ""
    return ", ".join(names[:_NAMED_FILES]) + more


def _grouped(ranks: list[RankAnalysis], key: Callable[[RankAnalysis], object]) -> str:
    groups: dict[object, list[RankAnalysis]] = defaultdict(list)
    for r in ranks:
        groups[key(r)].append(r)
    return "; ".join(f"{value}: {_files(members)}" for value, members in groups.items())


def _devices(ranks: list[RankAnalysis]) -> str | None:
    named = [r for r in ranks if not _GENERIC_DEVICE.match(r.device)]
    if len({r.device for r in named}) < 2:
        return None
    return f"The traces were recorded on different devices ({_grouped(named, lambda r: r.device)})"


def _world_sizes(ranks: list[RankAnalysis]) -> str | None:
    sized = [r for r in ranks if isinstance(r.environment.get("world_size"), int)]
    sizes = {r.environment["world_size"] for r in sized}
    if len(sizes) > 1:
        return ("The traces record different world sizes "
                f"({_grouped(sized, lambda r: r.environment['world_size'])})")
    distinct = {r.rank for r in ranks}
    if sizes and len(distinct) > max(sizes):
        return (f"The folder holds {len(distinct)} ranks but the traces record a world size "
                f"of {max(sizes)}")
    return None


def _unnamed(ranks: list[RankAnalysis]) -> str | None:
    workers: dict[tuple[str, str], list[RankAnalysis]] = defaultdict(list)
    for r in ranks:
        name = parse_name(r.path)
        if r.rank_in_trace is None and name.rank is None:
            workers[(name.folder, name.worker)].append(r)
    if len(workers) < 2:
        return None
    unnamed = [members[0] for members in workers.values()]
    return (f"{len(workers)} traces name no rank (no distributedInfo, no rank in the file "
            f"name: {_files(unnamed)}), so nothing says they ran together")


def _start_times(ranks: list[RankAnalysis]) -> str | None:
    first: dict[int, RankAnalysis] = {}
    for r in ranks:
        if r.started_us is not None and (r.rank not in first
                                         or r.started_us < (first[r.rank].started_us or 0.0)):
            first[r.rank] = r
    if len(first) < 2:
        return None
    ordered = sorted(first.values(), key=lambda r: r.started_us or 0.0)
    spread_s = ((ordered[-1].started_us or 0.0) - (ordered[0].started_us or 0.0)) / 1e6
    if spread_s <= JOB_START_SPREAD_S:
        return None
    return (f"The recordings of rank {ordered[0].rank} ({ordered[0].path.name}) and rank "
            f"{ordered[-1].rank} ({ordered[-1].path.name}) start {_duration(spread_s)} apart")


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:.0f} days"


_CHECKS = (_devices, _world_sizes, _unnamed, _start_times)
