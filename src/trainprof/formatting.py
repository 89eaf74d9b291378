"""Numbers as text, one way everywhere: terminal, Markdown, HTML, the history page and the
findings' evidence. A missing value is always ``MISSING`` ("n/a"), never an empty cell in one
view and "n/a" in another."""

from __future__ import annotations

MISSING = "n/a"
_SIZE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def number(value: float | None, digits: int = 1, unit: str = "", sign: bool = False) -> str:
    """``1,234.5`` (thousands separated), with ``unit`` appended; ``sign``: always a sign."""
    if value is None:
        return MISSING
    return f"{value:{'+' if sign else ''},.{digits}f}{unit}"


def size(nbytes: float | None) -> str:
    """Decimal units (10^6 bytes is a MB), as the docs say."""
    if nbytes is None:
        return MISSING
    for unit, scale in _SIZE_UNITS:
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:.0f} B"


def pct(value: float | None, digits: int = 1) -> str:
    return MISSING if value is None else f"{value:.{digits}f}%"


def ms(value: float | None, digits: int = 2) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def ms_from_us(us: float | None, digits: int = 2) -> str:
    """Microseconds shown as milliseconds."""
    return MISSING if us is None else f"{us / 1000:.{digits}f}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one: ``1 step``, ``3 steps``, ``0 steps``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
