"""A memory snapshot whose cache is nearly all free in split segments, held in one large block:
the devices table shows that share, so the report does not open with "no fragmentation found"
without saying why it is none, and its HTML counts the snapshots it analysed, not "0 ranks"."""

from __future__ import annotations

import pickle

from trainprof.commands.report import report_result
from trainprof.diagnose.snapshot import memory_snapshot_report
from trainprof.report.html.report import write_html

from helpers.snapshotgen import MiB, SnapshotBuilder


def split_but_whole(tmp_path):
    """One 1 GiB segment: a 1 MiB live block and one 1023 MiB free block beside it. Free in a
    split segment: 1023 of 1024 MiB (99.9%), all of it in one block that fits any request."""
    b = SnapshotBuilder()
    b.segment([(1 * MiB, "active_allocated"), (1023 * MiB, "inactive")])
    path = tmp_path / "one.pickle"
    path.write_bytes(pickle.dumps(b.snapshot()))
    return path


def test_high_split_free_share_is_explained_not_contradicted(tmp_path):
    path = split_but_whole(tmp_path)
    s = memory_snapshot_report(path)["snapshots"][0]
    d = s["devices"][0]
    assert round(d["fragmentation_pct"], 1) == round(100 * 1023 / 1024, 1) == 99.9
    assert not any(f["id"] == "memory_fragmentation" for f in s["findings"])
    note = next(n for n in s["notes"] if "split segments" in n)
    assert "99.9%" in note and "not fragmentation" in note and f"{1023 * 2**20 / 1e9:.2f} GB" in note
    html = write_html(report_result(path), tmp_path / "r.html").read_text()
    assert "fragmentation or growth found" not in html
    assert "the free memory in split segments is usable" in html
    assert "ranks and windows analysed" not in html
    environment = html[html.index('<section id="environment"'):]
    assert "memory snapshots analysed" in environment and ">1<" in environment
