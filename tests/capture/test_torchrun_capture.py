"""torchrun with two gloo ranks: one trace file per rank, each saying which rank it is."""

from __future__ import annotations

import pytest

from capture_helpers import ddp_script, read_trace, run_torchrun, trace_names

DDP_SCRIPT = ddp_script(6)


@pytest.mark.slow
def test_torchrun_two_ranks_write_one_file_each(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    result = run_torchrun(
        ["--nproc_per_node=2",
         "-m", "trainprof", "run", "--out", "traces", "--wait", "1", "--warmup", "1", "--active", "2",
         "--", "ddp.py"],
        cwd=tmp_path, timeout=180, outputs=(tmp_path / "traces",),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert trace_names(tmp_path / "traces") == ["cluster_summary.json",  # docs/distributed.md
                                                "rank0.step3.pt.trace.json.gz", "rank1.step3.pt.trace.json.gz"]
    for rank in (0, 1):
        trace = read_trace(tmp_path / "traces" / f"rank{rank}.step3.pt.trace.json.gz")
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == 2
        assert any(e.get("name", "").startswith("gloo:all_reduce") for e in trace["traceEvents"])
    # only rank 0 prints the analysis, after both files are there
    assert result.stderr.count("trace file(s) in traces") == 1
    assert "2 trace file(s)" in result.stderr
