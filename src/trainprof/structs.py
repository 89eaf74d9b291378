"""What trainprof's types are made of: msgspec Structs, and the few dataclasses-like helpers the
code needs over them.

Every result and record type is a ``msgspec.Struct``: a class is built in microseconds at import
(a dataclass costs ~0.7 ms, 160 of them were half of ``import trainprof.pipeline``), instances
are slotted, pickle between processes, and msgspec encodes and decodes them.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, NamedTuple, TypeVar

import msgspec

T = TypeVar("T", bound=msgspec.Struct)

#: A field without a default.
NODEFAULT = msgspec.NODEFAULT

_PLAIN = (str, int, float, bool, type(None))


class Field(NamedTuple):
    """One field of a Struct: its name, and its default (``NODEFAULT`` for none; a default
    factory is given as msgspec's ``Factory``)."""

    name: str
    default: Any


def fields(struct: msgspec.Struct | type[msgspec.Struct]) -> tuple[Field, ...]:
    """A Struct type's (or instance's) fields in order, without resolving their annotations."""
    cls = struct if isinstance(struct, type) else type(struct)
    names: tuple[str, ...] = cls.__struct_fields__
    defaults: tuple[Any, ...] = cls.__struct_defaults__
    first = len(names) - len(defaults)
    return tuple(Field(name, defaults[i - first] if i >= first else NODEFAULT)
                 for i, name in enumerate(names))


def field_names(struct: msgspec.Struct | type[msgspec.Struct]) -> tuple[str, ...]:
    cls = struct if isinstance(struct, type) else type(struct)
    return tuple(cls.__struct_fields__)


def shallow_dict(struct: msgspec.Struct) -> dict[str, Any]:
    """A Struct's fields by name, in order, the values as they are (not copied)."""
    return {name: getattr(struct, name) for name in struct.__struct_fields__}


def replace(struct: T, /, **changes: Any) -> T:
    """A copy of ``struct`` with some fields changed."""
    return msgspec.structs.replace(struct, **changes)


def asdict(value: Any) -> Any:
    """A Struct as a dict, recursively through Structs, lists, tuples and dicts (as
    ``dataclasses.asdict`` does: other values are deep-copied)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, msgspec.Struct):
        return {name: asdict(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*[asdict(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(asdict(v) for v in value)
    if isinstance(value, dict):
        return type(value)((asdict(k), asdict(v)) for k, v in value.items())
    return copy.deepcopy(value)


class Derived(NamedTuple):
    """A figure a record's JSON writes beside its fields: ``key`` in the JSON, read from the
    record's attribute ``attr`` (a property; default: ``key``), placed after the JSON key
    ``after`` ("" puts it first)."""

    key: str
    after: str
    attr: str = ""


class Record(msgspec.Struct):
    """A result record. Its JSON form is its own encoding: its fields in order under their
    JSON names (``msgspec.field(name=...)``), records inside it as their own JSON, plus the
    ``json_derived`` figures and less the ``json_internal`` fields (and the
    ``json_omit_empty`` keys whose value is None or empty); ``analysis/decode.py``
    reads that JSON back into the record (derived figures are computed again)."""

    #: Figures derived from the fields that the JSON writes too.
    json_derived: ClassVar[tuple[Derived, ...]] = ()
    #: Fields not written at their own place: those the JSON leaves out (they read back as
    #: their default), and those a ``Derived`` entry of the same key writes elsewhere (a field
    #: whose place in another file format, e.g. the cluster summary, must not move).
    json_internal: ClassVar[frozenset[str]] = frozenset()
    #: JSON keys left out when their value is None or empty (the parts a record may not have).
    json_omit_empty: ClassVar[frozenset[str]] = frozenset()
    #: Whether every key whose value is None is left out (a container of optional parts).
    json_omit_none: ClassVar[bool] = False
    #: Fields whose JSON (an object) is spread into the record's at their place, key by key
    #: (free-form extras; the sections of a rank, which the JSON puts beside its figures).
    json_spread: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON form (see the class docstring)."""
        return record_dict(self)


def record_dict(record: Record) -> dict[str, Any]:
    """``record``'s JSON form: ``Record.to_dict``."""
    cls = type(record)
    out: dict[str, Any] = {}
    omit, omit_none, spread = cls.json_omit_empty, cls.json_omit_none, cls.json_spread
    for key, attr in json_plan(cls):
        value = getattr(record, attr)
        if (key in omit and not value) or (omit_none and value is None):
            continue
        if attr in spread:
            out.update(plain(value) if value is not None else {})
        else:
            out[key] = plain(value)
    return out


_PLANS: dict[type, tuple[tuple[str, str], ...]] = {}


def json_plan(cls: type[Record]) -> tuple[tuple[str, str], ...]:
    """(JSON key, attribute) of a record type's JSON form, in order; ``TypeError`` when a
    derived figure or an internal field names no key or field of the record."""
    plan = _PLANS.get(cls)
    if plan is None:
        steps: list[tuple[str, str]] = []

        def place(key: str, attr: str) -> None:  # a key, then what goes after it
            if key:
                steps.append((key, attr))
            for d in cls.json_derived:
                if d.after == key:
                    place(d.key, d.attr or d.key)

        place("", "")
        for name, key in zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True):
            if name not in cls.json_internal:
                place(key, name)
        lost = [d.key for d in cls.json_derived if (d.key, d.attr or d.key) not in steps]
        lost += sorted(cls.json_internal - set(cls.__struct_fields__))
        lost += sorted(cls.json_omit_empty - {key for key, _ in steps})
        lost += sorted(cls.json_spread - set(cls.__struct_fields__))
        if lost:
            raise TypeError(f"{cls.__name__}: {lost} name no JSON key or field of the record")
        plan = _PLANS[cls] = tuple(steps)
    return plan


def plain(value: Any) -> Any:
    """``value`` in its JSON form: records (Structs with ``to_dict``) as their own, other
    Structs field by field, containers walked; numbers and numpy values as they are (the JSON
    writer, trainprof/jsontext.py, turns those into JSON)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, msgspec.Struct):
        own = getattr(value, "to_dict", None)
        if own is not None:
            return own()
        return {k: plain(getattr(value, n)) for n, k in
                zip(value.__struct_fields__, value.__struct_encode_fields__, strict=True)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value
