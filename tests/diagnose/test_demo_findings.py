"""`trainprof demo`: its recorded run is diagnosed as data-bound, and the output ends with it."""

from __future__ import annotations

import json

import pytest
import torch

from trainprof.cli import main


@pytest.mark.slow
def test_demo_output_ends_with_the_data_loading_finding_on_top(tmp_path, capsys):
    threads = torch.get_num_threads()
    assert main(["demo", "--out", str(tmp_path), "--steps", "8"]) == 0
    assert torch.get_num_threads() == threads  # the demo's single thread is given back
    out = capsys.readouterr().out
    verdict = out[out.rindex("Findings, most costly first"):]
    assert "Where the step time goes" in out and "Where the step time goes" not in verdict
    first = verdict.split("\n")[1]
    assert "1. [high] Waiting for data takes" in first, verdict
    assert verdict.rstrip().endswith("╯")  # nothing after the findings panel
    assert "Saving estimate:" in verdict and "num_workers=4" in verdict  # the top fix's code
    findings = json.loads((tmp_path / "analysis.json").read_text())["findings"]
    assert findings[0]["id"] == "data_loading" and findings[0]["severity"] == "high", [
        (f["id"], f["saving_pct"]) for f in findings]
