"""An Nsight Systems export streamed within ``--max-memory``: read in pieces of each table,
spilled per rank and analysed window by window, it gives what the whole read gives."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analysis.test_streamed import assert_close, in_memory
from trainprof import analyze
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.streaming.streamed import _analysis, recorded_steps, streamed_steps
from trainprof.trace.model import Kind
from trainprof.trace.nsys.detect import read_nsys
from trainprof.trace.nsys.spill import spilled_export

from helpers.paths import NSYS_EXPORTS, NSYS_H100

#: Rows of a table per piece in these tests: every table of the H100 capture in several pieces.
PIECE = 700
STEPS = 3
DEVICE = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


@pytest.fixture(scope="module")
def stepped(tmp_path_factory) -> Path:
    """The 2xH100 capture cut into ``STEPS`` steps: NVTX push/pop ranges ``train_step``
    (unnumbered: numbered in time order) on each process's launching thread, in the table's
    own definition (nsys 2026.2), inserted last first (the table's order is not the time order).
    In the capture the host runs hundreds of ms ahead of the GPU, so that no step marker could
    bound a step's device work (a step's kernels would run two steps later); here torch's op
    ranges are dropped and CUDA calls cut to at most 1 µs (they would span several steps: a
    window sees one step before its own, analysis/streaming/windows.py), and each kernel's
    launch (and each copy's) is moved to 5 µs before the device work starts, as in a step that waits for its GPU."""
    out = tmp_path_factory.mktemp("stepped") / "stepped.sqlite"
    shutil.copyfile(NSYS_H100, out)
    with sqlite3.connect(out) as db:
        db.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME AS r SET start = k.start - 5000, '
                   '"end" = k.start - 4000 FROM (SELECT globalPid, correlationId, start FROM '
                   f"{' UNION ALL SELECT globalPid, correlationId, start FROM '.join(DEVICE)}) "
                   "AS k WHERE k.correlationId = r.correlationId AND k.globalPid = "
                   "r.globalTid >> 24 << 24")
        db.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = min("end", start + 1000)')
    launches = _sql(out, "SELECT r.globalTid, r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
                         "CUPTI_ACTIVITY_KIND_KERNEL k USING (correlationId) ORDER BY 1, 2")
    ranges = []
    for tid in sorted({t for t, _ in launches}):
        starts = [s for t, s in launches if t == tid]
        cuts = [starts[i * len(starts) // STEPS] - 1 for i in range(STEPS)] + [starts[-1] + 10**6]
        ranges += [(a, b - 1, tid) for a, b in reversed(list(zip(cuts[:-1], cuts[1:],
                                                                 strict=True)))]
    with sqlite3.connect(out) as db:
        db.execute("DELETE FROM NVTX_EVENTS")
        db.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid) '
                       "VALUES (?, ?, 59, 'train_step', ?)", ranges)
    return out


def _equal_streamed(path: Path, tmp_path: Path, pers: dict[int, int]) -> None:
    """The streamed analysis of each rank in ``pers`` in windows of that many steps equals the
    whole read's (the other ranks are spilled, not analysed: a few seconds saved)."""
    traces = read_nsys(path)
    with spilled_export(path, tmp_path, piece_rows=PIECE) as ranks:
        assert [s.rank for s in ranks] == [t.rank for t in traces]
        for trace, spilled in zip(traces, ranks, strict=True):
            assert sum(p.rows["events"] for p in spilled.pieces) == len(trace.events)
            if trace.rank not in pers:
                continue
            want_steps = find_steps(trace)
            want = in_memory(trace, want_steps)
            notes = want.pop("notes")
            recorded = recorded_steps(spilled)
            for per in (pers[trace.rank],):
                steps = streamed_steps(spilled, recorded, per)
                assert steps.source == want_steps.source and steps.notes == want_steps.notes
                assert np.array_equal(steps.numbers, want_steps.numbers)
                got = _analysis(spilled, steps, per).to_dict()
                streamed_note = got.pop("notes")
                assert streamed_note[:-1] == notes and streamed_note[-1].startswith("Streamed")
                assert_close(got, want, f"{path.name} rank {trace.rank} per {per}")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_a_streamed_export_equals_the_whole_read(path, tmp_path):
    _equal_streamed(path, tmp_path, {0: 1})


