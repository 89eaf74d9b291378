"""Collective bus bandwidth per rank (a job section), on two synthetic ranks."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import trainprof
from trainprof.report.sections import collective_ranks
from trainprof.report.sections.view import ViewContext

from helpers.tracegen import TraceBuilder

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9}
MIB = 2**20


def _rank(folder, rank: int, kernel_us: list[float]) -> None:
    """Per step one 64 MiB bf16 all-reduce over 8 ranks taking ``kernel_us[step]``."""
    b = TraceBuilder()
    b.metadata.update(deviceProperties=[H100],
                      distributedInfo={"backend": "nccl", "rank": rank, "world_size": 8})
    for n, us in enumerate(kernel_us):
        t = n * 10_000
        b.step(n, t, 10_000)
        b.op("record_param_comms", t + 5, 50, args={
            "Collective name": "allreduce", "In msg nelems": 32 * MIB,
            "Out msg nelems": 32 * MIB, "Group size": 8, "dtype": "BFloat16"})
        b.launch(t + 10, 5, k_ts=t + 20, k_dur=us, name="ncclDevKernel_AllReduce_Sum_bf16")
    b.write(folder / f"rank{rank}.pt.trace.json")


def test_the_rank_with_the_slow_link_stands_out(tmp_path):
    _rank(tmp_path, 0, [400.0, 400.0])
    _rank(tmp_path, 1, [400.0, 1200.0])
    job = trainprof.analyze(tmp_path, workers=1).job.collective_ranks
    bus = 64 * MIB * 1.75  # all-reduce over 8: 2(n-1)/n
    fast, slow = job.rows
    assert (fast.rank, fast.calls, fast.time_us) == (0, 2, 800.0)
    assert fast.busbw_gb_s == pytest.approx(2 * bus / 800.0 / 1e3)
    # Time-weighted: (b/400 x 400 + b/1200 x 1200) / 1600 = 2b / 1600.
    assert slow.busbw_gb_s == pytest.approx(2 * bus / 1600.0 / 1e3)
    assert slow.pct_of_peak == pytest.approx(slow.busbw_gb_s / 450 * 100)
    assert job.slowest is slow and job.to_dict()["slowest_rank"] == 1
    out = io.StringIO()
    shown = collective_ranks.text(job, ViewContext())
    Console(file=out, width=120, color_system=None).print(shown)
    lines = out.getvalue().splitlines()
    line = next(x for x in lines if x.lstrip().startswith("1 "))
    assert "slowest" in line and f"{slow.busbw_gb_s:.1f}" in line and "1.60 ms" in line
    assert "800 µs" in next(x for x in lines if x.lstrip().startswith("0 "))


def test_one_rank_shows_no_table(tmp_path):
    _rank(tmp_path, 0, [400.0])
    job = trainprof.analyze(tmp_path, workers=1).job.collective_ranks
    assert len(job.rows) == 1 and collective_ranks.text(job, ViewContext()) is None


def test_html_lists_each_rank_with_the_slowest_marked(tmp_path):
    from trainprof.report.html.report import render_html

    _rank(tmp_path, 0, [400.0, 400.0])
    _rank(tmp_path, 1, [400.0, 1200.0])
    html = render_html(trainprof.analyze(tmp_path, workers=1))
    heading = "<h3>Collectives&#39; bus bandwidth per rank</h3>"  # the template escapes it
    part = html.split(heading, 1)[1].split("</table>")[0]
    assert part.count("<tr") == 3  # the head and two ranks
    assert "slowest" in part.split("<tr")[-1]
