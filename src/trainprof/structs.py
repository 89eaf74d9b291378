"""What trainprof's types are made of: msgspec Structs, and the few dataclasses-like helpers the
code needs over them.

Every result and record type is a ``msgspec.Struct``: a class is built in microseconds at import
(a dataclass costs ~0.7 ms, 160 of them were half of ``import trainprof.pipeline``), instances
are slotted, pickle between processes, and msgspec encodes and decodes them.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple, TypeVar

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
