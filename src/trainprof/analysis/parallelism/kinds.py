"""Which kinds of parallelism a rank's signals show, with the evidence for each, and the
process groups the trace names."""

from __future__ import annotations

from collections import Counter
from typing import Any

from trainprof.analysis.parallelism.result import ProcessGroup


def detect(signals: Counter[str], calls: dict[str, int]) -> tuple[list[str], dict[str, str]]:
    """The kinds (result.KINDS order) and, per kind, what showed it."""
    evidence: dict[str, str] = {}
    fsdp = signals.get("fsdp_range", 0)
    if fsdp:
        evidence["fsdp"] = (f"{fsdp} FSDP ranges, {calls.get('all_gather', 0)} all-gathers, "
                            f"{calls.get('reduce_scatter', 0)} reduce-scatters")
    micro = signals.get("forward_micro_batch", 0)
    p2p = sum(calls.get(t, 0) for t in ("send", "recv", "send_recv"))
    if micro or p2p:
        evidence["pipeline"] = (f"{micro} forward micro-batch ranges, " if micro else "") + \
            f"{p2p} send/recv calls"
    functional = signals.get("functional_collective", 0)
    if functional and not fsdp:
        evidence["tensor"] = f"{functional} functional (DTensor) collectives"
    if calls.get("all_to_all"):
        evidence["expert"] = (f"{calls['all_to_all']} all-to-all calls (experts; also sharded "
                              "embeddings or Ulysses sequence parallelism)")
    ddp, in_backward = signals.get("ddp_range", 0), signals.get("all_reduce_in_backward", 0)
    if not fsdp and (ddp or in_backward):
        evidence["ddp"] = (f"{ddp} DistributedDataParallel.forward ranges, " if ddp else "") + \
            f"{in_backward} all-reduces issued in backward"
    order = ("fsdp", "pipeline", "tensor", "expert", "ddp")
    return [k for k in order if k in evidence], evidence


def process_groups(metadata: dict[str, Any]) -> list[ProcessGroup]:
    """The process groups of Kineto's ``distributedInfo.pg_config`` (torch 2.2 and later)."""
    info = metadata.get("distributedInfo")
    config = info.get("pg_config") if isinstance(info, dict) else None
    if isinstance(config, dict):
        config = list(config.values())
    if not isinstance(config, list):
        return []
    out = []
    for g in config:
        if not isinstance(g, dict):
            continue
        ranks = g.get("ranks")
        out.append(ProcessGroup(
            name=str(g.get("pg_name", "")), description=str(g.get("pg_desc", "")),
            size=int(g.get("pg_size") or 0),
            ranks=[int(r) for r in ranks] if isinstance(ranks, list) else []))
    return out
