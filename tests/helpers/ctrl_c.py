"""For the tests that send a Ctrl-C to a script of their own (SIGINT to its process group, as a
terminal sends it): ``AS_IN_A_TERMINAL`` goes first in the script, so that SIGINT raises
KeyboardInterrupt there whatever the test run inherited. A run started in the background of a
non-interactive shell (``cmd &``) has SIGINT ignored, and a process keeps an ignored SIGINT
across exec: the scripts' Ctrl-C then raised nothing, on the old code as on the new."""

AS_IN_A_TERMINAL = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def ctrl_c_as_a_worker_starts(module: str, run: str) -> str:
    """A script that imports ``module`` (one with a ``_Worker.start()``), sends a Ctrl-C the
    moment its first worker has been started (before the caller has recorded it and before the
    worker's Python has started), runs ``run`` (arguments in ``sys.argv[1:]``) and prints what
    went wrong: 'not interrupted', or 'a worker was left behind' (running or unreaped)."""
    return AS_IN_A_TERMINAL + f"""
import os, signal, sys
from pathlib import Path
import {module} as workers

start = workers._Worker.start

def start_then_ctrl_c():
    worker = start()
    os.killpg(0, signal.SIGINT)
    return worker

workers._Worker.start = staticmethod(start_then_ctrl_c)
try:
    {run}
    print('not interrupted')
except KeyboardInterrupt:
    pass
try:
    if os.waitpid(-1, os.WNOHANG) is not None:
        print('a worker was left behind')
except ChildProcessError:
    pass
"""
