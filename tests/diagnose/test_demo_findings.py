"""`trainprof demo`: its recorded run is diagnosed as data-bound, and the report opens on it."""

from __future__ import annotations

import json

import pytest
import torch

from trainprof.cli import main


@pytest.mark.slow
def test_demo_output_opens_with_the_data_loading_finding_on_top(tmp_path, capsys):
    threads = torch.get_num_threads()
    assert main(["demo", "--out", str(tmp_path), "--steps", "8"]) == 0
    assert torch.get_num_threads() == threads  # the demo's single thread is given back
    lines = capsys.readouterr().out.splitlines()
    # A few lines say what the demo did; the report opens on the verdict, as every report does.
    # (How many lines that is depends on the width and the temporary folder's path, which wraps.)
    top = next(i for i, line in enumerate(lines) if "Findings, most costly first" in line)
    intro = "".join(lines[:top])
    assert intro.startswith("Training a small model") and intro.endswith("analysis.json."), intro
    assert not any("│" in line for line in lines[:top]), lines[:top]
    assert "1. [high] Waiting for data takes" in lines[top + 1], lines[:top + 3]
    out = "\n".join(lines)
    verdict = out[:out.index("╯")]
    assert "Where the step time goes" not in verdict and "Where the step time goes" in out
    assert "Saving estimate:" in verdict and "num_workers=4" in verdict  # the top fix's code
    findings = json.loads((tmp_path / "analysis.json").read_text())["findings"]
    assert findings[0]["id"] == "data_loading" and findings[0]["severity"] == "high", [
        (f["id"], f["saving_pct"]) for f in findings]
