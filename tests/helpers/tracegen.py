"""Synthetic Kineto traces with known answers, in old or new spellings."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NEW = {"op": "cpu_op", "runtime": "cuda_runtime", "kernel": "kernel", "memcpy": "gpu_memcpy",
       "memset": "gpu_memset", "annotation": "user_annotation", "driver": "cuda_driver"}
OLD = {"op": "Operator", "runtime": "Runtime", "kernel": "Kernel", "memcpy": "Memcpy",
       "memset": "Memset", "annotation": "user_annotation", "driver": "cuda_driver"}


@dataclass
class TraceBuilder:
    """Builds a trace event by event; times in µs relative to ``base``."""

    spelling: dict[str, str] = field(default_factory=lambda: dict(NEW))
    base: float = 1_000_000.0
    pid: int = 100
    tid: int = 100
    device: int = 0
    stream: int = 7
    events: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    _corr: int = 1000
    _ext: int = 1

    def _x(self, cat: str, name: str, ts: float, dur: float, pid: Any, tid: Any,
           args: dict | None = None) -> dict:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
              "ts": self.base + ts, "dur": dur, "args": args or {}}
        self.events.append(ev)
        return ev

    def op(self, name: str, ts: float, dur: float, tid: Any = None,
           args: dict | None = None) -> dict:
        ext = self._ext
        self._ext += 1
        return self._x(self.spelling["op"], name, ts, dur, self.pid,
                       self.tid if tid is None else tid, {"External id": ext, **(args or {})})

    def annotation(self, name: str, ts: float, dur: float, tid: Any = None) -> dict:
        return self._x(self.spelling["annotation"], name, ts, dur, self.pid,
                       self.tid if tid is None else tid, {})

    def step(self, n: int, ts: float, dur: float) -> dict:
        return self._x(self.spelling["op"], f"ProfilerStep#{n}", ts, dur, self.pid, self.tid, {})

    def launch(self, ts: float, dur: float, kind: str = "kernel", name: str = "k",
               k_ts: float | None = None, k_dur: float = 10.0, args: dict | None = None,
               launcher: str = "cudaLaunchKernel", category: str | None = None,
               external_id: int = 0, tid: Any = None, linked: bool = True,
               flow: bool = False) -> tuple[dict, dict]:
        """A launch call on the host and the device event it starts (``kind``: kernel, memcpy,
        memset). ``external_id`` ties the call to an op (``op(...)["args"]["External id"]``);
        ``linked=False`` leaves the correlation off the device event, and ``flow=True`` writes
        the ac2g flow from the call to the device event."""
        corr = self._corr
        self._corr += 1
        host_tid = self.tid if tid is None else tid
        rt = self._x(category or self.spelling["runtime"], launcher, ts, dur, self.pid, host_tid,
                     {"correlation": corr, "External id": external_id})
        dev_args = {"device": self.device, "stream": self.stream}
        if linked:
            dev_args["correlation"] = corr
        dev_args.update(args or {})
        dev = self._x(self.spelling[kind], name, ts + dur if k_ts is None else k_ts, k_dur,
                      self.device, self.stream, dev_args)
        if flow:
            for ph, pid, t, at in (("s", self.pid, host_tid, ts),
                                   ("f", self.device, self.stream, dev["ts"] - self.base)):
                self.events.append({"ph": ph, "id": corr, "pid": pid, "tid": t,
                                    "ts": self.base + at, "cat": "ac2g", "name": "ac2g",
                                    **({"bp": "e"} if ph == "f" else {})})
        return rt, dev

    def event(self, cat: str, name: str, ts: float, dur: float, args: dict | None = None,
              on_device: bool = False, tid: Any = None) -> dict:
        """Any complete event: on the host thread, or on the device stream."""
        pid = self.device if on_device else self.pid
        thread = (self.stream if on_device else self.tid) if tid is None else tid
        return self._x(cat, name, ts, dur, pid, thread, args)

    def kernel(self, name: str, ts: float, dur: float, **args: Any) -> dict:
        """A device event with no launch recorded (e.g. from a sampled trace)."""
        return self._x(self.spelling["kernel"], name, ts, dur, self.device, self.stream,
                       {"device": self.device, "stream": self.stream, **args})

    def memory(self, ts: float, nbytes: int, total: int | None, device_type: int = 1,
               reserved: int | None = None, device_id: int = 0, tid: Any = None) -> dict:
        """A ``[memory]`` event; ``total`` None writes the old format (no Addr, no totals)."""
        args: dict[str, Any] = {"Device Type": device_type, "Device Id": device_id,
                                "Bytes": nbytes}
        if total is not None:
            args.update({"Addr": 1, "Total Allocated": total,
                         "Total Reserved": total if reserved is None else reserved})
        ev = {"ph": "i", "s": "t", "name": "[memory]", "pid": self.pid,
              "tid": self.tid if tid is None else tid, "ts": self.base + ts, "args": args}
        self.events.append(ev)
        return ev

    def document(self) -> dict[str, Any]:
        doc = {"schemaVersion": 1, **self.metadata, "traceEvents": self.events}
        return doc

    def write(self, path: Path) -> Path:
        data = json.dumps(self.document()).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path
