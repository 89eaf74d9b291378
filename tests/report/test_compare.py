"""`trainprof compare`: deltas of the ResNet DataLoader fix, the CI gate and its confidence,
and saved JSON results as inputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from report_helpers import analysis_of

from trainprof.commands.compare import compare
from trainprof.report.compare import render_markdown
from trainprof.report.json import write_json
from trainprof.stats import slowdown_odds

from helpers.paths import RESNET_W0, RESNET_W4, ROOT, TRACE_FILTER


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainprof", "compare", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_dataloader_fix_shows_as_faster_with_the_data_delta():
    c = compare(analysis_of(RESNET_W0), analysis_of(RESNET_W4), fail_if_slower=5,
                batch_size=(32, 32))
    assert c.new.median_ms < c.base.median_ms * 0.8
    assert c.new.samples_per_s == pytest.approx(32 * 1000 / c.new.median_ms)
    loader = c.diff.breakdown_ms["dataloader"]
    assert loader.base > 40 and loader.delta < -40 and loader.delta_pct < -90
    assert c.diff.phases_ms["data"].delta < -40
    assert ("aten::_cat", "removed") in [(o.name, o.change) for o in c.diff.ops]
    assert not c.gate.failed and c.gate.odds.probability < 0.1
    assert c.gate.message().startswith("OK: NEW's median step is")


def test_swapped_runs_fail_the_gate_with_a_confidence():
    c = compare(analysis_of(RESNET_W4), analysis_of(RESNET_W0), fail_if_slower=5)
    assert c.gate.failed and c.gate.odds.change_pct > 25
    assert c.gate.odds.probability > 0.9 and c.gate.odds.words in ("very likely", "almost certain")
    message = c.gate.message()
    assert message.startswith("FAIL:") and "90% interval" in message
    assert "Few steps" not in message  # 6 steps each
    data = c.to_dict()
    assert data["gate"]["failed"] and data["step_ms"]["delta"] > 0
    md = render_markdown(c)
    assert md.count("**FAIL:") == 1 and "| DataLoader |" in md


def test_saved_json_results_compare_like_traces(tmp_path):
    saved = write_json(analysis_of(RESNET_W0), tmp_path / "base.json")
    from_json = compare(saved, analysis_of(RESNET_W4))
    from_trace = compare(analysis_of(RESNET_W0), analysis_of(RESNET_W4))
    assert from_json.base.step_ms == from_trace.base.step_ms
    assert from_json.diff.breakdown_ms["dataloader"].delta == pytest.approx(
        from_trace.diff.breakdown_ms["dataloader"].delta)
    assert [o.name for o in from_json.diff.ops[:10]] == [o.name for o in from_trace.diff.ops[:10]]


def test_cli_gate_exit_codes_on_saved_results(tmp_path):
    w0 = write_json(analysis_of(RESNET_W0), tmp_path / "w0.json")
    w4 = write_json(analysis_of(RESNET_W4), tmp_path / "w4.json")
    slower = run_cli(str(w4), str(w0), "--fail-if-slower", "5", "--format", "json")
    assert slower.returncode == 1, slower.stderr
    assert slower.stderr.startswith("FAIL: NEW's median step is")
    data = json.loads(slower.stdout)
    assert data["schema"] == "trainprof.compare/1" and data["gate"]["failed"]
    assert data["base"]["per_step_ms"] and data["breakdown_ms"]["dataloader"]["delta"] > 40
    faster = run_cli(str(w0), str(w4), "--fail-if-slower", "5")
    assert faster.returncode == 0, faster.stderr
    assert "Where the step time goes" in faster.stdout and "OK: NEW" in faster.stdout


def test_cli_compares_trace_files_in_markdown(tmp_path):
    out = tmp_path / "compare.md"
    proc = run_cli(str(RESNET_W4), str(RESNET_W0), "--format", "md", "-o", str(out),
                   "--fail-if-slower", "50")
    assert proc.returncode == 0 and proc.stdout == ""
    wrote, verdict = proc.stderr.splitlines()
    assert wrote == f"trainprof: wrote {out}"
    assert verdict.startswith("OK: NEW's median step is")  # slower, but within 50%
    assert out.read_text().startswith("## trainprof compare: worker0")


def test_bad_input_is_one_sentence(tmp_path):
    proc = run_cli(str(tmp_path / "missing"), str(RESNET_W0))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_odds_of_a_slowdown():
    same = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8]
    odds = slowdown_odds(same, same, 5.0)
    assert odds.change_pct == 0 and odds.probability == 0 and odds.words == "very unlikely"
    slower = [x * 1.2 for x in same]
    odds = slowdown_odds(same, slower, 5.0)
    assert odds.change_pct == pytest.approx(20) and odds.words == "almost certain"
    noisy = slowdown_odds([100, 60, 140], [106, 50, 160], 5.0)
    assert 0.1 < noisy.probability < 0.9 and noisy.rough
    assert slowdown_odds([], same, 5.0) is None


def test_ranks_of_one_step_are_resampled_together():
    """Eight ranks that wait for each other repeat the same step times: that is no more
    evidence than one rank, so the interval must not shrink (it would, pooled)."""
    base = [100.0, 104.0, 97.0, 110.0, 99.0, 102.0, 95.0, 108.0]
    new = [x * 1.04 for x in base]
    one_rank = slowdown_odds(base, new, 5.0)
    ranks = 8
    steps = [n for n in range(len(base)) for _ in range(ranks)]
    together = slowdown_odds([b for b in base for _ in range(ranks)],
                             [w for w in new for _ in range(ranks)], 5.0, steps, steps)
    pooled = slowdown_odds([b for b in base for _ in range(ranks)],
                           [w for w in new for _ in range(ranks)], 5.0)
    assert together.change_pct == pytest.approx(one_rank.change_pct)
    assert (together.low_pct, together.high_pct) == pytest.approx(
        (one_rank.low_pct, one_rank.high_pct))
    assert together.base_steps == len(base) and together.rough == one_rank.rough
    assert pooled.high_pct - pooled.low_pct < (together.high_pct - together.low_pct) / 2


def test_uneven_ranks_keep_the_pooled_median():
    times = [10.0, 11.0, 30.0, 12.0, 13.0]
    odds = slowdown_odds(times, [t * 2 for t in times], 5.0, [0, 0, 0, 1, 2], [0, 0, 0, 1, 2])
    assert odds.change_pct == pytest.approx(100.0)  # medians 12 -> 24 over every value
    assert odds.base_steps == odds.new_steps == 3 and odds.rough


def test_multi_rank_gate_says_how_it_resampled():
    c = compare(TRACE_FILTER, TRACE_FILTER, fail_if_slower=5)
    assert c.base.ranks == 2 and len(c.base.step_ms) == 4
    assert c.gate.odds.base_steps == 2 and not c.gate.failed
    assert "2 + 2 steps, the ranks of a step together" in c.gate.message()


def test_terminal_tables_fit_80_columns_and_keep_every_number():
    import io

    from rich.console import Console

    from trainprof.report.compare import _name_us, render_text

    c = compare(analysis_of(RESNET_W0), analysis_of(RESNET_W4))
    console = Console(width=80, record=True, file=io.StringIO())
    render_text(c, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    kernels = text[text.index("Kernels that changed most"):]
    top = c.diff.kernels[0]
    row = next(line for line in kernels.splitlines() if f"{top.delta_us:+,.0f}" in line)
    base, new = (f"{v:,.0f}" for v in _name_us(top))
    assert top.change in row and f" {base} " in row and f" {new} " in row  # nothing cut
    assert "void " not in kernels and "…" in kernels  # short names, cut to fit


def test_one_step_runs_make_no_claim_of_confidence():
    odds = slowdown_odds([100.0], [101.0], 5.0)
    assert not odds.judged and odds.words == "unknown"
    c = compare(analysis_of(RESNET_W0), analysis_of(RESNET_W0), fail_if_slower=5)
    c.gate.odds = odds
    message = c.gate.message()
    assert "cannot be told from 1 + 1 steps" in message and "unlikely" not in message
    assert c.gate.to_dict()["confidence"] == "unknown"
