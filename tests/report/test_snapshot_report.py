"""The memory-snapshot section of the HTML report: a snapshot alone, snapshots beside traces,
our own timeline drawing, and every string from a snapshot escaped."""

from __future__ import annotations

import json
import pickle
import re

import pytest
from report_helpers import IMG_PAYLOAD, SCRIPT_PAYLOAD

from trainprof.commands.report import report_result
from trainprof.report.html.report import render_html, write_html
from trainprof.trace.snapshot import SnapshotError

from helpers.snapshotgen import MiB
from helpers.snapshotgen import leaky_snapshot as leaky_run
from helpers.tracegen import TraceBuilder

#: Anything that would make a browser fetch (as in test_html.py): no CDN viewer here.
FETCHES = re.compile(r"<(?:link|img|iframe|object|embed)\b|\bsrc=|@import|url\(|\bimport\b",
                     re.IGNORECASE)
BREAKDOWN = {"device": "cuda:0", "peak_source": "max_memory_allocated", "notes": [],
             "bytes": {"parameters": 40 * MiB, "gradients": 40 * MiB,
                       "optimizer_state": 80 * MiB, "activations": 40 * MiB, "peak": 200 * MiB},
             "rows": [{"category": "optimizer_state", "device": "cuda:0", "dtype": "float32",
                       "bytes": 80 * MiB, "tensors": 4}],
             "optimizer_state_keys": {"exp_avg": 40 * MiB, "exp_avg_sq": 40 * MiB},
             "optimizer_state_per_parameter": 2.0}
KEY = {"rank": 1, "reason": "cycle", "step": 5, "memory_breakdown": BREAKDOWN}


def leaky_snapshot(site: str = "/job/train.py") -> dict:
    """Six steps that each keep 3 MiB; frames from `site`; trainprof's own key with a breakdown."""
    return leaky_run(KEY, site)


def write(path, data):
    path.write_bytes(pickle.dumps(data))
    return path


def test_a_snapshot_alone_makes_a_report_with_its_own_timeline(tmp_path):
    path = write(tmp_path / "rank1.step5.memory_snapshot.pickle", leaky_snapshot())
    html = write_html(report_result(path), tmp_path / "r.html").read_text()
    assert re.findall(r'<section id="([\w-]+)"', html) == ["verdict", "memory", "environment"]
    assert "Live memory grows by 3.1 MB every step on cuda:0 (memory snapshot)." in html
    memory = html[html.index('<section id="memory"'):html.index('<section id="environment"')]
    assert "recorded window ending at step 5" in memory and "rank 1" in memory
    timeline = memory[memory.index("Live allocations over time"):]
    assert timeline.count("<polyline") == 2  # live and reserved, drawn by us
    # the last step: 5 x 3 MiB kept before it, 3 x 8 MiB and its own 3 MiB at once = 42 MiB
    assert f"peak {42 * MiB / 1e6:.2f} MB live" in timeline
    assert "Where the memory goes (model and optimizer)" in memory
    assert "optimizer state: 40.0%" in memory  # the share bar's tooltip: 80 of 200 MiB
    assert "2.00 x the bytes of the parameters it updates" in memory
    assert "/job/train.py:42 in train_step" in memory and "Allocations per step" in memory
    assert "docs/rules.md#memory-growth" in memory
    assert not FETCHES.search(html)


def test_snapshots_beside_traces_add_a_section_to_the_trace_report(tmp_path):
    b = TraceBuilder()
    for n in range(3):
        b.step(n, n * 100.0, 100)
        b.op("aten::add", n * 100.0 + 5, 60)
    b.write(tmp_path / "rank0.step3.pt.trace.json.gz")
    write(tmp_path / "rank0.step3.memory_snapshot.pickle", leaky_snapshot())
    result = report_result(tmp_path)
    assert len(result["ranks"]) == 1 and len(result["memory_snapshots"]) == 1
    html = render_html(result)
    assert re.findall(r'<section id="([\w-]+)"', html) == ["verdict", "rank-0", "memory", "environment"]
    assert '<a href="#memory">Memory</a>' in html


