"""The words every layer shares, defined once: training phases, breakdown categories,
severities and communication backends, with the colours each is drawn in.

Capture, analysis, diagnosis and every report import these names from here (they are re-exported
where they used to live), so a phase or a severity cannot be spelled or coloured two ways.
"""

from __future__ import annotations

from typing import Literal

#: Training phases of a step, in the order they are claimed (docs/metrics.md).
PHASES = ("data", "forward", "backward", "optimizer", "other")
#: The phases the quick checklist times one by one (``other`` is what is left).
TIMED_PHASES = PHASES[:4]
#: Phase colours: HTML and SVG charts, and the terminal's live view.
PHASE_COLORS = {"data": "#b07aa1", "forward": "#4e79a7", "backward": "#59a14f",
                "optimizer": "#f28e2b", "other": "#bab0ac"}
PHASE_TERMINAL_COLORS = {"data": "yellow", "forward": "cyan", "backward": "blue",
                         "optimizer": "magenta", "other": "white"}

#: The step-time breakdown's categories (the TensorBoard plugin's, docs/metrics.md).
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec")
ALL_CATEGORIES = (*CATEGORIES, "other")
CATEGORY_COLORS = {  # charts and legends in every report
    "kernel": "#4e79a7",
    "memcpy": "#f28e2b",
    "memset": "#edc948",
    "communication": "#e15759",
    "runtime": "#76b7b2",
    "dataloader": "#b07aa1",
    "cpu_exec": "#59a14f",
    "other": "#bab0ac",
}

Severity = Literal["high", "medium", "low"]
#: Most severe first (ties in the findings' ranking are broken by it).
SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
#: Severity in the terminal (rich styles) and in HTML (the report's CSS variables match these).
SEVERITY_STYLES = {"high": "bold red", "medium": "bold yellow", "low": "bold blue"}
SEVERITY_COLORS = {"high": "#c62828", "medium": "#b26a00", "low": "#1f5fa8"}

#: Communication backends whose host ranges are collectives (``nccl:all_reduce``,
#: ``gloo:broadcast``, ``hccl:allreduce`` ...): one list for what counts as a collective and
#: what counts as communication time.
COMM_BACKENDS = ("nccl", "gloo", "mpi", "ucc", "xccl", "hccl", "rccl")

#: The NVTX mark the recorder leaves with its process's rank (capture/nvtx.py), which the Nsight
#: Systems reader takes as that process's rank (trace/nsys/nvtx.py): one spelling for both.
NVTX_RANK_MARK = "trainprof.rank="
