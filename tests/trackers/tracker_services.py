"""Real tracker services for the tests: an ``mlflow server`` on 127.0.0.1, bounded and stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

#: How long the server may take to answer its health check.
START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """(URL, process) of an MLflow tracking server with a SQLite store and artifacts in
    ``folder``; stopped (its whole process group) when the block ends."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mlflow = Path(sys.executable).with_name("mlflow")
    command = [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1",
               "--backend-store-uri", f"sqlite:///{folder / 'store.db'}",
               "--artifacts-destination", str(folder / "artifacts")]
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=folder)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mlflow server did not start: "
                                   + (folder / "server.log").read_text()[-2000:])
            time.sleep(0.5)
        yield url, proc
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen) -> None:
    """Stop the server and its workers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
