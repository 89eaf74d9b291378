"""Bus bandwidth of collectives, against a reading of the raw trace written here."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.roofline.collectives import bus_factor, collectives
from trainprof.trace.load import load_file

from helpers.paths import BERT, NCCL_TRACE

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108, "computeMajor": 8}
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9}
ELEMENT = {"Float": 4, "Long": 8, "BFloat16": 2, "Byte": 1, "Char": 1}
# nccl-tests PERFORMANCE.md: busbw = algbw x factor.
FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def _section(path):
    trace = load_file(path)
    return collectives(trace, find_steps(trace))


def _reference(path):
    """Per (collective, bytes, group): (count, µs, busbw GB/s), from the kernels' own args."""
    with gzip.open(path) as f:
        doc = json.loads(f.read())
    sums = defaultdict(lambda: [0, 0.0])
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if e.get("cat") == "kernel" and "Collective name" in a:
            size = max(a["In msg nelems"], a["Out msg nelems"]) * ELEMENT[a["dtype"]]
            key = (a["Collective name"], size, a["Group size"])
            sums[key][0] += 1
            sums[key][1] += e["dur"]
    return {k: (c, us, k[1] * c / us / 1e3 * FACTOR[k[0]](k[2])) for k, (c, us) in sums.items()}


def test_nccl_trace_busbw_matches_a_raw_reading():
    """ResNet DDP on 2 A100s: all-reduce busbw = algbw x 2(n-1)/n = algbw at n=2; broadcast
    busbw = algbw. Against the A100 40 GB entry's NVLink: 600 / 2 = 300 GB/s per direction."""
    c = _section(NCCL_TRACE)
    ref = _reference(NCCL_TRACE)
    assert c.device == "A100 40GB" and c.sized == 21 and c.unsized == 0
    assert len(c.rows) == len(ref)
    names = {"all_reduce": "allreduce", "broadcast": "broadcast"}
    for row in c.rows:
        count, us, busbw = ref[(names[row.type], row.bytes, row.group_size)]
        assert (row.count, row.time_us) == (count, pytest.approx(us))
        assert row.busbw_gb_s == pytest.approx(busbw)
        assert row.link == "link" and row.peak_gb_s == 300.0
        assert row.pct_of_peak == pytest.approx(busbw / 300.0 * 100)
    assert [r.time_us for r in c.rows] == sorted((r.time_us for r in c.rows), reverse=True)


@pytest.mark.parametrize("kind, n, factor", [
    ("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("all_to_all", 16, 15 / 16), ("broadcast", 8, 1.0), ("barrier", 8, None)])
def test_bus_factors_follow_nccl_tests(kind, n, factor):
    assert bus_factor(kind, n) == factor


def _all_gather(builder, t: float, group: int, nelems: int, us: float) -> None:
    """record_param_comms (the sizes) around the launch of a kernel that carries none."""
    builder.op("record_param_comms", t, 50, args={
        "Collective name": "_allgather_base", "In msg nelems": nelems // group,
        "Out msg nelems": nelems, "Group size": group, "dtype": "BFloat16"})
    builder.launch(t + 10, 5, k_ts=t + 20, k_dur=us,
                   name="ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")


def test_sizes_from_the_host_op_and_the_nic_beyond_a_node(builder, tmp_path):
    builder.step(0, 0, 5000)
    _all_gather(builder, 100, 8, 64 * 2**20, 1000.0)  # 128 MiB in 1 ms over 8 ranks
    _all_gather(builder, 2000, 16, 64 * 2**20, 2000.0)  # 16 ranks: beyond one node
    builder.metadata["deviceProperties"] = [H100]
    c = _section(builder.write(tmp_path / "t.json"))
    by_group = {r.group_size: r for r in c.rows}
    node, wide = by_group[8], by_group[16]
    size = 64 * 2**20 * 2
    assert node.type == "all_gather" and node.bytes == size
    assert node.algbw_gb_s == pytest.approx(size / 1000.0 / 1e3)
    assert node.busbw_gb_s == pytest.approx(size / 1000.0 / 1e3 * 7 / 8)
    assert (node.link, node.peak_gb_s) == ("link", 450.0)  # H100 NVLink 900 GB/s both ways
    assert (wide.link, wide.peak_gb_s) == ("nic", 50.0)  # a 400 Gb/s NIC per GPU
    assert wide.busbw_gb_s == pytest.approx(size / 2000.0 / 1e3 * 15 / 16)


def test_a_trace_without_collectives_has_no_rows():
    c = _section(BERT)
    assert c.rows == [] and c.sized == 0 and c.unsized == 0
