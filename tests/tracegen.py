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

    def op(self, name: str, ts: float, dur: float, tid: Any = None) -> dict:
        ext = self._ext
        self._ext += 1
        return self._x(self.spelling["op"], name, ts, dur, self.pid,
                       self.tid if tid is None else tid, {"External id": ext})

    def annotation(self, name: str, ts: float, dur: float) -> dict:
        return self._x(self.spelling["annotation"], name, ts, dur, self.pid, self.tid, {})

    def step(self, n: int, ts: float, dur: float) -> dict:
        return self._x(self.spelling["op"], f"ProfilerStep#{n}", ts, dur, self.pid, self.tid, {})

    def launch(self, ts: float, dur: float, kind: str = "kernel", name: str = "k",
               k_ts: float | None = None, k_dur: float = 10.0, args: dict | None = None,
               launcher: str = "cudaLaunchKernel", category: str | None = None) -> tuple[dict, dict]:
        """A launch call on the host and the device event it starts (``kind``: kernel, memcpy,
        memset)."""
        corr = self._corr
        self._corr += 1
        rt = self._x(category or self.spelling["runtime"], launcher, ts, dur, self.pid, self.tid,
                     {"correlation": corr, "External id": 0})
        dev_args = {"device": self.device, "stream": self.stream, "correlation": corr}
        dev_args.update(args or {})
        dev = self._x(self.spelling[kind], name, ts + dur if k_ts is None else k_ts, k_dur,
                      self.device, self.stream, dev_args)
        return rt, dev

    def kernel(self, name: str, ts: float, dur: float, **args: Any) -> dict:
        """A device event with no launch recorded (e.g. from a sampled trace)."""
        return self._x(self.spelling["kernel"], name, ts, dur, self.device, self.stream,
                       {"device": self.device, "stream": self.stream, **args})

    def memory(self, ts: float, nbytes: int, total: int, device_type: int = 1) -> dict:
        ev = {"ph": "i", "s": "t", "name": "[memory]", "pid": self.pid, "tid": self.tid,
              "ts": self.base + ts,
              "args": {"Device Type": device_type, "Device Id": 0, "Addr": 1, "Bytes": nbytes,
                       "Total Allocated": total, "Total Reserved": total}}
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
