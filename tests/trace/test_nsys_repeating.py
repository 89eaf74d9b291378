"""Steps found from the repeating kernels of a capture without step markers."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.trace.model import Kind
from trainprof.trace.nsys.detect import read_nsys

from helpers.paths import NSYS_H100

#: torch 2.x's fused AdamW kernel, as its demangled name reads in Kineto traces of
#: ``torch.optim.AdamW(fused=True)``.
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous "
        "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, true>, float*, "
        "double, double, double, double, double, bool, bool*, bool*>(...)")
STEPS = 6
LAYER = 30  # kernels of a step besides the optimizer's
KERNEL_NS, LAUNCH_AHEAD_NS, BETWEEN_STEPS_NS = 20_000, 5_000, 300_000


def _rows(db: sqlite3.Connection, table: str) -> tuple[list[str], tuple]:
    cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
    return cols, db.execute(f"SELECT * FROM {table} LIMIT 1").fetchone()


def _loop(out: Path, steps: list[list[int]], keep_strings: bool = False) -> Path:
    """The 2xH100 export's tables (nsys 2026.2) holding one process's training loop instead:
    each step's kernels (``steps``: StringIds ids) launched back to back by ``cudaLaunchKernel`` 5 µs
    ahead of each, a 300 µs host pause between steps, and an NVTX ``ProfilerStep#N`` range
    around each step's launches; rows made from the export's own first rows."""
    if not keep_strings:  # else ``out`` is already a copy with names of its own
        shutil.copyfile(NSYS_H100, out)
    with sqlite3.connect(out) as db:
        kcols, kernel = _rows(db, "CUPTI_ACTIVITY_KIND_KERNEL")
        rcols, launch = _rows(db, "CUPTI_ACTIVITY_KIND_RUNTIME")
        for table in ("KERNEL", "RUNTIME", "MEMCPY", "MEMSET", "SYNCHRONIZATION"):
            db.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_{table}")
        db.execute("DELETE FROM NVTX_EVENTS")
        pid = kernel[kcols.index("globalPid")]
        tid = pid + 1
        t, corr, kernels, launches, ranges = 10**9, 1, [], [], []
        for step, sequence in enumerate(steps, 1):
            first = t
            for name in sequence:
                k = dict(zip(kcols, kernel, strict=True)) | {
                    "start": t + LAUNCH_AHEAD_NS, "end": t + LAUNCH_AHEAD_NS + KERNEL_NS - 500,
                    "correlationId": corr, "demangledName": name, "shortName": name}
                r = dict(zip(rcols, launch, strict=True)) | {
                    "start": t, "end": t + 2_000, "correlationId": corr, "globalTid": tid}
                kernels.append(tuple(k.values()))
                launches.append(tuple(r.values()))
                t, corr = t + KERNEL_NS, corr + 1
            ranges.append((first, t + LAUNCH_AHEAD_NS, f"ProfilerStep#{step}", tid))
            t += BETWEEN_STEPS_NS
        db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                       f"({', '.join('?' * len(kcols))})", kernels)
        db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES "
                       f"({', '.join('?' * len(rcols))})", launches)
        db.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid) '
                       "VALUES (?, ?, 59, ?, ?)", ranges)
    return out


def _kernel_names(count: int) -> list[int]:
    """StringIds ids of ``count`` distinct kernel names of the real capture."""
    with sqlite3.connect(NSYS_H100) as db:
        return [i for (i,) in db.execute("SELECT DISTINCT demangledName FROM "
                                         f"CUPTI_ACTIVITY_KIND_KERNEL LIMIT {count}")]


def _adam_id(path: Path) -> int:
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO StringIds VALUES (999999, ?)", (ADAM,))
    return 999999


def _unmarked(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'")
    return path


def _assert_found_as_marked(path: Path, method: str) -> None:
    (marked,) = read_nsys(path)
    want = find_steps(marked)
    (trace,) = read_nsys(_unmarked(path))
    got = find_steps(trace)
    assert any(method in n for n in trace.notes)
    assert got.source == want.source == "ProfilerStep" and len(got) == len(want) == STEPS
    kernel_starts = np.sort(trace.events.ts[trace.events.kind == Kind.KERNEL])
    for a, b in zip(got.starts.tolist() + got.ends.tolist(),
                    want.starts.tolist() + want.ends.tolist(), strict=True):
        between = np.count_nonzero((kernel_starts > min(a, b)) & (kernel_starts < max(a, b)))
        assert between <= 1, (a, b)


def test_steps_from_the_optimizers_kernels_match_the_marked_ones(tmp_path):
    path = tmp_path / "adam.sqlite"
    names = _kernel_names(LAYER)
    shutil.copyfile(NSYS_H100, path)
    adam = _adam_id(path)
    # the layers' kernels in a different order each step (no period to find), then the
    # optimizer's run of kernels
    random.seed(1)
    steps = [[*random.sample(names, len(names)), adam, adam, adam] for _ in range(STEPS)]
    _assert_found_as_marked(_loop(path, steps, keep_strings=True), "optimizer's kernels")


def test_steps_from_the_period_of_the_kernel_sequence_match_the_marked_ones(tmp_path):
    steps = [_kernel_names(LAYER)] * STEPS
    _assert_found_as_marked(_loop(tmp_path / "period.sqlite", steps), "period")


def test_a_random_kernel_sequence_is_one_window_with_a_note(tmp_path):
    random.seed(2)
    names = _kernel_names(LAYER)
    path = _unmarked(_loop(tmp_path / "random.sqlite", [random.choices(names, k=LAYER * STEPS)]))
    (trace,) = read_nsys(path)
    steps = find_steps(trace)
    assert steps.source == "whole trace" and len(steps) == 1
    assert "whole trace is one window" in steps.notes[0]
    assert not any("step(s) found" in n for n in trace.notes)


@pytest.mark.parametrize("path", [NSYS_H100], ids=["h100"])
def test_a_models_repeated_layers_are_not_steps(path):
    # The capture repeats a 62-kernel block (0.91 of the names match 62 kernels later): layers
    # of one forward pass, not steps.
    for trace in read_nsys(path):
        assert find_steps(trace).source == "whole trace"
