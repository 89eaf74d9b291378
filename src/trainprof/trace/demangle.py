"""Readable names for mangled kernel symbols (Itanium C++ ABI, as ROCm traces and some CUDA
tools write them: ``_ZN2at6native...``): the qualified name, with template arguments shown as
``<…>`` and no parameter list. Enough to tell kernels apart on one line; not a full demangler
(a name it cannot read is returned as given)."""

from __future__ import annotations

import re

_MANGLED = re.compile(r"^_Z")
#: Operator names that can end a nested name, as the ABI spells them.
_OPERATORS = {"cl": "operator()", "ix": "operator[]", "eq": "operator==", "pl": "operator+"}


def readable_name(name: str) -> str:
    """``name`` demangled for display when it is an Itanium-mangled symbol, else unchanged."""
    if not _MANGLED.match(name):
        return name
    try:
        parts, templated = _parse(name[2:])
    except (IndexError, ValueError):
        return name
    if not parts:
        return name
    return "::".join(parts) + ("<…>" if templated else "")


def _parse(text: str) -> tuple[list[str], bool]:
    """The components of the function's name and whether its last one has template args."""
    pos = 0
    if text.startswith("L"):  # internal linkage
        pos = 1
    if text[pos] == "N":
        return _nested(text, pos + 1)
    name, pos = _source_name(text, pos)
    templated = pos < len(text) and text[pos] == "I"
    return [name], templated


def _nested(text: str, pos: int) -> tuple[list[str], bool]:
    parts: list[str] = []
    templated = False
    while pos < len(text) and text[pos] in "rVKRO":  # cv- and ref-qualifiers of a method
        pos += 1
    while text[pos] != "E":
        char = text[pos]
        if char.isdigit():
            name, pos = _source_name(text, pos)
            parts.append("(anonymous namespace)" if name.startswith("_GLOBAL__N") else name)
            templated = False
        elif char == "I":
            templated = True
            try:
                pos = _skip_template_args(text, pos)
            except (IndexError, ValueError):  # arguments past this reader (lambdas, local
                return parts, templated       # names): the name read so far is what counts
        elif char == "S":  # a substitution (St = std::, S_/S0_... earlier components)
            if text[pos + 1] == "t":
                parts.append("std")
                pos += 2
            else:
                end = text.index("_", pos)
                pos = end + 1
        elif char in "CD" and text[pos + 1].isdigit():  # constructor / destructor
            pos += 2
        elif text[pos:pos + 2] in _OPERATORS:
            parts.append(_OPERATORS[text[pos:pos + 2]])
            pos += 2
        elif parts:  # something this reader does not know: keep the name read so far
            return parts, templated
        else:
            raise ValueError(f"unread code {char!r}")
    return parts, templated


def _source_name(text: str, pos: int) -> tuple[str, int]:
    digits = re.match(r"\d+", text[pos:])
    if digits is None:
        raise ValueError("no length")
    length = int(digits.group(0))
    start = pos + len(digits.group(0))
    return text[start:start + length], start + length


def _skip_template_args(text: str, pos: int) -> int:
    """Past a balanced ``I ... E`` template-argument list: nested names and lists, literals
    ``L<type><value>E``, substitutions ``S<id>_`` and parameters ``T<id>_`` (whose digits are
    no lengths)."""
    depth = 0
    while True:
        char = text[pos]
        if char.isdigit():
            _, pos = _source_name(text, pos)
            continue
        if char == "L" and not text.startswith("L_Z", pos):
            pos += _match(r"L(?:D.|[a-z])n?[0-9a-f.]*?E", text, pos)
            continue
        if char == "S":
            pos += 2 if text[pos + 1] in "tabsiod" else _match(r"S[0-9A-Z]*_", text, pos)
            continue
        if char == "T":
            pos += _match(r"T[0-9A-Z]*_", text, pos)
            continue
        if char == "D":
            pos += _match(r"DF\d+_|D.", text, pos)
            continue
        if char in "INX":
            depth += 1
        elif char == "E":
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1


def _match(pattern: str, text: str, pos: int) -> int:
    found = re.match(pattern, text[pos:])
    if found is None:
        raise ValueError(f"unread code at {pos}")
    return found.end()
