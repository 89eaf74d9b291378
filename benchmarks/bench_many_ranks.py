"""Many ranks, locally and on a Dask cluster: `trainprof analyze` on N copies of a real trace.

The copies are a rank of HTA's ``trace_filter`` (one rank of a 128-rank recommender job, in
``tests/data/traces``), each with its own ``distributedInfo.rank``, written to a temporary folder
that is deleted after (never the repository). Two runs of the command, each a fresh process:

- local: ``trainprof analyze DIR`` with its default worker processes (as many as the cores);
- Dask: ``trainprof analyze DIR --scheduler-file F`` against a local cluster started here (one
  ``dask scheduler`` and ``--dask-workers`` one-thread ``dask worker`` processes, stopped after).

Reported: wall time, the peak resident memory of the client process alone (the command) and,
for the local run, of the command with its workers; both results must be identical. psutil
samples every 10 ms. Results go to ``benchmarks/out/many_ranks.json``; docs/cluster.md has them.

    .venv/bin/python benchmarks/bench_many_ranks.py [--ranks 1024] [--dask-workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ranks import make_copies  # noqa: E402
from measure import MIB, OUT_DIR, REPO_ROOT, machine_info, relative  # noqa: E402

DEFAULT_TRACE = (REPO_ROOT / "tests" / "data" / "traces" / "hta" / "tests" / "data"
                 / "trace_filter" / "sampled_rank-0.json.gz")
SAMPLE_S = 0.01
#: The longest the local Dask cluster may take to start, and to live.
START_S, LIFETIME_S = 60.0, 3600


def run_sampled(cmd: list[str]) -> dict:
    """Wall time and peak RSS of the process alone and of its whole tree."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    top = psutil.Process(proc.pid)
    peak_client = peak_tree = 0
    while proc.poll() is None:
        try:
            own = top.memory_info().rss
            tree = own + sum(_rss(c) for c in top.children(recursive=True))
        except psutil.Error:
            own = tree = 0
        peak_client, peak_tree = max(peak_client, own), max(peak_tree, tree)
        time.sleep(SAMPLE_S)
    err = proc.communicate()[1]
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return {"wall_s": time.perf_counter() - start, "client_rss_mib": peak_client / MIB,
            "tree_rss_mib": peak_tree / MIB}


def _rss(p: psutil.Process) -> int:
    try:
        return p.memory_info().rss
    except psutil.Error:
        return 0


class LocalDask:
    """A scheduler and ``workers`` one-thread workers on 127.0.0.1, as subprocesses."""

    def __init__(self, folder: Path, workers: int) -> None:
        self.file = folder / "scheduler.json"
        bin_dir = Path(sys.executable).parent
        env = dict(os.environ)
        src = str(REPO_ROOT / "src")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        common = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.procs = [subprocess.Popen(
            [str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
             "--no-dashboard", "--scheduler-file", str(self.file), "--idle-timeout",
             f"{LIFETIME_S}s"], **common)]
        deadline = time.monotonic() + START_S
        while not (self.file.is_file() and self.file.stat().st_size):
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit("the Dask scheduler did not start")
            time.sleep(0.1)
        self.procs += [subprocess.Popen(
            [str(bin_dir / "dask"), "worker", "--scheduler-file", str(self.file), "--nthreads",
             "1", "--no-nanny", "--no-dashboard", "--lifetime", f"{LIFETIME_S}s"], **common)
            for _ in range(workers)]
        from distributed import Client

        with Client(scheduler_file=str(self.file), timeout=START_S) as client:
            client.wait_for_workers(workers, timeout=START_S)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--dask-workers", type=int, default=2)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "trainprof", "analyze"]
    with tempfile.TemporaryDirectory(prefix="trainprof-many-ranks-") as tmp:
        folder = Path(tmp) / "ranks"
        folder.mkdir()
        started = time.perf_counter()
        json_size = make_copies(args.trace, folder, args.ranks)
        made_s = time.perf_counter() - started
        local_out, dask_out = Path(tmp) / "local.json", Path(tmp) / "dask.json"
        local = run_sampled(cli + [str(folder), "--format", "json", "-o", str(local_out)])
        cluster = LocalDask(Path(tmp), args.dask_workers)
        try:
            remote = run_sampled(cli + [str(folder), "--scheduler-file", str(cluster.file),
                                        "--format", "json", "-o", str(dask_out)])
        finally:
            cluster.stop()
        identical = local_out.read_bytes() == dask_out.read_bytes()
        result_mb = local_out.stat().st_size / 1e6
    report = {"trace": relative(args.trace), "ranks": args.ranks,
              "json_mb_per_rank": json_size / 1e6, "copies_made_s": made_s,
              "dask_workers": args.dask_workers, "machine": machine_info(),
              "load_average": os.getloadavg()[0], "local": local, "dask": remote,
              "identical": identical, "json_result_mb": result_mb}
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "many_ranks.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.ranks} copies of {report['trace']} ({report['json_mb_per_rank']:.1f} MB of "
          f"JSON each); load average {report['load_average']:.2f}")
    print(f"{'run':<28} {'wall s':>8} {'client MiB':>11} {'with workers MiB':>17}")
    print(f"{'local (default workers)':<28} {local['wall_s']:>8.1f} "
          f"{local['client_rss_mib']:>11.0f} {local['tree_rss_mib']:>17.0f}")
    print(f"{f'Dask ({args.dask_workers} workers)':<28} {remote['wall_s']:>8.1f} "
          f"{remote['client_rss_mib']:>11.0f} {'-':>17}")
    print(f"results identical: {identical}; JSON result {result_mb:.1f} MB")


if __name__ == "__main__":
    main()
