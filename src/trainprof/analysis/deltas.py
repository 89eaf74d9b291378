"""What ``analysis/diff.py`` finds between two runs: figures in both runs and their changes
(docs/diff.md). Plain results: the renderers read them without the code that loads traces."""

from __future__ import annotations

import warnings
from typing import Any

from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.structs import Derived, Record, record_dict, replace

#: A name is slower or faster when its time per step changed by at least this share of its
#: base time and by at least MIN_CHANGE_US µs per step; smaller changes count as the same.
MIN_CHANGE_SHARE = 0.05
MIN_CHANGE_US = 10.0
#: Rows per list in ``to_dict`` (the Struct keeps them all).
TOP_CHANGES = 30


class Delta(Record):
    """One figure in both runs and the change (new minus base)."""

    json_derived = (Derived("delta", "new"), Derived("delta_pct", "delta"))

    base: float | None
    new: float | None

    @property
    def delta(self) -> float | None:
        return None if self.base is None or self.new is None else self.new - self.base

    @property
    def delta_pct(self) -> float | None:
        d = self.delta
        return None if d is None or not self.base else d / self.base * 100.0


class NameDelta(Record):
    """An op or kernel name in both runs, per step. For ops, ``*_us`` is host time and
    ``*_device_us`` the device time of the kernels they launched (when the table has it)."""

    json_derived = (Derived("delta_us_per_step", "new_device_us_per_step", attr="delta_us"),)

    name: str
    change: str  # "added", "removed", "slower", "faster" or "same"
    base_calls: float = field(name="base_calls_per_step")
    new_calls: float = field(name="new_calls_per_step")
    base_us: float = field(name="base_us_per_step")
    new_us: float = field(name="new_us_per_step")
    base_device_us: float | None = field(default=None, name="base_device_us_per_step")
    new_device_us: float | None = field(default=None, name="new_device_us_per_step")

    @property
    def delta_us(self) -> float:
        """The larger change, host or device (signed): what the name costs or saves."""
        host = self.new_us - self.base_us
        if self.base_device_us is None or self.new_device_us is None:
            return host
        device = self.new_device_us - self.base_device_us
        return device if abs(device) > abs(host) else host


class TraceDiff(Record):
    """What changed between two runs. Its JSON lists the ``top`` largest changes of ops and
    kernels (``with_top``), after the op metric."""

    json_derived = (Derived("ops", "op_metric", attr="top_ops"),
                    Derived("kernels", "ops", attr="top_kernels"))
    json_internal = frozenset({"ops", "kernels", "top"})

    step_ms: Delta  # median step time
    breakdown_ms: dict[str, Delta]  # mean ms per step per category
    phases_ms: dict[str, Delta]
    ops: list[NameDelta]  # changed names, the largest change first
    kernels: list[NameDelta]
    op_metric: str  # which host time of ops is compared: "host self" or "host total"
    notes: list[str] = field(default_factory=list)
    #: Changed ops and kernels the JSON lists.
    top: int = TOP_CHANGES

    def with_top(self, top: int) -> TraceDiff:
        """The diff whose JSON lists the ``top`` largest changes of ops and kernels."""
        return replace(self, top=top)

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """The JSON form. ``top`` (deprecated): ``with_top(top).to_dict()``."""
        if top is None:
            return record_dict(self)
        warnings.warn("TraceDiff.to_dict(top) is deprecated: use with_top(top).to_dict()",
                      DeprecationWarning, stacklevel=2)
        return record_dict(self.with_top(top))

    @property
    def top_ops(self) -> list[NameDelta]:
        return self.ops[:self.top]

    @property
    def top_kernels(self) -> list[NameDelta]:
        return self.kernels[:self.top]

    def to_pandas(self) -> Any:
        """One row per changed op and kernel (``what`` says which)."""
        rows = [{"what": "op", **o.to_dict()} for o in self.ops]
        rows += [{"what": "kernel", **k.to_dict()} for k in self.kernels]
        return data_frame(rows)
