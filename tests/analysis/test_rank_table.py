"""The per-rank table: each rank's own figures, windows pooled, marks, and the cut for big jobs."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import trainprof
from trainprof.analysis.job.rank_table import SHOWN_ROWS, rank_table
from trainprof.report.markdown.report import to_markdown
from trainprof.report.terminal.report import print_analysis

from helpers.paths import TRACE_FILTER
from helpers.tracegen import TraceBuilder
from rank_scenarios import gpu_rank


def test_rows_are_each_ranks_own_figures():
    analysis = trainprof.analyze(TRACE_FILTER)
    table = analysis.job.rank_table
    for row, r in zip(table.rows, analysis.ranks, strict=True):
        comm = r.sections.communication
        assert row.rank == r.rank and row.steps == r.steps.count and row.windows == 1
        assert row.step_ms == pytest.approx(r.steps.median_ms)
        assert row.phases_ms == pytest.approx(r.phases_ms)
        assert row.comm_ms == pytest.approx(comm.busy_us / comm.steps / 1000)
        assert row.exposed_comm_ms == pytest.approx(comm.exposed_us / comm.steps / 1000)
        assert (row.idle_pct, row.idle_of) == (pytest.approx(r.timeline.idle_pct), "GPU")
    slow, fast = sorted(table.rows, key=lambda x: -x.step_ms)
    assert (slow.mark, fast.mark) == ("slowest", "fastest")
    assert (table.slowest, table.fastest) == (slow.rank, fast.rank)


def cpu_window(path, steps: int, step_us: float, data_us: float) -> None:
    """A CPU-only rank's window: each step waits ``data_us`` for data, then an op fills 60%
    of the rest; the remaining time no op covers."""
    b = TraceBuilder()
    b.metadata["distributedInfo"] = {"rank": 0, "world_size": 1}
    for n in range(steps):
        t = n * step_us
        b.step(n, t, step_us)
        b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, data_us)
        b.op("aten::mm", t + data_us, 0.6 * (step_us - data_us))
    b.write(path)


def test_windows_are_pooled_by_their_steps(tmp_path):
    cpu_window(tmp_path / "rank0.step3.json", steps=3, step_us=1000, data_us=100)
    cpu_window(tmp_path / "rank0.step9.json", steps=1, step_us=2000, data_us=900)
    (row,) = trainprof.analyze(tmp_path).job.rank_table.rows
    assert (row.windows, row.steps, row.mark) == (2, 4, "")
    assert row.step_ms == pytest.approx(1.0)  # the median of 1, 1, 1, 2 ms
    assert row.phases_ms["data"] == pytest.approx((3 * 0.1 + 0.9) / 4)
    other_ms = (3 * 0.4 * 0.9 + 0.4 * 1.1) / 4  # no op: 40% of what the data wait leaves
    assert row.idle_of == "host"
    assert row.idle_pct == pytest.approx(other_ms / ((3 * 1 + 2) / 4) * 100)
    assert row.comm_ms == row.exposed_comm_ms == 0.0  # no collectives


def test_a_big_job_shows_the_slowest_fastest_and_straggler(tmp_path):
    ranks = SHOWN_ROWS + 8
    for rank in range(ranks):
        b = gpu_rank(rank, {"data loading": 400} if rank == 7 else None)
        b.metadata["distributedInfo"]["world_size"] = ranks
        b.write(tmp_path / f"rank{rank}.json")
    analysis = trainprof.analyze(tmp_path)
    table = analysis.job.rank_table
    assert len(table.rows) == ranks and len(table.to_dict()["rows"]) == ranks
    shown = table.shown(keep=(7,))
    assert SHOWN_ROWS <= len(shown) <= SHOWN_ROWS + 1 and 7 in [r.rank for r in shown]
    console = Console(file=io.StringIO(), width=120, record=True)
    print_analysis(analysis, console)
    text = console.export_text()
    assert f"of {ranks} ranks: the slowest, the fastest and the straggler" in text
    assert any(line.split()[:1] == ["7"] and "straggler" in line for line in text.splitlines())
    assert "Details of the straggler: rank 7" in text
    md = to_markdown(analysis)
    assert "| 7 |" in md and "**straggler**" in md and f"of {ranks} ranks" in md


def test_rank_table_without_steps():
    assert rank_table([]).rows == []
