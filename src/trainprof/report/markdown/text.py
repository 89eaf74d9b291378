"""Markdown text that a trace's strings cannot break: escaped cells, fenced code, tables."""

from __future__ import annotations

import re
from typing import Any

#: Longest name shown in a table cell (kernel names can run to hundreds of characters).
MAX_CELL = 90
# Characters that start emphasis, code, links, images, strikethrough, math or a table cell.
_PUNCTUATION = re.compile(r"([\\`*_\[\]|~#!$])")
_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))


def md_text(value: Any, limit: int | None = MAX_CELL) -> str:
    """Plain text that Markdown (GitHub's included) shows as is, on one line."""
    text = " ".join(str(value).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    for char, entity in _ENTITIES:
        text = text.replace(char, entity)
    return _PUNCTUATION.sub(r"\\\1", text)


def code_block(code: str, language: str = "python") -> str:
    """A fenced block whose fence is longer than any run of backticks inside it."""
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{code.rstrip()}\n{fence}"


def table(head: list[str], rows: list[list[str]], align: str = "") -> str:
    """A Markdown table; ``align`` has one letter per column, l or r (default: l, then r)."""
    align = align or "l" + "r" * (len(head) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
