"""Nsight Systems exports read into the trace model: every figure checked against direct SQL
over the same tables of the real exports (nsys 2026.1/2026.2, tests/data/traces/nsys)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from trainprof.analysis.overview.steps import find_steps, launch_links
from trainprof.errors import TraceError
from trainprof.trace.load import load, load_traces
from trainprof.trace.model import FLAG_COMM, Kind, memcpy_direction
from trainprof.trace.nsys.detect import is_nsys_file, read_nsys

from helpers.paths import NSYS_EXPORTS, NSYS_H100, NSYS_HEALTHY, NSYS_MOCK


@pytest.fixture(scope="module")
def exports() -> dict[Path, list]:
    return {path: read_nsys(path) for path in NSYS_EXPORTS}


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(query).fetchall()


def _has_column(path: Path, table: str, column: str) -> bool:
    return any(row[1] == column for row in _sql(path, f"PRAGMA table_info({table})"))


def _rank_of_pid(path: Path) -> dict[int, int]:
    """Process key -> rank: processes with kernels, in the order of their ids."""
    if not _has_column(path, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"):
        return {0: 0}
    pids = [g >> 24 for (g,) in _sql(path, "SELECT DISTINCT globalPid FROM "
                                           "CUPTI_ACTIVITY_KIND_KERNEL ORDER BY globalPid")]
    return {p: r for r, p in enumerate(pids)}


@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_kernel_time_per_device_matches_sql(exports, path):
    expected = {d: (n, ns) for d, n, ns in _sql(
        path, 'SELECT deviceId, count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL '
              "GROUP BY deviceId")}
    got: dict[int, tuple[int, float]] = {}
    for trace in exports[path]:
        ev = trace.events
        for device in trace.devices:
            mask = (ev.kind == Kind.KERNEL) & (ev.device == device)
            got[device] = (int(mask.sum()), float(ev.dur[mask].sum()) * 1000.0)
    assert got.keys() == expected.keys()
    for device, (count, ns) in expected.items():
        assert got[device][0] == count
        assert got[device][1] == pytest.approx(ns, abs=1e-3)


@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_ranks_are_processes_with_their_times(exports, path):
    ranks = _rank_of_pid(path)
    assert [t.rank for t in exports[path]] == sorted(ranks.values())
    for trace in exports[path]:
        ev = trace.events
        first_ns = min(s for (s,) in _sql(path, 'SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL'
                       + ("" if len(ranks) == 1 else
                          f" WHERE globalPid >> 24 = {[p for p, r in ranks.items() if r == trace.rank][0]}")))
        kernels = ev.kind == Kind.KERNEL
        assert trace.t0_us * 1000 + ev.ts[kernels].min() * 1000 == pytest.approx(first_ns, abs=1e-3)
        assert np.all(np.diff(ev.ts) >= 0)


@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_copies_by_direction_match_sql(exports, path):
    if not _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]:
        assert all(not (t.events.kind == Kind.MEMCPY).any() for t in exports[path])
        return
    # CUDA's copy kinds: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP (ENUM_CUDA_MEMCPY_OPER of these files).
    words = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}
    ranks = _rank_of_pid(path)
    expected: dict[tuple[int, str], tuple[int, int]] = {}
    for gpid, kind, n, nbytes in _sql(path, "SELECT globalPid, copyKind, count(*), sum(bytes) "
                                            "FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1, 2"):
        expected[(ranks[gpid >> 24], words[kind])] = (n, nbytes)
    got = {}
    for trace in exports[path]:
        ev = trace.events
        for i in np.flatnonzero(ev.kind == Kind.MEMCPY):
            key = (trace.rank, memcpy_direction(ev.names[ev.name[i]]))
            n, b = got.get(key, (0, 0))
            got[key] = (n + 1, b + int(ev.nbytes[i]))
    assert got == expected


def test_pinned_and_pageable_copies_are_named_as_kineto_names_them(exports):
    # ENUM_CUDA_MEM_KIND of nsys 2026.2: 0 Pageable, 1 Pinned, 2 Device.
    (pageable,) = _sql(NSYS_H100, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                                  "WHERE copyKind = 1 AND srcKind = 0")[0]
    ev = [t.events for t in exports[NSYS_H100]]
    named = sum(int(e.names[e.name[i]] == "Memcpy HtoD (Pageable -> Device)")
                for e in ev for i in np.flatnonzero(e.kind == Kind.MEMCPY))
    assert named == pageable > 0


@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_every_launch_joins_its_device_work_by_correlation(exports, path):
    joined = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                        "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"
                  + (" AND r.globalTid >> 24 = k.globalPid >> 24"
                     if _has_column(path, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid") else ""))
    linked = 0
    for trace in exports[path]:
        device, _ = launch_links(trace)
        linked += int((trace.events.kind[device] == Kind.KERNEL).sum())
    assert linked == joined[0][0] > 0


def test_syncs_and_runtime_calls_per_rank_match_sql(exports):
    ranks = _rank_of_pid(NSYS_H100)
    syncs = dict(_sql(NSYS_H100, "SELECT globalPid >> 24, count(*) FROM "
                                 "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION GROUP BY 1"))
    calls = dict(_sql(NSYS_H100, "SELECT globalTid >> 24, count(*) FROM "
                                 "CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1"))
    for pid, rank in ranks.items():
        ev = exports[NSYS_H100][rank].events
        assert int((ev.kind == Kind.SYNC).sum()) == syncs[pid]
        assert int(ev.of_kind(Kind.RUNTIME, Kind.DRIVER).sum()) == calls[pid]
    names = exports[NSYS_H100][0].events.names
    assert "cudaLaunchKernel" in names and not any(n.endswith("_v7000") for n in names)


def test_the_h100_capture_is_a_two_rank_fsdp_job(exports):
    traces = exports[NSYS_H100]
    assert [t.metadata["distributedInfo"] for t in traces] == [
        {"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}]
    assert [t.devices for t in traces] == [[0], [1]]
    fsdp = dict(_sql(NSYS_H100, "SELECT globalTid >> 24, count(*) FROM NVTX_EVENTS "
                                "WHERE text LIKE 'FSDP::%' GROUP BY 1"))
    ops = dict(_sql(NSYS_H100, "SELECT globalTid >> 24, count(*) FROM NVTX_EVENTS "
                               "WHERE text LIKE '%, op_id = %' AND text NOT LIKE 'FSDP::%' "
                               "GROUP BY 1"))
    for pid, rank in _rank_of_pid(NSYS_H100).items():
        ev = traces[rank].events
        annotations = np.flatnonzero(ev.kind == Kind.USER_ANNOTATION)
        assert len(annotations) == fsdp[pid]
        assert all(ev.names[ev.name[i]].startswith("FSDP::") for i in annotations)
        assert "FSDP::pre_forward (encoder.block.14.layer.1)" in ev.names
        assert int((ev.kind == Kind.CPU_OP).sum()) == ops[pid]
        assert "aten::mm" in ev.names and not any(", op_id" in n for n in ev.names)


@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_communication_time_is_the_nccl_kernels(exports, path):
    expected = _sql(path, "SELECT count(*), coalesce(sum(k.\"end\" - k.start), 0) FROM "
                          "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                          "WHERE s.value LIKE '%nccl%'")[0]
    comm = [t.events.flagged(FLAG_COMM) & (t.events.kind == Kind.KERNEL) for t in exports[path]]
    got = (sum(int(c.sum()) for c in comm),
           sum(float(t.events.dur[c].sum()) * 1000 for t, c in zip(exports[path], comm, strict=True)))
    assert got[0] == expected[0]
    assert got[1] == pytest.approx(expected[1], abs=1e-3)


def _copy(src: Path, tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    shutil.copyfile(src, out)
    return out


def test_an_nccl_kernel_counts_as_communication(tmp_path):
    # The kernel table of mock.sqlite (nsys 2026.1), one more row with an NCCL kernel's name.
    path = _copy(NSYS_MOCK, tmp_path, "nccl.sqlite")
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO StringIds VALUES (100000, ?)", (name,))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM "
                   "CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 100000, shortName = "
                   "100000, start = start + 5000000, \"end\" = \"end\" + 5250000 WHERE rowid = "
                   "(SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    expected = _sql(path, 'SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL '
                          "WHERE demangledName = 100000")[0][0]
    (trace,) = read_nsys(path)
    comm = trace.events.flagged(FLAG_COMM)
    assert float(trace.events.dur[comm].sum()) * 1000 == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_without_step_ranges_the_capture_is_one_window(exports, path):
    for trace in exports[path]:
        steps = find_steps(trace)
        assert steps.source == "whole trace" and len(steps) == 1


def _with_ranges(tmp_path: Path, texts: list[str]) -> Path:
    """mock.sqlite with an NVTX_EVENTS table as nsys 2026.2 writes it (the H100 export's own
    definition) holding push/pop ranges (eventType 59) on the main thread, cutting the capture
    into ``len(texts)`` pieces that launch as much device work each."""
    path = _copy(NSYS_MOCK, tmp_path, "steps.sqlite")
    (ddl,), = _sql(NSYS_H100, "SELECT sql FROM sqlite_master WHERE name = 'NVTX_EVENTS'")
    calls = _sql(path, "SELECT r.start, r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE "
                       "r.correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                       "UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) ORDER BY 1")
    (lo, hi), = _sql(path, 'SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_RUNTIME')
    k, gtid = len(texts), calls[0][1]
    cuts = [lo] + [calls[i * len(calls) // k][0] for i in range(1, k)] + [hi + 1]
    with sqlite3.connect(path) as db:
        db.execute(ddl)
        db.executemany("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, "
                       "domainId) VALUES (?, ?, 59, ?, ?, 0)",
                       [(a, b - 1, t, gtid) for a, b, t in zip(cuts[:-1], cuts[1:], texts, strict=True)])
    return path


@pytest.mark.parametrize(("texts", "numbers"), [
    (["ProfilerStep#7", "ProfilerStep#8", "ProfilerStep#9"], [7, 8, 9]),
    (["step 3", "step 4"], [3, 4]),
    (["iteration 10", "iteration 11", "iteration 12"], [10, 11, 12]),
    (["train_step", "train_step"], [1, 2]),
])
def test_step_ranges_become_steps(tmp_path, texts, numbers):
    path = _with_ranges(tmp_path, texts)
    count = _sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE text NOT LIKE '%, op_id = %'")[0][0]
    rank0 = read_nsys(path)[0]
    steps = find_steps(rank0)
    assert steps.source == "ProfilerStep"
    assert len(steps) == count == len(numbers)
    assert steps.numbers.tolist() == numbers


def test_a_step_marker_pattern_of_ones_own(tmp_path):
    import re

    path = _with_ranges(tmp_path, ["batch-21", "batch-22"])
    steps = find_steps(read_nsys(path, re.compile(r"^batch-(\d+)$"))[0])
    assert steps.numbers.tolist() == [21, 22]


def test_analyze_takes_a_step_marker(tmp_path):
    import json

    from trainprof.cli import main

    path = _with_ranges(tmp_path, ["batch-21", "batch-22"])
    out = tmp_path / "out.json"
    assert main(["analyze", str(path), "--step-marker", r"^batch-(\d+)$", "--format", "json",
                 "-o", str(out), "--no-progress"]) == 0
    steps = json.loads(out.read_text())["ranks"][0]["steps"]
    assert [s["step"] for s in steps["per_step"]] == [21, 22] and steps["source"] == "ProfilerStep"
    import trainprof

    api = trainprof.analyze(path, step_marker=r"^batch-(\d+)$").ranks[0].steps
    assert [s["step"] for s in api.per_step] == [21, 22]


def test_torch_op_ranges_keep_their_shapes(tmp_path):
    # torch's emit_nvtx(record_shapes=True) names: "<op>, seq = N, op_id = N, sizes = [[...]]"
    # (torch/csrc/profiler/stubs/cuda.cpp getNvtxStr).
    path = _with_ranges(tmp_path, ["aten::mm, seq = 4, op_id = 99, sizes = [[2, 3], [3, 4]], "
                                      "input_op_ids = [(98, 0)]"])
    ev = read_nsys(path)[0].events
    mm = [i for i in np.flatnonzero(ev.kind == Kind.CPU_OP) if ev.shape[i] >= 0]
    assert len(mm) == 1 and ev.names[ev.name[mm[0]]] == "aten::mm"
    assert ev.shapes[ev.shape[mm[0]]] == "[[2, 3], [3, 4]]"


def test_kernel_launch_details_are_the_exports_columns(exports):
    row = _sql(NSYS_MOCK, "SELECT gridX, gridY, gridZ, blockX, blockY, blockZ, "
                          "registersPerThread, staticSharedMemory + dynamicSharedMemory "
                          "FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1")[0]
    (trace,) = exports[NSYS_MOCK]
    ev = trace.events
    first = np.flatnonzero(ev.kind == Kind.KERNEL)[0]
    assert ev.details[ev.detail[first]] == {"grid": list(row[:3]), "block": list(row[3:6]),
                                            "registers": row[6], "shared_memory": row[7]}
    sms = _sql(NSYS_MOCK, "SELECT smCount FROM TARGET_INFO_GPU")[0][0]
    assert ev.blocks_per_sm[first] == pytest.approx(row[0] * row[1] * row[2] / sms)
    assert trace.device_name() == "NVIDIA GeForce RTX 3080" and trace.num_sms(0) == sms


def test_a_folder_mixing_exports_and_kineto_traces_is_one_job(tmp_path):
    from helpers.paths import ALEXNET

    shutil.copyfile(NSYS_MOCK, tmp_path / "rank1.sqlite")
    shutil.copyfile(ALEXNET, tmp_path / "kineto.json.gz")  # distributedInfo: rank 0
    sqlite3.connect(tmp_path / "notes.sqlite").execute("CREATE TABLE notes (text)")
    with pytest.warns(UserWarning, match="notes.sqlite is a SQLite database but not an Nsight"):
        traces = load(tmp_path)
    assert [(t.rank, t.path.name) for t in traces] == [(0, "kineto.json.gz"), (1, "rank1.sqlite")]
    assert is_nsys_file(tmp_path / "rank1.sqlite") and not is_nsys_file(tmp_path / "kineto.json.gz")


def test_a_multi_process_export_loads_as_its_ranks():
    traces = load(NSYS_H100)
    assert [(t.rank, t.devices) for t in traces] == [(0, [0]), (1, [1])]
    assert [t.rank for t in load_traces(NSYS_MOCK)] == [0]


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE t (a)"), "not an Nsight Systems export"),
    (lambda p: (shutil.copyfile(NSYS_MOCK, p), sqlite3.connect(p).execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL").connection.commit()), "records no CUDA kernels"),
    (lambda p: p.write_bytes(NSYS_MOCK.read_bytes()[:100_000]), "damaged"),
    (lambda p: (shutil.copyfile(NSYS_MOCK, p), sqlite3.connect(p).execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon'").connection.commit()),
     "not a whole number"),
    (lambda p: (shutil.copyfile(NSYS_MOCK, p), sqlite3.connect(p).execute(
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN start TO begin_ns")),
     "CUPTI_ACTIVITY_KIND_KERNEL table has no start column"),
])
def test_bad_exports_are_one_sentence(tmp_path, make, words):
    path = tmp_path / "bad.sqlite"
    make(path)
    with pytest.raises(TraceError, match=words):
        read_nsys(path)


def test_a_report_without_nsys_says_the_command_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys here (nor anywhere on this machine)
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not read")
    with pytest.raises(TraceError) as err:
        read_nsys(report)
    assert f"nsys export --type sqlite --output {tmp_path / 'run.sqlite'} {report}" in str(err.value)


def test_healthy_export_needs_no_process_ids(exports):
    (trace,) = exports[NSYS_HEALTHY]
    assert trace.device_name() == "NVIDIA H100 80GB HBM3"
    assert any("NVTX_EVENTS" in note for note in trace.notes)


def _with_marks(src: Path, out: Path, ranks: dict[int, int]) -> Path:
    """``src`` with the NVTX marks trainprof's recorder leaves (capture/nvtx.py:
    ``torch.cuda.nvtx.mark("trainprof.rank=N")``, an NvtxMark, eventType 34, no end) for each
    process key -> rank, in NVTX_EVENTS as nsys 2026.2 defines it."""
    shutil.copyfile(src, out)
    (ddl,), = _sql(NSYS_H100, "SELECT sql FROM sqlite_master WHERE name = 'NVTX_EVENTS'")
    with sqlite3.connect(out) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone():
            db.execute(ddl)
        db.executemany("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                       "VALUES (0, 34, ?, ?, 0)",
                       [(f"trainprof.rank={r}", (key << 24) + (key & 0xFFFFFF))
                        for key, r in ranks.items()])
    return out


def test_ranks_come_from_the_recorders_marks(tmp_path):
    keys = sorted(_rank_of_pid(NSYS_H100))
    path = _with_marks(NSYS_H100, tmp_path / "marked.sqlite", {keys[0]: 1, keys[1]: 0})
    traces = read_nsys(path)
    assert [(t.rank, t.devices) for t in traces] == [(0, [1]), (1, [0])]
    assert not any("order of their process ids" in n for n in traces[0].notes)


def test_a_folder_of_per_rank_exports_is_a_job(tmp_path):
    (gpid,), = _sql(NSYS_MOCK, "SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")
    for rank in (5, 3):
        _with_marks(NSYS_MOCK, tmp_path / f"node{rank}.sqlite", {gpid >> 24: rank})
    assert [(t.rank, t.path.name) for t in load(tmp_path)] == [(3, "node3.sqlite"),
                                                               (5, "node5.sqlite")]


def test_a_report_with_its_export_beside_it_reads_the_export(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys: the export beside it is read
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not read")
    os.utime(report, (1_000_000, 1_000_000))  # older than the export written next
    shutil.copyfile(NSYS_MOCK, tmp_path / "run.sqlite")
    (trace,) = read_nsys(report)
    kernels = _sql(NSYS_MOCK, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert trace.path.name == "run.sqlite" and int((trace.events.kind == Kind.KERNEL).sum()) == kernels


def test_torch_optimizer_ranges_give_the_steps_without_markers(tmp_path):
    # emit_nvtx names torch's record_function scopes too: "Optimizer.step#AdamW.step, op_id = N".
    texts = [f"Optimizer.step#AdamW.step, op_id = {n}" for n in (11, 12, 13)]
    path = _with_ranges(tmp_path, texts)
    ends = [e for (e,) in _sql(path, "SELECT \"end\" FROM NVTX_EVENTS WHERE text LIKE "
                                     "'Optimizer.step#%' ORDER BY start")]
    (trace,) = read_nsys(path)
    ev = trace.events
    annotations = np.flatnonzero(ev.kind == Kind.USER_ANNOTATION)
    assert {ev.names[ev.name[i]] for i in annotations} == {"Optimizer.step#AdamW.step"}
    steps = find_steps(trace)
    assert steps.source == "optimizer" and len(steps) == len(ends) - 1


def _with_environment(src: Path, out: Path, variables: list[str]) -> Path:
    """``src`` whose META_DATA_CAPTURE records these variables of the environment nsys
    launched its target with, as nsys 2026.2 writes them (``PROCESS_0:ENVIRONMENT_VARIABLE``,
    ``NAME="value"``: the 2xH100 export's rows)."""
    shutil.copyfile(src, out)
    with sqlite3.connect(out) as db:
        db.executemany("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                       [(v,) for v in variables])
    return out


def test_a_lone_process_takes_the_rank_of_its_launch_environment(tmp_path):
    (gpid,), = _sql(NSYS_MOCK, "SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")
    for rank in (7, 2):
        _with_environment(NSYS_MOCK, tmp_path / f"node{rank}.sqlite",
                          ['LOCAL_RANK="0"', f'RANK="{rank}"', 'WORLD_SIZE="8"'])
    traces = load(tmp_path)
    assert [(t.rank, t.path.name) for t in traces] == [(2, "node2.sqlite"), (7, "node7.sqlite")]
    assert traces[0].metadata["distributedInfo"] == {"rank": 2}
    # the recorder's own mark comes first
    marked = _with_marks(tmp_path / "node7.sqlite", tmp_path / "marked.sqlite", {gpid >> 24: 4})
    assert read_nsys(marked)[0].rank == 4


def test_the_launch_environment_of_several_processes_is_not_each_ones_rank(tmp_path):
    path = _with_environment(NSYS_H100, tmp_path / "two.sqlite", ['RANK="5"'])
    traces = read_nsys(path)
    assert [t.rank for t in traces] == [0, 1]
    assert any("order of their process ids" in n for n in traces[0].notes)


@pytest.mark.parametrize(("version", "words"), [("4.0.0", "Export schema 4.0.0 is not the 3.x"),
                                                (None, "records no schema version")])
def test_an_unknown_schema_version_is_read_with_a_note(tmp_path, version, words):
    path = _copy(NSYS_MOCK, tmp_path, "schema.sqlite")
    with sqlite3.connect(path) as db:
        if version is None:
            db.execute("DELETE FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'")
        else:
            db.execute("UPDATE META_DATA_EXPORT SET value = ? WHERE name = "
                       "'EXPORT_SCHEMA_VERSION'", (version,))
    (trace,) = read_nsys(path)
    assert any(words in n for n in trace.notes)
    assert int((trace.events.kind == Kind.KERNEL).sum()) == \
        _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
