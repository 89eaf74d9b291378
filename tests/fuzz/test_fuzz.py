"""The fuzz suite: structured mutations of every shared trace, through the API and the command
line. Whatever the damage: the API returns an analysis or raises a documented TrainprofError,
the command exits 0 or 2 (2 with one sentence on stderr), never an internal error and never
past a time bound.

``TRAINPROF_FUZZ_CASES`` sets the number of cases (default 1,000: about 40 s here; the
nightly-size run in docs/robustness.md uses 30,000); ``TRAINPROF_FUZZ_SEED`` replays a run."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import random
import signal
import warnings
from collections import Counter
from pathlib import Path

import pytest

import trainprof
from trainprof.cli import main
from trainprof.errors import TrainprofError

from fuzz.mutations import KINDS, mutate, small_trace
from helpers.paths import (
    ALEXNET,
    BERT,
    COMPILED,
    GPU_METRICS,
    NCCL_TRACE,
    NS_TRACE,
    PARAM,
    RESNET_W0,
    TIMESFORMER,
    TRACE_FILTER,
)

CASES = int(os.environ.get("TRAINPROF_FUZZ_CASES", "1000"))
SEED = int(os.environ.get("TRAINPROF_FUZZ_SEED", "20261124"))
#: One case's time bound, in CPU seconds of this process: the traces are small, so any case
#: past this is a hang (a loop). CPU time, not the clock: on a loaded machine a slow case's
#: clock time grows with the load (one took 20 s by the clock at a load average of 13).
CASE_LIMIT_S = 20.0
#: ... and by the clock, for a case that waits rather than computes (a deadlock).
CASE_WALL_LIMIT_S = 120.0
#: Every this many cases also goes through the command line (in-process).
CLI_EVERY = 5
SOURCES = [RESNET_W0, NS_TRACE, NCCL_TRACE, TRACE_FILTER / "sampled_rank-0.json.gz", ALEXNET,
           TIMESFORMER, BERT, PARAM, COMPILED, GPU_METRICS]


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_bound(cpu_s: float, wall_s: float):
    """Hang raised past ``cpu_s`` of this process's CPU time or ``wall_s`` by the clock."""
    def past(what: str, seconds: float):
        def alarm(signum, frame):  # noqa: ANN001
            raise Hang(f"still running after {seconds:.0f} s {what}")
        return alarm

    timers = [(signal.ITIMER_PROF, signal.SIGPROF, cpu_s, "of CPU"),
              (signal.ITIMER_REAL, signal.SIGALRM, wall_s, "by the clock")]
    previous = [signal.signal(sig, past(what, seconds)) for _, sig, seconds, what in timers]
    for timer, _, seconds, _ in timers:
        signal.setitimer(timer, seconds)
    try:
        yield
    finally:
        for (timer, sig, _, _), handler in zip(timers, previous, strict=True):
            signal.setitimer(timer, 0)
            signal.signal(sig, handler)


def run_api(path: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trainprof.analyze(path).to_dict()
        except TrainprofError:
            return "refused"
    return "analysed"


def run_cli(path: Path, fmt: str) -> tuple[int, str]:
    err = io.StringIO()
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # JSON goes to stdout's buffer
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["analyze", str(path), "--format", fmt, "--no-progress"])
    return code, err.getvalue()


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return [small_trace(p) for p in SOURCES]


def test_no_mutation_makes_an_internal_error_or_a_hang(corpus, tmp_path):
    rng = random.Random(SEED)
    outcomes: Counter[tuple[str, str]] = Counter()
    failures: list[str] = []
    for case in range(CASES):
        kind = KINDS[case % len(KINDS)]
        source = case % len(corpus)
        seed = rng.randrange(2**32)
        data = mutate(corpus[source], kind, random.Random(seed))
        gz = case % 7 == 0
        path = tmp_path / f"case{case % 50}.json{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(data, 1) if gz else data)
        where = f"case {case} ({kind}, {SOURCES[source].name}, seed {seed})"
        try:
            with time_bound(CASE_LIMIT_S, CASE_WALL_LIMIT_S):
                outcome = run_api(path)
                if case % CLI_EVERY == 0:
                    code, err = run_cli(path, ["text", "json", "md"][case % 3])
                    if code not in (0, 2) or (code == 2 and err.count("\n") != 1) \
                            or "internal error" in err:
                        failures.append(f"{where}: CLI exit {code}: {err.strip()[:300]}")
                    elif (code == 0) != (outcome == "analysed"):
                        failures.append(f"{where}: the API {outcome} but the CLI exited {code}")
        except Hang as exc:
            failures.append(f"{where}: hang ({exc})")
            outcome = "hang"
        except Exception as exc:  # noqa: BLE001 (any other exception is the finding)
            failures.append(f"{where}: {type(exc).__name__}: {str(exc)[:200]}")
            outcome = "internal error"
        outcomes[(kind, outcome)] += 1
    table = "\n".join(f"{k:16} {o:15} {n}" for (k, o), n in sorted(outcomes.items()))
    print(f"\n{CASES} cases, seed {SEED}\n{table}")
    assert not failures, f"{len(failures)} of {CASES} cases failed:\n" + "\n".join(failures[:25])
    assert {o for _, o in outcomes} >= {"analysed", "refused"}  # the mutations bite, not all
