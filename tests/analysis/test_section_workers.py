"""A trace's sections on several processes (analysis/parallel/section_workers.py): the serial
result to the bit, whatever a child does, and no child left behind."""

from __future__ import annotations

import functools
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from trainprof.analysis.overview.rank import analyze_trace, overview
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.parallel import section_workers as sw
from trainprof.analysis.section_results import RankSections
from trainprof.analysis.sections import registry
from trainprof.errors import TraceError
from trainprof.trace.load import load_file

from helpers.ctrl_c import AS_IN_A_TERMINAL
from helpers.paths import SHARED_TRACE_FILES

SMALL = next(p for p in SHARED_TRACE_FILES if p.name == "gpu_metrics_input.json")


def exact(analysis) -> str:
    """The JSON text: equal only when every figure is equal to the bit (NaN included)."""
    return json.dumps(analysis.to_dict(), default=str)


def children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


@pytest.fixture(autouse=True)
def no_child_left():
    """Every test ends with no process of its own left, running or unreaped."""
    if threading.active_count() != 1:
        pytest.skip("another thread runs in this test process: it would not fork: "
                    + ", ".join(t.name for t in threading.enumerate()))
    before = {p.pid for p in children()}
    yield
    assert {p.pid for p in children()} == before


@pytest.fixture
def sections():
    """The registry's list of sections, to change in a test; restored after it."""
    saved = list(registry.SECTIONS)
    yield registry.SECTIONS
    registry.SECTIONS[:] = saved


@pytest.fixture(scope="module")
def small():
    trace = load_file(SMALL, workers=1)
    return trace, exact(analyze_trace(trace, workers=1))


@functools.cache
def loaded(path: Path):
    """The shared trace, read once for the tests below."""
    try:
        return load_file(path, workers=1)
    except TraceError:
        return None


@pytest.mark.parametrize("path", SHARED_TRACE_FILES, ids=lambda p: p.name)
def test_two_workers_equal_serial_on_every_shared_trace(path):
    trace = loaded(path)
    if trace is None:
        pytest.skip("not a trace")
    assert exact(analyze_trace(trace, workers=2)) == exact(analyze_trace(trace, workers=1))


def round_trip(result):
    return pickle.loads(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))


@pytest.mark.parametrize("path", SHARED_TRACE_FILES, ids=lambda p: p.name)
def test_every_result_pickles_to_the_same_figures(path):
    """What a child sends back: the analysis made of every section's result, each pickled
    and loaded, is the serial one (whichever process computes what)."""
    trace = loaded(path)
    if trace is None:
        pytest.skip("not a trace")
    steps = find_steps(trace)
    sections = RankSections(**{name: round_trip(fn(trace, steps))
                               for name, fn in registry.SECTIONS})
    got = overview(trace, steps, lambda section: round_trip(section(trace, steps)), sections)
    assert exact(got) == exact(analyze_trace(trace, workers=1))


def whose(name: str):
    """A job whose result is its name and the process that computed it."""
    def job(trace, steps):
        return name, os.getpid()
    return job


def test_children_compute_a_share(small):
    """Three processes, eight jobs of 0.2 s each: every process computes some."""
    trace, _ = small
    names = [f"job{i}" for i in range(8)]

    def slow(name):
        def job(trace, steps):
            time.sleep(0.2)
            return name, os.getpid()
        return job

    results = sw.run_jobs(trace, None, [(n, slow(n)) for n in names], workers=3)
    assert [name for name, _ in results] == names
    pids = {pid for _, pid in results}
    assert os.getpid() in pids and len(pids) == 3


def waits_for_child(marker: Path, name: str, child_does):
    """A job that, in a child, leaves ``marker`` then does ``child_does``; in this process it
    first waits for the marker (so that a child surely took a job) and returns its name."""
    parent = os.getpid()

    def job(trace, steps):
        if os.getpid() != parent:
            marker.write_text(name)
            child_does()
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return name, os.getpid()
    return job


@pytest.mark.parametrize("how", ["exits", "raises", "unpicklable", "killed"])
def test_a_failed_child_leaves_its_jobs_to_the_parent(small, tmp_path, how):
    trace, _ = small
    marker = tmp_path / "taken"
    child_does = {
        "exits": lambda: os._exit(3),
        "raises": raise_trace_error,
        "killed": lambda: os.kill(os.getpid(), 9),
        "unpicklable": lambda: None,
    }[how]
    names = [f"job{i}" for i in range(6)]
    jobs = [(n, waits_for_child(marker, n, child_does)) for n in names]
    if how == "unpicklable":  # the child's result cannot be sent: it is computed again here
        jobs = [(n, lambda t, s, job=job: (job(t, s), lambda: None)) for n, job in jobs]
    results = sw.run_jobs(trace, None, jobs, workers=2)
    if how == "unpicklable":
        results = [r for r, _ in results]
    assert [name for name, _ in results] == names  # none lost, none doubled
    assert {pid for _, pid in results} == {os.getpid()}
    assert marker.read_text() in names


