"""Names a package serves on first use, so that importing it stays cheap (and torch-free), and
regular expressions compiled on first use."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``where[name]`` (a module path) on first use and
    caches the value in the package."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__


class LazyPattern:
    """A regular expression compiled on its first use, for module-level patterns: compiling
    them all at import was about a quarter of trainprof's own import time, and a trace needs only
    some of them. The methods trainprof uses are those of ``re.Pattern``."""

    __slots__ = ("pattern", "flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now if this is its first use)."""
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled.search(text)

    def match(self, text: str) -> re.Match[str] | None:
        return self.compiled.match(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(text)

    def sub(self, repl: str | Callable[[re.Match[str]], str], text: str, count: int = 0) -> str:
        return self.compiled.sub(repl, text, count)

    def findall(self, text: str) -> list[Any]:
        return self.compiled.findall(text)
