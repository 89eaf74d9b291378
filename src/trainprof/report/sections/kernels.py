"""The kernels section's renderers: the top kernels and the kernel classes' shares."""

from __future__ import annotations

from trainprof.analysis.sections.kernel_shares import KernelClassShares
from trainprof.analysis.sections.kernels import KernelStats
from trainprof.formatting import number
from trainprof.report.html.tables import kernels_table
from trainprof.report.markdown.text import md_text, table
from trainprof.report.names import short_name as short_kernel_name
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.hotspots import render_kernels


def html(result: KernelStats | None, ctx: ViewContext) -> list[HtmlBlock]:
    if result is None or not result.rows:
        return []
    return [HtmlBlock("Top kernels", [kernels_table(result, ctx.rows)])]


def markdown(kernels: KernelStats | None, ctx: ViewContext) -> str:
    if kernels is None or not kernels.rows:
        return ""
    rows = [[md_text(short_kernel_name(k.name)), number(k.calls, 0), number(k.total_us / 1000, 2),
             number(k.share_pct, 1, "%")] for k in kernels.rows[:ctx.rows]]
    out = ["**Top kernels**", "", table(["kernel", "calls", "total ms", "share"], rows), ""]
    return "\n".join(out + _kernel_classes(kernels.classes)).rstrip()


def _kernel_classes(classes: KernelClassShares | None) -> list[str]:
    """One line: kernel time per class, and the unclassified share (docs/kernel_classes.md)."""
    if classes is None or not classes.total_us:
        return []
    p = classes.class_pct
    return [f"Kernel classes: communication {number(p.get('communication'), 1, '%')}, Tensor "
            f"Core {number(p.get('tensor_core'), 1, '%')}, other compute "
            f"{number(p.get('compute'), 1, '%')}; unclassified "
            f"{number(classes.unclassified_pct, 1, '%')}."]


VIEW = SectionView("kernels", text=lambda result, ctx: render_kernels(result, ctx.rows), html=html,
                   markdown=markdown, markdown_heading="Where the time goes: top ops")
