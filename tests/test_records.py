"""Every result record's JSON form is well declared (trainprof/structs.py ``Record``): each
derived figure is placed after a key the JSON writes and read from an attribute the record has,
each internal field is a field. Checked on every record class of the package, so that a record
no trace of the suite happens to fill still fails here, not in a user's report."""

from __future__ import annotations

import importlib
import pkgutil

import trainprof
from trainprof.structs import Record, json_plan


def _records() -> list[type[Record]]:
    for module in pkgutil.walk_packages(trainprof.__path__, "trainprof."):
        if ".capture." not in module.name and "__main__" not in module.name:
            importlib.import_module(module.name)
    found, todo = [], list(Record.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def test_every_record_declares_its_json_form() -> None:
    records = _records()
    assert len(records) > 80  # the package's records, not a few stray ones
    for cls in records:
        plan = json_plan(cls)  # TypeError when a derived figure or internal field is misplaced
        keys = [key for key, _ in plan]
        assert len(keys) == len(set(keys)), (cls.__name__, keys)
        for _, attr in plan:
            assert hasattr(cls, attr) or attr in cls.__struct_fields__, (cls.__name__, attr)


def test_a_misplaced_figure_is_caught() -> None:
    import pytest

    from trainprof.structs import Derived

    class Misplaced(Record):
        json_derived = (Derived("total", "gone"),)
        json_internal = frozenset({"kept"})
        part: int
        kept: int = 0

        @property
        def total(self) -> int:
            return self.part

    with pytest.raises(TypeError, match="total"):
        json_plan(Misplaced)

    class Placed(Record):
        json_derived = (Derived("total", "part"),)
        json_internal = frozenset({"kept"})
        part: int
        kept: int = 0

        @property
        def total(self) -> int:
            return self.part + self.kept

    assert Placed(2, 5).to_dict() == {"part": 2, "total": 7}