def _kernel_time(spilled) -> tuple[int, float]:
    """(kernels, their time in ns) in a rank's spill."""
    count, total = 0, 0.0
    for piece in spilled.pieces:
        kernel = piece.column("events", "kind") == Kind.KERNEL
        count += int(kernel.sum())
        total += float(piece.column("events", "dur")[kernel].sum()) * 1000
    return count, total


def test_streamed_steps_are_numbered_in_time_order_across_pieces(stepped, tmp_path):
    kernels = _sql(stepped, 'SELECT count(*), sum("end" - start) FROM '
                            "CUPTI_ACTIVITY_KIND_KERNEL GROUP BY globalPid ORDER BY 1, 2")
    with spilled_export(stepped, tmp_path, piece_rows=PIECE) as ranks:
        for spilled in ranks:
            assert len(spilled.pieces) > 6  # every table in several pieces
            markers = spilled.markers
            steps = np.flatnonzero(markers.kind == Kind.STEP)
            assert [markers.names[markers.name[i]] for i in steps] == \
                [f"ProfilerStep#{n}" for n in range(1, STEPS + 1)]
            assert np.all(np.diff(markers.ts[steps]) > 0)
        got = sorted(_kernel_time(s) for s in ranks)
        for (count, ns), (want_count, want_ns) in zip(got, kernels, strict=True):
            assert count == want_count and ns == pytest.approx(want_ns, abs=1e-3 * count)
    _equal_streamed(stepped, tmp_path, {1: 2})


def test_max_memory_streams_an_export_with_the_same_findings(stepped):
    whole = analyze(stepped, workers=1).to_dict()
    streamed = analyze(stepped, workers=1, max_memory=1).to_dict()
    for rank in streamed["ranks"]:
        assert rank["notes"].pop().startswith("Streamed (trace larger than the memory budget)")
    assert_close(streamed, whole)
    assert len(whole["ranks"]) == 2 and whole["findings"]
    assert all(r["steps"]["count"] == STEPS for r in whole["ranks"])


def test_steps_found_from_the_kernels_stream_as_read_whole(tmp_path):
    from test_nsys_repeating import LAYER, _kernel_names, _loop, _unmarked
    from test_nsys_repeating import STEPS as LOOP_STEPS

    path = _unmarked(_loop(tmp_path / "loop.sqlite", [_kernel_names(LAYER)] * LOOP_STEPS))
    assert find_steps(read_nsys(path)[0]).source == "ProfilerStep"
    spill = tmp_path / "spill"
    spill.mkdir()
    _equal_streamed(path, spill, {0: 2})


def _no_kernels(path: Path) -> None:
    shutil.copyfile(NSYS_EXPORTS[2], path)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")


@pytest.mark.parametrize(("make", "words"), [
    (_no_kernels, "records no CUDA kernels"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE t (a)"), "not an Nsight Systems export"),
    (lambda p: p.write_bytes(NSYS_EXPORTS[2].read_bytes()[:100_000]), "damaged"),
])
def test_a_bad_export_streamed_is_one_sentence_and_exit_2(tmp_path, capsys, make, words):
    from trainprof.cli import main

    path = tmp_path / "bad.sqlite"
    make(path)
    assert main(["analyze", str(path), "--max-memory", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_pool_counts_an_export_as_the_json_its_read_would_take():
    from trainprof.analysis.parallel.pool import (
        PEAK_BYTES_PER_JSON_BYTE,
        WORKER_BASE_BYTES,
        worker_count,
    )
    from trainprof.analysis.streaming.memory_budget import (
        IN_MEMORY_BYTES_PER_EXPORT_BYTE,
        json_equivalent,
    )

    size = NSYS_H100.stat().st_size
    peak = IN_MEMORY_BYTES_PER_EXPORT_BYTE * size  # an export's read, per byte of it
    assert json_equivalent(NSYS_H100) * PEAK_BYTES_PER_JSON_BYTE == pytest.approx(peak, abs=2)
    # room for three processes were the export counted as JSON of its own size, for two at
    # the memory its read takes
    available = 3 * (WORKER_BASE_BYTES + PEAK_BYTES_PER_JSON_BYTE * size)
    assert available // (WORKER_BASE_BYTES + peak) == 2
    assert worker_count([json_equivalent(NSYS_H100)] * 8, 8, int(available)) == 2
