"""The typed deep sections of a result: ``RankSections`` has one attribute per section of
analysis/sections/registry.py ``SECTIONS``, ``JobSections`` one per ``JOB_SECTIONS``, each typed with its
result class and None where the section is absent (a rank read from a summary or a saved result
has only some). A misspelled section is then a type error, not a silent ``None``.

A leaf like analysis/results.py: the result classes are named for the type checker only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from trainprof.structs import Record, fields

if TYPE_CHECKING:
    from trainprof.analysis.critical_path.result import CriticalPath
    from trainprof.analysis.job.collective_ranks import CollectiveRanks
    from trainprof.analysis.job.rank_table import RankTable
    from trainprof.analysis.job.stragglers import Stragglers
    from trainprof.analysis.parallelism.expert import ExpertBalance
    from trainprof.analysis.parallelism.pipeline import Pipeline
    from trainprof.analysis.parallelism.result import Parallelism
    from trainprof.analysis.roofline.collectives import Collectives
    from trainprof.analysis.roofline.section import Roofline
    from trainprof.analysis.sections.communication import Communication
    from trainprof.analysis.sections.compilation import Compilation
    from trainprof.analysis.sections.copies import Copies
    from trainprof.analysis.sections.host import HostTime
    from trainprof.analysis.sections.idle import IdleTime
    from trainprof.analysis.sections.kernels import KernelStats
    from trainprof.analysis.sections.launch import LaunchStats
    from trainprof.analysis.sections.memory import Memory
    from trainprof.analysis.sections.modules import ModuleTree
    from trainprof.analysis.sections.operators import OperatorStats
    from trainprof.analysis.sections.syncs import SyncStats


class SectionResult(Protocol):
    """What every section's result has: its JSON form."""

    def to_dict(self) -> dict[str, Any]: ...


class _Sections(Record):
    """Dict-style reading of the sections present, in field order (the order they run in). Its
    JSON: each present section's own, by name."""

    json_omit_none = True

    def items(self) -> list[tuple[str, SectionResult]]:
        """(name, result) of every section present."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) is not None]

    def names(self) -> list[str]:
        """The names of the sections present."""
        return [name for name, _ in self.items()]

    def __getitem__(self, name: str) -> Any:
        """``sections["kernels"]``, as when this was a dict (notebooks written then); KeyError
        when the section is absent. Code in the package uses the typed attributes."""
        value = getattr(self, name, None) if name in self.field_names() else None
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    @classmethod
    def field_names(cls) -> list[str]:
        """Every section this container can hold, in order."""
        return [f.name for f in fields(cls)]


class RankSections(_Sections):
    """The deep sections of one rank (names and order: analysis/sections/registry.py SECTIONS)."""

    idle: IdleTime | None = None
    copies: Copies | None = None
    memory: Memory | None = None
    communication: Communication | None = None
    operators: OperatorStats | None = None
    kernels: KernelStats | None = None
    launch: LaunchStats | None = None
    syncs: SyncStats | None = None
    host: HostTime | None = None
    modules: ModuleTree | None = None
    roofline: Roofline | None = None
    collectives: Collectives | None = None
    compilation: Compilation | None = None
    critical_path: CriticalPath | None = None
    parallelism: Parallelism | None = None


class JobSections(_Sections):
    """The job-level sections (names and order: analysis/sections/registry.py JOB_SECTIONS)."""

    stragglers: Stragglers | None = None
    rank_table: RankTable | None = None
    collective_ranks: CollectiveRanks | None = None
    pipeline: Pipeline | None = None
    experts: ExpertBalance | None = None
