"""Findings name the module where their time lies, when the trace has module events.

Each finding id below is tied to the ops its time is made of; the module (analysis/sections/modules.py)
holding most of those ops' self time is added to the finding's evidence. docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Callable

from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections.modules import ModuleShare
from trainprof.diagnose.findings import Evidence, Finding
from trainprof.diagnose.rules.common import readable_us
from trainprof.lazy import LazyPattern
from trainprof.trace.model import sync_cause

_MATMUL_CONV = LazyPattern(
    r"^aten::(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_addmm_activation"
    r"|_?convolution\w*|cudnn_convolution\w*|conv\w*)$")
_SOFTMAX = LazyPattern(r"^aten::(?:_?softmax|_softmax_backward_data)$")

#: finding id -> (which ops hold its time, on which clock: None for the tree's own).
FINDING_OPS: dict[str, tuple[Callable[[str], object], str | None]] = {
    "no_tensor_cores": (_MATMUL_CONV.match, None),
    "attention_not_fused": (_SOFTMAX.match, None),
    "sync_points": (lambda name: sync_cause(name) is not None, "host"),
}


def name_modules(r: RankAnalysis, findings: list[Finding]) -> list[Finding]:
    """The findings, with a "where in the model" evidence line where the module is known."""
    tree = r.sections.modules
    if tree is None or not tree.available:
        return findings
    for f in findings:
        ops = FINDING_OPS.get(f.id)
        found = tree.where(*ops) if ops else None
        if found is not None:
            f.evidence.append(Evidence("where in the model (module class)", found.kind, "",
                                       _spread(found)))
    return findings


def _spread(found: ModuleShare) -> str:
    """``24 modules, 100% of that time; heaviest …/Layer_3/Attention_3/Self_3 (8%, 5.8 ms)``."""
    many = f"{found.kind_modules} modules, " if found.kind_modules > 1 else ""
    heaviest = (f"; heaviest {found.short} ({found.pct:.0f}%, {readable_us(found.us)})"
                if found.kind_modules > 1 else f" ({found.short}, {readable_us(found.us)})")
    return f"{many}{found.kind_pct:.0f}% of that time{heaviest}"
