"""The memory breakdown (docs/memory_breakdown.md) as a terminal table with bars, and as the
rows and shares the HTML report draws. Reads `MemoryBreakdown` (analysis/snapshot/breakdown.py):
the plain dict, wherever it came from (`StepTimer.summary()`, `Recorder.memory_breakdown()` or a
snapshot trainprof wrote), read once with `decode.record`."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from trainprof.analysis.decode import record
from trainprof.analysis.snapshot.breakdown import MemoryBreakdown
from trainprof.report.quantities import compact_table, size

#: The parts of the peak, in the order shown, with their labels and colours.
PARTS = (
    ("parameters", "parameters", "#4e79a7"),
    ("gradients", "gradients", "#59a14f"),
    ("optimizer_state", "optimizer state", "#f28e2b"),
    ("activations", "activations and temporaries (rest of the peak)", "#b07aa1"),
    ("runtime", "left resident by the first step (torch's start-up, profiler buffers)",
     "#9c755f"),
    ("process", "the process before training (interpreter, libraries, data)", "#bab0ac"),
)
#: Parts that only some breakdowns have (runtime and process: CPU only); absent, they are no row.
_OPTIONAL = ("runtime", "process")
_BAR = 24


def parts(b: MemoryBreakdown) -> list[tuple[str, int | None, float | None, str]]:
    """(label, bytes, share of the sum in %, colour) of each part; the share is None when the
    rest of the peak is unknown (the parts would not add up to the peak). The sum is the peak
    wherever the peak is known (the process part on the CPU makes it so)."""
    values: dict[str, int | None] = {key: getattr(b.bytes, key) for key, _, _ in PARTS}
    shown = [p for p in PARTS if p[0] not in _OPTIONAL or values[p[0]] is not None]
    known = [values[key] for key, _, _ in shown]
    total = sum(v for v in known if v) if all(v is not None for v in known) else None
    return [(label, value, (100.0 * value / total) if total and value is not None else None,
             color) for key, label, color in shown for value in [values[key]]]


def rule_of_thumb(b: MemoryBreakdown) -> str | None:
    """The optimizer's state per byte of the parameters it updates, in words."""
    ratio = b.optimizer_state_per_parameter
    if ratio is None:
        return None
    keys = ", ".join(b.optimizer_state_keys)
    return (f"optimizer state = {ratio:.2f} x the bytes of the parameters it updates ({keys}); "
            "Adam and AdamW keep two states per parameter, SGD with momentum one")


def dtype_rows(b: MemoryBreakdown) -> list[tuple[str, str, str, int, int]]:
    """(category, device, dtype, bytes, tensors), largest first."""
    rows = [(r.category.replace("_", " "), r.device, r.dtype, r.bytes, r.tensors) for r in b.rows]
    return sorted(rows, key=lambda r: -r[3])


def _bar(pct: float | None) -> Text:
    if pct is None:
        return Text("")
    filled = round(max(0.0, min(pct, 100.0)) / 100 * _BAR)
    return Text("█" * filled + "·" * (_BAR - filled), style="cyan")


def breakdown_renderable(b: MemoryBreakdown) -> Group:
    """The breakdown: each part with its bytes and share, the dtype rows, the rule of thumb."""
    source = "peak" if b.peak_source is None else b.peak_source
    title = f"Where the memory goes on {b.device} (peak {size(b.bytes.peak)}, {source})"
    t = compact_table(title)
    for col, justify in (("part", "left"), ("bytes", "right"), ("share", "right"), ("", "left")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for label, nbytes, pct, _ in parts(b):
        t.add_row(label, size(nbytes), "n/a" if pct is None else f"{pct:.1f}%", _bar(pct))
    by_dtype = Table(box=None, show_header=True, padding=(0, 1), pad_edge=False)
    for col in ("of which", "device", "dtype", "bytes", "tensors"):
        by_dtype.add_column(col, justify="right" if col in ("bytes", "tensors") else "left")
    for category, device, dtype, nbytes, tensors in dtype_rows(b):
        by_dtype.add_row(category, device, dtype, size(nbytes), str(tensors))
    lines = [Text(x, style="dim") for x in [rule_of_thumb(b), *b.notes] if x]
    return Group(t, by_dtype, *lines)


def print_breakdown(b: dict[str, Any] | None, console: Console | None = None) -> None:
    """Print the breakdown (nothing when there is none: no optimizer stepped)."""
    if b:
        breakdown: MemoryBreakdown = record(b, MemoryBreakdown, "memory breakdown")
        (console or Console()).print(breakdown_renderable(breakdown))