def wrap_deep_sections(sections, marker: Path, child_does, wait: bool = True) -> list[str]:
    """Wrap every deep section of the registry: in a child it leaves ``marker`` and does
    ``child_does``, then computes; here it first waits for the marker (``wait``: so that a child
    surely took one) and is counted in the list returned."""
    parent, calls = os.getpid(), []
    for i, (name, fn) in enumerate(sections):
        def wrapped(t, s, fn=fn, name=name):
            if os.getpid() != parent:
                marker.write_text(name)
                child_does()
            else:
                calls.append(name)
                deadline = time.monotonic() + 20
                while wait and not marker.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            return fn(t, s)
        sections[i] = (name, wrapped)
    return calls


def raise_trace_error():
    raise TraceError("only in the child")


@pytest.mark.parametrize("child_does", [lambda: os._exit(5), raise_trace_error],
                         ids=["exits", "raises"])
def test_a_failing_section_in_a_child_gives_the_serial_result(small, tmp_path, sections,
                                                              child_does):
    """Through the registry: every deep section kills the child computing it, or raises
    there; this process computes each of them once."""
    trace, want = small
    calls = wrap_deep_sections(sections, tmp_path / "taken", child_does)
    assert exact(analyze_trace(trace, workers=2)) == want
    assert (tmp_path / "taken").exists()
    assert sorted(calls) == sorted(name for name, _ in registry.SECTIONS)


def test_a_raising_section_raises_as_serial(small, sections):
    trace, _ = small
    i = next(i for i, (name, _) in enumerate(registry.SECTIONS) if name == "host")

    def bad(t, s):
        raise TraceError("the host section cannot read this trace")

    sections[i] = ("host", bad)
    for workers in (1, 2, 3):
        with pytest.raises(TraceError, match="host section"):
            analyze_trace(trace, workers=workers)


def test_the_first_error_in_serial_order_is_raised(small):
    """Two jobs raise: the one a serial run reaches first is raised, whoever computed it."""
    trace, _ = small

    def raises(exc):
        def job(trace, steps):
            time.sleep(0.05)
            raise exc
        return job

    jobs = [(f"job{i}", whose(f"job{i}")) for i in range(6)]
    jobs[2] = ("job2", raises(KeyError("first")))
    jobs[4] = ("job4", raises(TraceError("second")))
    jobs[5] = ("breakdown", raises(TraceError("taken first")))  # the costliest: taken first
    for workers in (1, 2, 3):
        with pytest.raises(KeyError, match="first"):
            sw.run_jobs(trace, None, jobs, workers)


def test_ctrl_c_stops_the_children(small):
    trace, _ = small
    parent = os.getpid()

    def job(trace, steps):
        if os.getpid() == parent:
            time.sleep(0.3)  # the child has taken the other job by then
            raise KeyboardInterrupt
        time.sleep(60)

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sw.run_jobs(trace, None, [("a", job), ("b", job)], workers=2)
    assert time.monotonic() - start < 10


