"""Names and colours of the breakdown categories, phases and GPU time shares, shared by the
HTML, Markdown and compare reports (one place, so every view says the same)."""

from __future__ import annotations

from trainprof.diagnose.findings import Evidence
from trainprof.vocabulary import CATEGORY_COLORS as _CATEGORY_COLORS
from trainprof.vocabulary import PHASE_COLORS as _PHASE_COLORS

CATEGORY_LABELS = {
    "kernel": "Kernel",
    "memcpy": "Memcpy",
    "memset": "Memset",
    "communication": "Communication",
    "runtime": "Runtime (launch API)",
    "dataloader": "DataLoader",
    "cpu_exec": "CPU Exec",
    "other": "Other",
}
CATEGORY_COLORS = _CATEGORY_COLORS
PHASE_COLORS = _PHASE_COLORS
#: The GPU timeline as four shares that add up to 100% of the step window.
TIMELINE_SHARES = (
    ("compute_pct", "compute", "#4e79a7"),
    ("exposed_communication_pct", "exposed communication", "#e15759"),
    ("exposed_memcpy_pct", "exposed copies", "#f28e2b"),
    ("idle_pct", "idle", "#d5d5d5"),
)

#: The two Tensor Core shares a report shows, each named with its denominator: the GPU table's
#: (Tensor Core kernel time / compute-kernel time, communication left out, in the step window)
#: and the kernel table's (Tensor Core kernel time / all kernel time, whole trace).
TENSOR_CORE_OF_COMPUTE = "Tensor Core (of compute)"
TENSOR_CORE_OF_COMPUTE_NOTE = ("Tensor Core (of compute): share of compute-kernel time "
                               "(communication kernels left out) in Tensor Core kernels")
TENSOR_CORE_OF_ALL = "of all kernel time"

#: The operator table's sort columns (``analysis.options.OPERATOR_SORT_COLUMNS``), in words.
SORT_LABELS = {"device_self_us": "device self time", "device_total_us": "device total time",
               "host_self_us": "host self time", "host_total_us": "host total time",
               "calls": "calls", "name": "name"}


def category_label(key: str) -> str:
    return CATEGORY_LABELS.get(key, key.replace("_", " "))


def evidence_text(e: Evidence) -> str:
    """A finding's evidence as ``Evidence.__str__`` says it, with thousands separated."""
    shown = f"{e.value:,.1f}" if isinstance(e.value, float) else str(e.value)
    unit = e.unit if e.unit[:1] in ("%", "") or e.unit == "x" else f" {e.unit}"
    where = f" ({e.where})" if e.where else ""
    return f"{e.what}: {shown}{unit}{where}"
