"""Every query of docs/sql.md runs on the shared traces and agrees with a plain-JSON reference."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest

from helpers.paths import BERT, NCCL_TRACE, RESNET_W0, ROOT, TRACE_FILTER
from raw_trace import of_category, raw_events, t0_of

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from trainprof.sql.query import run_query  # noqa: E402

QUERIES = re.findall(r"```sql\n(.*?)```", (ROOT / "docs/sql.md").read_text(), re.DOTALL)
MS = pytest.approx


def test_the_docs_hold_ten_questions_and_the_findings():
    assert len(QUERIES) == 11


def _rows(path, n):
    return run_query(path, QUERIES[n]).to_dicts()


def test_1_top_kernels():
    rows = _rows(RESNET_W0, 0)
    totals, calls = defaultdict(float), Counter()
    for e in of_category(raw_events(RESNET_W0), "kernel"):
        totals[e["name"]] += e["dur"]
        calls[e["name"]] += 1
    top = sorted(totals, key=lambda n: -totals[n])[:10]
    assert [r["name"] for r in rows] == top
    assert [r["total_ms"] for r in rows] == [MS(totals[n] / 1000) for n in top]
    assert [r["calls"] for r in rows] == [calls[n] for n in top]


def test_2_top_kernels_per_step():
    rows = _rows(RESNET_W0, 1)
    raw = raw_events(RESNET_W0)
    t0 = t0_of(raw)
    windows = run_query(RESNET_W0, "SELECT step, start_us, end_us FROM steps").rows
    per_step: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in of_category(raw, "kernel"):
        ts = e["ts"] - t0
        for step, start, end in windows:
            if start <= ts < end:
                per_step[step][e["name"]] += e["dur"]
    expected = [(step, name, MS(us / 1000)) for step in sorted(per_step)
                for name, us in sorted(per_step[step].items(), key=lambda kv: -kv[1])[:3]]
    assert [(r["step"], r["name"], r["total_ms"]) for r in rows] == expected
    assert len({r["step"] for r in rows}) == 6


def test_3_idle_gaps_over_a_millisecond():
    rows = _rows(RESNET_W0, 2)
    device = sorted(of_category(raw_events(RESNET_W0), "kernel", "memcpy", "memset"),
                    key=lambda e: e["ts"])
    gaps, end = [], None
    for e in device:
        if end is not None and e["ts"] - end > 1000:
            gaps.append((e["ts"] - end) / 1000)
        end = e["ts"] + e["dur"] if end is None else max(end, e["ts"] + e["dur"])
    assert len(rows) == len(gaps) > 0
    assert [r["idle_ms"] for r in rows] == [MS(g) for g in sorted(gaps, reverse=True)]


def test_4_collectives_by_size():
    rows = {r["collective"]: r for r in _rows(NCCL_TRACE, 3)}
    names = {"allreduce": "all_reduce", "broadcast": "broadcast"}
    calls, nbytes, dur = Counter(), defaultdict(float), defaultdict(float)
    for e in of_category(raw_events(NCCL_TRACE), "kernel"):
        if e["name"].startswith("nccl"):
            a = e["args"]
            kind = names[a["Collective name"]]
            calls[kind] += 1
            size = {"Float": 4, "Long": 8}[a["dtype"]]
            nbytes[kind] += max(a["In msg nelems"], a["Out msg nelems"]) * size
            dur[kind] += e["dur"]
    assert set(rows) == set(calls) == {"all_reduce", "broadcast"}
    for kind, row in rows.items():
        assert row["calls"] == calls[kind]
        assert row["total_mb"] == MS(nbytes[kind] / 1e6)
        assert row["total_ms"] == MS(dur[kind] / 1000)


def test_5_ops_per_module():
    rows = _rows(BERT, 4)
    raw = raw_events(BERT)
    modules = [e for e in of_category(raw, "python_function")
               if e["name"].startswith("nn.Module:")]
    counts = Counter()
    for op in of_category(raw, "cpu_op"):
        around = [m for m in modules if (m["pid"], m["tid"]) == (op["pid"], op["tid"])
                  and m["ts"] <= op["ts"] and op["ts"] + op["dur"] <= m["ts"] + m["dur"]]
        if around:
            counts[max(around, key=lambda m: m["ts"])["name"]] += 1
    assert rows, "the BERT trace has nn.Module ranges"
    assert {r["module"]: r["ops"] for r in rows} == {m: counts[m] for m in
                                                    {r["module"] for r in rows}}
    assert sorted(counts.values(), reverse=True)[:10] == [r["ops"] for r in rows]


def test_6_step_time_per_rank_of_a_folder():
    rows = {r["rank"]: r for r in _rows(TRACE_FILTER, 5)}
    assert set(rows) == {0, 1}
    for rank in (0, 1):
        raw = raw_events(TRACE_FILTER / f"sampled_rank-{rank}.json.gz")
        steps = [e for e in raw if e["name"].startswith("ProfilerStep#")]
        assert rows[rank]["steps"] == len({e["name"] for e in steps})


def test_7_ops_that_launch_the_most_kernel_time():
    rows = _rows(BERT, 6)
    raw = raw_events(BERT)
    launches = {e["args"]["correlation"]: e for e in of_category(raw, "cuda_runtime",
                                                                  "cuda_driver")
                if "correlation" in e.get("args", {})}
    ops = of_category(raw, "cpu_op")
    kernel_us = defaultdict(float)
    for k in of_category(raw, "kernel"):
        r = launches.get(k["args"].get("correlation"))
        if r is None:
            continue
        for o in ops:
            if (o["pid"], o["tid"]) == (r["pid"], r["tid"]) and o["ts"] <= r["ts"] \
                    and r["ts"] + r["dur"] <= o["ts"] + o["dur"]:
                kernel_us[o["name"]] += k["dur"]
    top = sorted(kernel_us.values(), reverse=True)[:10]
    assert [r["kernel_ms"] for r in rows] == [MS(us / 1000) for us in top]
    assert kernel_us[rows[0]["op"]] == MS(rows[0]["kernel_ms"] * 1000)


def test_8_copies_by_direction():
    rows = _rows(RESNET_W0, 7)
    copies = of_category(raw_events(RESNET_W0), "memcpy")
    assert sum(r["copies"] for r in rows) == len(copies) > 0
    assert sum(r["ms"] for r in rows) == MS(sum(e["dur"] for e in copies) / 1000)
    assert sum(r["mb"] for r in rows) == MS(sum(e["args"]["bytes"] for e in copies) / 1e6)


def test_9_synchronisations():
    rows = _rows(RESNET_W0, 8)
    syncs = [e for e in of_category(raw_events(RESNET_W0), "runtime")
             if "synchronize" in e["name"].lower()]
    assert sum(r["calls"] for r in rows) == len(syncs) > 0
    assert sum(r["blocked_ms"] for r in rows) == MS(sum(e["dur"] for e in syncs) / 1000)


def test_10_shapes_of_matmuls_and_convolutions():
    rows = _rows(RESNET_W0, 9)
    wanted = {"aten::mm", "aten::addmm", "aten::bmm", "aten::convolution"}
    groups = defaultdict(float)
    for e in of_category(raw_events(RESNET_W0), "operator", "cpu_op"):
        if e["name"] in wanted:
            groups[(e["name"], str(e["args"].get("Input Dims")))] += e["dur"]
    top = sorted(groups.values(), reverse=True)[:10]
    assert [r["host_ms"] for r in rows] == [MS(us / 1000) for us in top]
    assert all(r["input_dims"].startswith("[[") for r in rows)


def test_findings_are_the_analysis_findings():
    import trainprof

    rows = _rows(NCCL_TRACE, 10)
    expected = [f for f in trainprof.analyze(NCCL_TRACE).findings if f.saving_pct > 1]
    assert [(r["id"], r["severity"]) for r in rows] == [(f.id, f.severity) for f in expected]
    assert rows
