"""The critical path's result types (a leaf module: no analysis imports)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.structs import Derived, Record, replace

#: Path pieces written to JSON per step: the longest ones, in time order ...
JSON_PIECES = 100
#: ... and over all steps at most about this many (a long run keeps its JSON small).
JSON_PIECES_TOTAL = 5_000


class PathPiece(Record):
    """A stretch of the path on one lane: µs from the trace's t0."""

    lane: str  # "host thread 123", "GPU 0 stream 7"
    start_us: float
    end_us: float
    category: str  # a key of the split
    name: str  # the op, kernel or call; "" between ranges


class PathPieces(msgspec.Struct):
    """A step's path as columns: stretches on one lane of one category and name, in time
    order (µs from the trace's t0)."""

    lane: np.ndarray  # int64 into ``lanes``
    start_us: np.ndarray  # float64
    end_us: np.ndarray  # float64
    category: np.ndarray  # int64 into ``categories``
    name: np.ndarray  # int64 into ``names``, -1 for none
    lanes: list[str]
    categories: tuple[str, ...]
    names: list[str]
    #: The step's pieces before ``kept`` left only the longest (None: every piece is here).
    total: int | None = None

    @classmethod
    def of(cls, pieces: list[PathPiece], total: int | None = None) -> PathPieces:
        """Pieces (in time order) as columns; ``total``: the step's pieces they were kept of."""
        lanes = list(dict.fromkeys(p.lane for p in pieces))
        categories = tuple(dict.fromkeys(p.category for p in pieces))
        names = list(dict.fromkeys(p.name for p in pieces if p.name))

        def codes(table: Sequence[str], values: list[str]) -> np.ndarray:
            at = {v: i for i, v in enumerate(table)}
            return np.array([at.get(v, -1) for v in values], dtype=np.int64)

        return cls(lane=codes(lanes, [p.lane for p in pieces]),
                   start_us=np.array([p.start_us for p in pieces], dtype=np.float64),
                   end_us=np.array([p.end_us for p in pieces], dtype=np.float64),
                   category=codes(categories, [p.category for p in pieces]),
                   name=codes(names, [p.name for p in pieces]), lanes=lanes,
                   categories=categories, names=names, total=total)

    def __len__(self) -> int:
        return len(self.start_us)

    @property
    def count(self) -> int:
        """How many pieces the step's path has, whether or not all are held."""
        return len(self) if self.total is None else self.total

    def kept(self, count: int) -> PathPieces:
        """Only the ``count`` longest pieces, in time order (those ``longest(count)`` gives),
        with the tables cut to what they use."""
        if len(self) <= count:
            return self
        keep = self._longest(count)
        names, name = _used(self.names, self.name[keep])
        lanes, lane = _used(self.lanes, self.lane[keep])
        return PathPieces(lane=lane, start_us=self.start_us[keep], end_us=self.end_us[keep],
                          category=self.category[keep], name=name, lanes=lanes,
                          categories=self.categories, names=names, total=self.count)

    def _longest(self, count: int) -> np.ndarray:
        return np.sort(np.argsort(-(self.end_us - self.start_us), kind="stable")[:count])

    def piece(self, i: int) -> PathPiece:
        n = int(self.name[i])
        return PathPiece(self.lanes[int(self.lane[i])], float(self.start_us[i]),
                         float(self.end_us[i]), self.categories[int(self.category[i])],
                         self.names[n] if n >= 0 else "")

    def longest(self, count: int) -> list[PathPiece]:
        """The ``count`` longest pieces, in time order."""
        return [self.piece(int(i)) for i in self._longest(count)]


#: ``StepPath.pieces`` not given (read back from JSON): built from the pieces shown.
_NO_PIECES = PathPieces.of([])