def test_a_real_ctrl_c_stops_every_process():
    """SIGINT to the whole process group, as a terminal sends it: the analysis stops with
    KeyboardInterrupt and takes its children with it."""
    script = (
        AS_IN_A_TERMINAL +
        "import time\n"
        "from trainprof.analysis.parallel.section_workers import run_jobs\n"
        "def job(trace, steps):\n"
        "    print('started', flush=True)\n"
        "    time.sleep(120)\n"
        "run_jobs(None, None, [('a', job), ('b', job), ('c', job)], workers=3)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        assert "started" in proc.stdout.readline()
        deadline = time.monotonic() + 30
        kids: list[psutil.Process] = []
        while len(kids) < 2 and time.monotonic() < deadline:
            kids = psutil.Process(proc.pid).children()
            time.sleep(0.05)
        assert len(kids) == 2
        time.sleep(0.3)  # the children are in their jobs too
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    _, alive = psutil.wait_procs(kids, timeout=5)
    assert alive == []


#: A process that sends Ctrl-C (SIGINT to its process group, as a terminal does) at a timer's
#: delay swept over the whole of ``run_jobs`` (forks, jobs, collection, the end), once per
#: round, and reports what went wrong: a Ctrl-C sent that raised nothing (it was swallowed:
#: with long jobs, the analysis then hangs), a child that came back from the parent's
#: ``run_jobs`` (it got the Ctrl-C before it ignored it), a child left running or unreaped.
SWEEP = AS_IN_A_TERMINAL + """
import os, signal, sys, time
from trainprof.analysis.parallel.section_workers import run_jobs

MAIN, ROUNDS, SPAN = os.getpid(), int(sys.argv[1]), float(sys.argv[2])
sent = False

def ctrl_c(signum, frame):
    global sent
    sent = True
    os.killpg(0, signal.SIGINT)

def job(trace, steps):
    deadline = time.monotonic() + SPAN / 3
    while time.monotonic() < deadline:
        time.sleep(0.001)

signal.signal(signal.SIGALRM, ctrl_c)
interrupted = 0
for i in range(ROUNDS):
    sent = False
    try:
        signal.setitimer(signal.ITIMER_REAL, SPAN * (i + 0.5) / ROUNDS)
        run_jobs(None, None, [(name, job) for name in 'abcdef'], workers=3)
        signal.setitimer(signal.ITIMER_REAL, 0)
        if sent:
            print('LOST', i, 'the Ctrl-C raised nothing', flush=True)
    except KeyboardInterrupt:
        signal.setitimer(signal.ITIMER_REAL, 0)
        interrupted += 1
    if os.getpid() != MAIN:
        print('ESCAPED', i, 'a child returned from the parent code', flush=True)
        os._exit(3)
    try:
        if os.waitpid(-1, os.WNOHANG) is not None:
            print('LEFT', i, 'a child was left behind', flush=True)
            os.waitpid(-1, 0)
    except ChildProcessError:
        pass
print('interrupted', interrupted, flush=True)
"""


def test_ctrl_c_at_any_moment_stops_every_child():
    """The Ctrl-C of a terminal, at 80 moments spread over the analysis (3 processes, six 20 ms
    jobs): every one raises KeyboardInterrupt in this process only, and leaves no child. Before
    SIGINT was held back over each fork, 19 to 37 rounds of 80 left a child behind, and
    interrupts were dropped in at-fork handlers (docs/robustness.md, "Ctrl-C")."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    rounds = 80
    proc = subprocess.run([sys.executable, "-c", SWEEP, str(rounds), "0.06"],
                          capture_output=True, text=True, env=env, timeout=120,
                          start_new_session=True)
    problems = [line for line in proc.stdout.splitlines() if not line.startswith("interrupted")]
    assert problems == [] and proc.stderr == "" and proc.returncode == 0, \
        (problems[:5], proc.stderr[-2000:])
    interrupted = int(proc.stdout.split()[-1])
    assert interrupted >= rounds * 0.7  # the Ctrl-C came during the analysis, not after it


def test_a_child_neither_flushes_stdio_nor_runs_atexit():
    """Text buffered here before the fork and an atexit handler each come out once."""
    script = (
        "import atexit, sys\n"
        "from trainprof.analysis.overview.rank import analyze_trace\n"
        "from trainprof.trace.load import load_file\n"
        f"trace = load_file({str(SMALL)!r}, workers=1)\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "sys.stdout.write('buffered before the fork;')\n"
        "analyze_trace(trace, workers=3)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    assert out.count("buffered before the fork;") == 1
    assert out.count("atexit ran") == 1


def test_worker_count(small, monkeypatch):
    trace, _ = small
    monkeypatch.delenv(sw.WORKERS_ENV, raising=False)
    monkeypatch.setattr(sw, "usable_cores", lambda: 4)
    monkeypatch.setattr(sw, "PARALLEL_MIN_EVENTS", len(trace.events))
    assert sw.section_workers(trace) == 4
    monkeypatch.setattr(sw, "PARALLEL_MIN_EVENTS", len(trace.events) + 1)
    assert sw.section_workers(trace) == 1
    monkeypatch.setenv(sw.WORKERS_ENV, "3")
    assert sw.section_workers(trace) == 3
    monkeypatch.setenv(sw.WORKERS_ENV, "1")
    monkeypatch.setattr(sw, "PARALLEL_MIN_EVENTS", 0)
    assert sw.section_workers(trace) == 1
    monkeypatch.setenv(sw.WORKERS_ENV, "many")  # not a count: the choice stands
    assert sw.section_workers(trace) == 4


def test_no_fork_while_another_thread_runs(small, monkeypatch):
    trace, _ = small
    monkeypatch.setenv(sw.WORKERS_ENV, "2")
    assert sw.section_workers(trace) == 2
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not sw.fork_is_safe()
        assert sw.section_workers(trace) == 1
    finally:
        stop.set()
        other.join()


def test_analyze_uses_the_env_override(small, tmp_path, sections, monkeypatch):
    """``analyze_trace`` without ``workers`` forks as TRAINPROF_SECTION_WORKERS tells."""
    trace, want = small
    marker = tmp_path / "taken"
    original = list(sections)
    wrap_deep_sections(sections, marker, lambda: None, wait=False)
    monkeypatch.setenv(sw.WORKERS_ENV, "1")
    assert exact(analyze_trace(trace)) == want
    assert not marker.exists()
    sections[:] = original
    wrap_deep_sections(sections, marker, lambda: None)
    monkeypatch.setenv(sw.WORKERS_ENV, "2")
    assert exact(analyze_trace(trace)) == want
    assert marker.exists()


def test_home_jobs_stay_in_this_process(small):
    """The critical path (the largest result to send back) is computed here, never queued;
    the other jobs are still shared, and every result comes back in the jobs' order."""
    trace, _ = small

    def slow(name):
        def job(trace, steps):
            time.sleep(0.1)
            return name, os.getpid()
        return job

    names = ["breakdown", "host", "critical_path", "kernels", "idle"]
    results = sw.run_jobs(trace, None, [(n, slow(n)) for n in names], workers=2)
    assert [name for name, _ in results] == names
    assert dict(results)["critical_path"] == os.getpid()
    assert len({pid for _, pid in results}) == 2


def test_longest_first():
    """The jobs queue by their sections' measured cost, ties in the serial order; each
    section declares its own (a section without one counts DEFAULT_COST)."""
    from trainprof.analysis.overview.rank import OVERVIEW_SECTIONS
    from trainprof.analysis.sections.registry import SECTIONS
    from trainprof.analysis.streaming.windows import DEFAULT_COST

    costs = [0.02, 2.2, DEFAULT_COST, 1.3, 0.53, DEFAULT_COST]
    assert sw.longest_first(costs) == [1, 3, 4, 2, 5, 0]
    declared = dict([*SECTIONS, *OVERVIEW_SECTIONS.items()])
    assert declared["breakdown"].cost == 2.2 and declared["modules"].cost == 0.02
    assert sw.longest_first([s.cost for s in declared.values()])[0] == \
        list(declared).index("breakdown")


def test_children_must_fit_in_memory(small, monkeypatch):
    trace, _ = small
    monkeypatch.setenv(sw.WORKERS_ENV, "4")
    resident = sw.resident_bytes()
    assert resident == pytest.approx(psutil.Process().memory_info().rss, rel=0.05)
    assert sw.section_workers(trace) == 4  # this machine has room for 3 small children
    share = resident * sw.CHILD_MEMORY_SHARE
    monkeypatch.setattr(sw, "available_memory", lambda: int(2.5 * share))
    assert sw.section_workers(trace) == 3
    monkeypatch.setattr(sw, "available_memory", lambda: int(0.5 * share))
    assert sw.section_workers(trace) == 1
    monkeypatch.setattr(sw, "available_memory", lambda: None)
    assert sw.section_workers(trace) == 4


def test_a_fork_refused_leaves_the_work_here(small, monkeypatch):
    """No process left to fork (EAGAIN): this process computes every section."""
    trace, want = small

    def refuse():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(sw.os, "fork", refuse)
    assert exact(analyze_trace(trace, workers=2)) == want


def test_children_reaped_by_the_system(small):
    """With SIGCHLD ignored the system reaps the children itself: their results still count."""
    trace, _ = small
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        jobs = [(f"job{i}", whose(f"job{i}")) for i in range(4)]
        jobs[0] = ("job0", lambda t, s: (time.sleep(0.3), ("job0", os.getpid()))[1])
        results = sw.run_jobs(trace, None, jobs, workers=2)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert [name for name, _ in results] == [f"job{i}" for i in range(4)]
    assert len({pid for _, pid in results}) == 2


def test_what_prepare_caches_the_children_inherit(small):
    trace, _ = small
    key = "_test_prepared"

    def prepare(t, s):
        t.__dict__[key] = os.getpid()

    def job(t, s):
        time.sleep(0.1)
        return t.__dict__.get(key), os.getpid()

    try:
        results = sw.run_jobs(trace, None, [(f"job{i}", job) for i in range(6)], 2, prepare)
    finally:
        trace.__dict__.pop(key, None)
    assert {prepared for prepared, _ in results} == {os.getpid()}
    assert len({pid for _, pid in results}) == 2  # read in the child as well


def test_a_failing_prepare_is_met_again_by_the_sections(small):
    """``prepare`` raising is no error of its own: the sections raise it in the serial order."""
    trace, _ = small

    def prepare(t, s):
        raise TraceError("a fact several sections need")

    def needs_it(t, s):
        prepare(t, s)

    jobs = [("a", whose("a")), ("b", needs_it), ("c", whose("c"))]
    with pytest.raises(TraceError, match="several sections"):
        sw.run_jobs(trace, None, jobs, 2, prepare)
    ok = [("a", whose("a")), ("c", whose("c"))]
    assert [name for name, _ in sw.run_jobs(trace, None, ok, 2, prepare)] == ["a", "c"]
