"""Step timer summaries into the history: `StepTimer(history=...)`, `history.record(timer)`,
`trainprof run --record`, and a damaged database that must not stop training."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

import trainprof
import trainprof.history as history
from trainprof.history.store import pending
from trainprof.history.store.sources import from_timer_record
from trainprof.history.views.regress import series_of

from capture_helpers import TinyTraining, ddp_script, run_python, run_torchrun

STEPS = 12


def train(timer, training) -> None:
    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(STEPS)]
    for x, y in timer.wrap(batches):
        training.step(x, y)


def test_a_step_timer_records_its_summary_and_every_step(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPROF_HISTORY_DB", str(tmp_path / "h.db"))
    training = TinyTraining()
    with trainprof.StepTimer(training.model, training.optimizer, log_every=None,
                             history="tiny") as timer:
        train(timer, training)
    summary = timer.summary()
    (row,) = history.History().runs(name="tiny")
    assert row.kind == "step_timer" and row.steps == summary["steps"] == STEPS - 1
    assert row.step_times_ms == pytest.approx(timer.step_times_ms(), rel=1e-5)  # float32
    assert row.step_ms_median == summary["step_ms"]["median"]
    assert row.samples_per_s == pytest.approx(summary["samples_per_s"])
    assert row.samples_per_step == pytest.approx(8.0, rel=1e-3)
    assert row.phases_ms == summary["phases_ms"]
    assert row.rank == 0 and row.world_size == 1 and row.devices == "CPU"
    assert row.extra["flops_per_step"] == summary["flops_per_step"]
    timer.close()  # closing again records nothing more
    assert len(history.History().runs()) == 1


def test_history_record_takes_the_timer_itself(tmp_path):
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, log_every=None)
    train(timer, training)
    run_id = history.record(timer, name="by-hand", db=tmp_path / "h.db", git_commit="abc")
    row = history.History(tmp_path / "h.db").get(run_id)
    assert (row.name, row.git_commit, len(row.step_times_ms)) == ("by-hand", "abc", STEPS - 1)
    timer.close()


def test_a_damaged_database_warns_once_and_training_finishes(tmp_path, monkeypatch):
    db = tmp_path / "h.db"
    db.write_bytes(b"not sqlite " * 500)
    monkeypatch.setenv("TRAINPROF_HISTORY_DB", str(db))
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, log_every=None,
                                history="kept")
    with pytest.warns(trainprof.RecordingWarning) as caught, timer:
        train(timer, training)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1
    assert "damaged" in messages[0] and str(pending.pending_path(db)) in messages[0]
    assert training.steps_done == STEPS
    (line,) = pending.pending_path(db).read_text().splitlines()
    assert json.loads(line)["name"] == "kept" and len(json.loads(line)["step_times_ms"]) == 11


SCRIPT = textwrap.dedent(
    """
    import time
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    class SlowData(torch.utils.data.Dataset):
        def __len__(self):
            return 8 * 20

        def __getitem__(self, i):
            if i % 8 == 0:
                time.sleep(0.01)
            return torch.randn(16), i % 4

    for x, y in torch.utils.data.DataLoader(SlowData(), batch_size=8):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """
)


@pytest.mark.slow
def test_trainprof_run_records_the_timer_and_the_trace_findings(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    result = run_python(["-m", "trainprof", "run", "--record", "--live", "--db", "h.db",
                         "--out", "traces", "--", "train.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trainprof: recorded as history:1 in h.db" in result.stderr
    (row,) = history.History(tmp_path / "h.db").runs()
    assert (row.name, row.kind, row.steps) == ("train", "run", 19)  # the first is warm-up
    assert row.phases_ms["data"] >= 9.0  # every DataLoader batch timed, 10 ms to make each
    assert row.samples_per_s is not None and row.samples_per_step == pytest.approx(8.0, rel=1e-3)
    assert row.top_finding["id"] == "data_loading"  # from the trace's analysis
    live = [line for line in result.stderr.splitlines() if line.startswith("trainprof step 19:")]
    assert live and "samples/s" in live[0]  # --live without a terminal: the final log line


DDP_SCRIPT = ddp_script(10)


@pytest.mark.slow
def test_every_rank_of_a_torchrun_job_records_and_the_job_is_one_point(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    result = run_torchrun(
        ["--nproc_per_node=2",
         "-m", "trainprof", "run", "--record", "--db", "h.db", "--out", "traces",
         "--wait", "1", "--warmup", "1", "--active", "2", "--", "ddp.py"],
        cwd=tmp_path, timeout=180, outputs=(tmp_path / "traces", tmp_path / "h.db"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = history.History(tmp_path / "h.db").runs()
    assert sorted(r.rank for r in rows) == [0, 1] and {r.world_size for r in rows} == {2}
    assert len({r.job for r in rows}) == 1 and rows[0].job.startswith("torchelastic:")
    assert [bool(r.findings) for r in sorted(rows, key=lambda r: r.rank)] == [True, False]
    (series,) = series_of(rows)
    assert [sorted(p.ids) for p in series.points] == [[1, 2]]  # one job, one point
    # The job's cluster_summary.json (docs/distributed.md) is recorded as it is written.
    summary = tmp_path / "traces" / "cluster_summary.json"
    run_id = history.record(summary, db=tmp_path / "h.db")
    job = history.History(tmp_path / "h.db").get(run_id)
    assert (job.name, job.kind, job.world_size) == ("traces", "cluster", 2)
    assert [rank for rank, _ in job.step_ranks] == [0, 1] and job.steps == len(job.step_times_ms)
    assert job.findings == [{k: f.get(k) for k in ("id", "severity", "title", "saving_pct", "rank")}
                            for f in json.loads(summary.read_text())["findings"]]


def test_the_timer_hands_a_plain_record_and_capture_never_loads_the_history():
    code = textwrap.dedent(
        """
        import json, sys
        import torch
        from trainprof.capture.steps import StepTimer

        model = torch.nn.Linear(4, 2)
        timer = StepTimer(model, torch.optim.SGD(model.parameters(), lr=0.1), log_every=None)
        for x in timer.wrap([torch.randn(3, 4) for _ in range(5)]):
            model(x).sum().backward()
        timer.close()
        plain = timer.to_run_record()
        loaded = sorted(m for m in sys.modules if m.startswith(("trainprof.history",
                                                               "trainprof.report")))
        print(json.dumps({"plain": plain, "loaded": loaded}))
        """
    )
    result = run_python(["-c", code], cwd=Path.cwd())
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])  # JSON: plain data through and through
    assert out["loaded"] == []
    plain = out["plain"]
    assert (plain["rank"], plain["world_size"], plain["devices"]) == (0, 1, "CPU")
    assert len(plain["step_times_ms"]) == plain["summary"]["steps"] == 4
    row = from_timer_record(plain, "plain")  # what history.record does with a timer
    assert row.kind == "step_timer" and row.step_times_ms == pytest.approx(plain["step_times_ms"])
    assert row.step_ms_median == plain["summary"]["step_ms"]["median"]
