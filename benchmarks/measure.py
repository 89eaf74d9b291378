"""Run a command in a fresh process and measure its wall time and peak memory.

Standard library only: the benchmark workers may run under another interpreter (see
``bench_analyze.py --hta-python``), and they import this module too.
"""

from __future__ import annotations

import compileall
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = REPO_ROOT / "benchmarks" / "out"
#: The issue's reference trace: 53 MB of JSON, 216k events, one rank (V100, NCCL, 5 steps).
REFERENCE_TRACE = (
    REPO_ROOT
    / "tests"
    / "data"
    / "traces"
    / "hta"
    / "tests"
    / "data"
    / "df_index_resolver"
    / "df_index_resolver.json.gz"
)

MIB = 1024 * 1024


@dataclass
class Measured:
    """One finished child process: exit status, wall time and peak resident memory."""

    returncode: int
    wall_s: float
    max_rss_mib: float
    stderr_tail: str


def run_measured(
    cmd: list[str], cwd: Path | None = None, timeout_s: float | None = None
) -> Measured:
    """Run ``cmd`` to completion; wall time from start to exit, peak RSS from ``wait4``.

    ``wait4`` gives this child's own ``ru_maxrss`` (the kernel's high-water mark of its resident
    set, including any children it waited for, as a maximum, not a sum), so each tool is
    measured alone even though they run one after another from the same parent.
    """
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        killer = threading.Timer(timeout_s, proc.kill) if timeout_s else None
        if killer:
            killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            if killer:
                killer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-4000:].decode("utf-8", "replace")
    return Measured(proc.returncode, wall, usage.ru_maxrss * 1024 / MIB, tail)


def self_peak_rss_mib() -> float:
    """This process's peak resident set so far (Linux reports ``ru_maxrss`` in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def relative(path: Path) -> str:
    """``path`` relative to the repository root, so that no machine path is written out."""
    return os.path.relpath(path, REPO_ROOT)


def machine_info() -> dict:
    """CPU, core count, memory and Python, for the record next to each figure."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    with contextlib.suppress(ValueError, OSError):
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1) if mem_gib else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def package_versions(names: list[str], python: str = sys.executable) -> dict[str, str | None]:
    """Installed versions of ``names`` in the environment of interpreter ``python``."""
    code = (
        "import json, sys\n"
        "from importlib.metadata import version, PackageNotFoundError\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try:\n"
        "        out[n] = version(n)\n"
        "    except PackageNotFoundError:\n"
        "        out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    try:
        done = subprocess.run(
            [python, "-c", code, *names], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return dict.fromkeys(names)
    import json

    return json.loads(done.stdout)


def cache_bytecode(python: str | None = None) -> None:
    """Write the bytecode cache of trainprof's sources (and of whatever ``python`` has
    installed), as an installed package has it. Where ``PYTHONDONTWRITEBYTECODE`` is set (this
    machine sets it) an editable install never gets one, and every fresh process would compile
    trainprof's modules from source (about 0.2 s of its start-up) while the other tools' wheels
    came with their bytecode: the whole-process comparison would be unfair."""
    compileall.compile_dir(REPO_ROOT / "src", quiet=1)
    if python and python != sys.executable:
        subprocess.run([python, "-m", "compileall", "-q", "-x", "test", *site_dirs(python)],
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def site_dirs(python: str) -> list[str]:
    """The site-packages folders of interpreter ``python``."""
    out = subprocess.run([python, "-c", "import site; print(*site.getsitepackages(), sep='\\n')"],
                         capture_output=True, text=True, check=False).stdout
    return [line for line in out.splitlines() if line]


def run_child_script(code: str, tag: str, mode: str, workers: int, trace: Path,
                     timeout: float) -> dict:
    """Run ``code`` (a script that writes its figures as JSON to ``sys.argv[4]``) in a fresh
    interpreter on this checkout's ``src/`` with ``mode workers trace out`` as arguments; its
    figures with the process's wall time and peak RSS added."""
    import json

    out = OUT_DIR / f".{tag}-{os.getpid()}.json"
    out.unlink(missing_ok=True)
    src = str(REPO_ROOT / "src")
    cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r})\n" + code,
           mode, str(workers), str(trace), str(out)]
    done = run_measured(cmd, timeout_s=timeout)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"{mode} with {workers} failed: {done.stderr_tail[-800:]}")
    figures = json.loads(out.read_text())
    out.unlink()
    figures.update(process_s=done.wall_s, peak_rss_mib=done.max_rss_mib)
    return figures
