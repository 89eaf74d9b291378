"""A real Dask cluster on 127.0.0.1 for tests: `dask scheduler` and `dask worker` processes from
this Python's bin folder, each bounded in time and always stopped."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trainprof

#: The longest a process may take to start (a worker imports dask, numpy and trainprof).
START_S = 60.0
#: A process left running past this stops by itself (Dask's own --lifetime and --idle-timeout),
#: whatever becomes of the test.
LIFETIME_S = 300


@dataclass
class DaskCluster:
    scheduler_file: Path
    address: str
    procs: list[subprocess.Popen] = field(default_factory=list)
    workers: list[subprocess.Popen] = field(default_factory=list)

    def add_worker(self) -> subprocess.Popen:
        """One more worker (one thread, no nanny: killing its process kills the worker)."""
        proc = _start(["worker", "--scheduler-file", str(self.scheduler_file), "--nthreads",
                       "1", "--no-nanny", "--no-dashboard", "--name", f"w{len(self.workers)}",
                       "--lifetime", f"{LIFETIME_S}s"])
        self.procs.append(proc)
        self.workers.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _start(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ)
    package_root = str(Path(trainprof.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    dask = Path(sys.executable).parent / "dask"
    return subprocess.Popen([str(dask), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def dask_cluster(folder: Path, workers: int = 2) -> Iterator[DaskCluster]:
    """A scheduler and ``workers`` workers, all connected, stopped on leaving."""
    from distributed import Client

    scheduler_file = folder / "scheduler.json"
    proc = _start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                   "--scheduler-file", str(scheduler_file), "--idle-timeout", f"{LIFETIME_S}s"])
    cluster = DaskCluster(scheduler_file, "", [proc])
    try:
        deadline = time.monotonic() + START_S
        while not scheduler_file.is_file() or not scheduler_file.stat().st_size:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the Dask scheduler did not start")
            time.sleep(0.1)
        time.sleep(0.1)  # the file is written whole, but give it a moment
        cluster.address = json.loads(scheduler_file.read_text())["address"]
        for _ in range(workers):
            cluster.add_worker()
        with Client(cluster.address, timeout=START_S, set_as_default=False) as client:
            client.wait_for_workers(workers, timeout=START_S)
        yield cluster
    finally:
        cluster.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (as of now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