def test_a_refused_snapshot_in_a_folder_is_a_note_not_a_failure(tmp_path):
    b = TraceBuilder()
    b.step(0, 0.0, 100)
    b.write(tmp_path / "rank0.pt.trace.json")
    from collections import OrderedDict

    write(tmp_path / "odd.pickle", OrderedDict(segments=[]))
    html = render_html(report_result(tmp_path))
    assert "Not read:" in html and "collections.OrderedDict" in html
    with pytest.raises(SnapshotError):
        report_result(tmp_path / "odd.pickle")
    assert "Memory snapshot" in render_html(report_result(tmp_path / "odd.pickle", trust=True))


def test_snapshot_strings_are_escaped_everywhere(tmp_path):
    snap = leaky_snapshot(site=IMG_PAYLOAD)
    snap["trainprof"]["memory_breakdown"]["rows"][0]["dtype"] = SCRIPT_PAYLOAD
    snap["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": SCRIPT_PAYLOAD}
    path = write(tmp_path / f"{IMG_PAYLOAD.replace('/', '_')}.pickle", snap)
    html = write_html(report_result(path), tmp_path / "r.html").read_text()
    for payload in (IMG_PAYLOAD, SCRIPT_PAYLOAD, "<img", "<script>window"):
        assert payload not in html
    assert html.count("<script") == 2  # the data block and our own script
    assert html.count("&lt;img src=x onerror=") >= 4  # source, sites, stacks, evidence
    data = html[html.index('id="trainprof-result">'):]
    data = json.loads(data[data.index(">") + 1:data.index("</script>")])
    assert data["memory_snapshots"][0]["live_sites"][0]["site"].startswith(IMG_PAYLOAD)


@pytest.mark.slow
def test_the_snapshot_report_renders_cleanly_in_chromium(tmp_path):
    from browser import Browser, open_page
    from report_helpers import need_chromium

    snap = leaky_snapshot(site=IMG_PAYLOAD)
    html_path = write_html(report_result(write(tmp_path / "s.pickle", snap)), tmp_path / "r.html")
    with Browser(need_chromium()) as browser:
        page = open_page(browser, html_path)
        assert page.exceptions == [] and page.console_errors == [] and page.dialogs == []
        assert page.requests == [html_path.resolve().as_uri()]  # nothing fetched
        assert page.evaluate("window.__pwned === undefined")
        lines = page.evaluate("[...document.querySelectorAll('#memory svg.chart polyline')]"
                              ".map(p => p.getAttribute('points').split(' ').length)")
        assert len(lines) == 2 and min(lines) > 50  # live and reserved, drawn point by point
        sites = page.evaluate("[...document.querySelectorAll('#memory td.text')]"
                              ".map(td => td.textContent)")
        assert any(text.startswith(IMG_PAYLOAD) for text in sites)  # shown as text, not markup


def test_a_real_shaped_snapshot_says_what_holds_its_peak(tmp_path):
    """A snapshot as `_record_memory_history()` records it at its defaults (tests/helpers/snapshotgen.py,
    `cuda_stack`): the page opens on what holds the peak and the user's line, with a table of
    the holders at the peak and at the snapshot."""
    import html as html_lib

    from helpers.snapshotgen import PARAM_BLOCKS, PARAM_SIZE, real_shaped_snapshot

    data = report_result(write(tmp_path / "real.pickle", real_shaped_snapshot("all")))
    (s,) = data["memory_snapshots"]
    page = html_lib.unescape(render_html(data))
    assert s["verdict"][0] in page and "optimizers.py:82 in step" in s["verdict"][0]
    assert "What holds the memory" in page
    section = page[page.index("What holds the memory"):]
    state = f"{2 * PARAM_BLOCKS * PARAM_SIZE / 1e9:.2f} GB"
    assert re.search(rf"optimizer state</td>\s*<td[^>]*>{state}</td>\s*<td[^>]*>{state}", section)
    assert "gather_with_cpp" not in page