def _used(table: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The entries of ``table`` that ``codes`` use (-1: none), and the codes into them."""
    used = np.unique(codes[codes >= 0])
    remap = np.full(len(table) + 1, -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return [table[i] for i in used.tolist()], remap[codes]


class StepPath(Record):
    """One step's critical path."""

    json_internal = frozenset({"pieces"})

    step: int
    start_us: float  # the step's start, µs from the trace's t0
    step_us: float  # from the step's start to the end of its path
    split_us: dict[str, float]  # by category; sums to step_us
    #: The pieces its JSON shows: the longest (``pieces_per_step``), in time order.
    shown: list[PathPiece] = field(name="pieces")
    pieces_total: int  # how many pieces the step's path has
    #: The step's pieces held: every one when its trace was analysed whole, those shown when
    #: compacted (``CriticalPath.compact``) or read back from JSON (then built from ``shown``).
    pieces: PathPieces = field(name="columns", default_factory=lambda: _NO_PIECES)

    def __post_init__(self) -> None:
        if self.pieces is _NO_PIECES:
            self.pieces = PathPieces.of(self.shown, self.pieces_total)


def pieces_per_step(steps: int) -> int:
    """The pieces each step's JSON shows when the path has ``steps`` steps."""
    return max(5, min(JSON_PIECES, JSON_PIECES_TOTAL // max(steps, 1)))


class PathItem(Record):
    """Something the path runs through (an op, a kernel, a collective, the DataLoader...),
    with the step time if it took no time or half its time (a replay of the graph)."""

    json_derived = (Derived("saving_pct_if_zero", "step_ms_if_half"),)

    kind: str  # op, kernel, collective, copy, data_loader, launches
    name: str
    on_path_us: float  # summed over steps
    on_path_pct: float  # of the summed step time
    step_ms: float  # mean step time as replayed, unchanged
    step_ms_if_zero: float | None = None
    step_ms_if_half: float | None = None

    @property
    def saving_pct_if_zero(self) -> float | None:
        """The most removing it could save, in % of the step: the findings' upper bound."""
        if self.step_ms_if_zero is None or self.step_ms <= 0:
            return None
        return 100.0 * (self.step_ms - self.step_ms_if_zero) / self.step_ms


class CriticalPath(Record):
    """The critical path of every step of one trace, its split, and the what-if table."""

    json_derived = (Derived("step_ms", ""),)

    split_us: dict[str, float]  # summed over steps
    split_pct: dict[str, float]  # of the summed step time
    items: list[PathItem]  # the top items on the path, most time first, with what-ifs
    typical_launch_lag_us: float
    steps: list[StepPath]
    notes: list[str] = field(default_factory=list)

    @property
    def step_ms(self) -> float | None:
        """Mean step time as replayed (ms)."""
        if not self.steps:
            return None
        return sum(s.step_us for s in self.steps) / len(self.steps) / 1000.0

    def to_pandas(self, by: str = "item") -> Any:
        """One row per top item on the path with its what-ifs; ``by="step"``: one row per
        step with its split (µs per category)."""
        from trainprof.analysis.dataframes import data_frame

        if by == "step":
            return data_frame([{"step": s.step, "step_us": s.step_us, **s.split_us}
                               for s in self.steps])
        return data_frame([i.to_dict() for i in self.items])

    @property
    def _pieces_per_step(self) -> int:
        return pieces_per_step(len(self.steps))

    def compact(self) -> CriticalPath:
        """This result with each step holding only the path pieces its JSON and reports show
        (``to_dict`` is unchanged): a folder's ranks are held together, and a rank's every
        piece costs hundreds of KB (``trainprof annotate`` analyses its one trace whole)."""
        keep = self._pieces_per_step
        return replace(self, steps=[replace(s, pieces=s.pieces.kept(keep)) for s in self.steps])

    def saving_cap_pct(self, kind: str, name: str | None = None) -> float | None:
        """The what-if bound for an item (by kind, and name when given): the largest saving in
        % of the step that removing it could bring, or None when it was not replayed."""
        caps = [i.saving_pct_if_zero for i in self.items
                if i.kind == kind and (name is None or i.name == name)
                and i.saving_pct_if_zero is not None]
        return max(caps) if caps else None
