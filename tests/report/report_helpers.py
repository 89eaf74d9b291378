"""Helpers of the report tests: results computed once per session, the hostile trace, and the
system Chromium (browser tests skip LOUDLY when it is missing).

Plain functions, imported where used (tests/helpers holds what every folder shares).
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import pytest
from browser import find_chromium

from trainprof.commands.report import report_result

INSTALL_HINT = "apt-get update && apt-get install -y chromium"
#: Names a trace can hold; each must show as text and run nothing.
IMG_PAYLOAD = '<img src=x onerror="window.__pwned=1;alert(1)">'
SCRIPT_PAYLOAD = "</script><script>window.__pwned=2;alert(2)</script>"
PIPE_PAYLOAD = "a|b`c`*d*_e_[f](javascript:g)"


@functools.cache
def result_of(path: Path) -> dict:
    """The report's result dict for a trace, computed once (shared by tests: do not mutate)."""
    return report_result(path)


def hostile_trace(folder: Path) -> Path:
    """Two GPU steps whose op, kernel and file names are HTML/JS/Markdown payloads."""
    from helpers.tracegen import TraceBuilder

    b = TraceBuilder()
    for n in range(2):
        t = n * 1000.0
        b.step(n, t, 1000)
        op = b.op(SCRIPT_PAYLOAD, t + 10, 300)
        b.launch(t + 20, 5, name=IMG_PAYLOAD, k_ts=t + 40, k_dur=400,
                 external_id=op["args"]["External id"])
        b.op(PIPE_PAYLOAD, t + 400, 100)
    b.metadata["deviceProperties"] = [{"id": 0, "name": IMG_PAYLOAD, "totalGlobalMem": 1e9}]
    return b.write(folder / f"{IMG_PAYLOAD.replace('/', '_')}.json")


def need_chromium() -> str:
    """The system Chromium, or a loud skip (reason and a warning in the summary)."""
    path = find_chromium()
    if path is None:
        message = (f"!!! NO CHROMIUM: the HTML report was NOT tested in a browser. Install it "
                   f"with `{INSTALL_HINT}` !!!")
        warnings.warn(message, stacklevel=2)
        pytest.skip(message)
    return path


@functools.cache
def analysis_of(path: Path):
    """``trainprof.analyze(path)``, computed once (shared by tests: do not mutate)."""
    import trainprof

    return trainprof.analyze(path)
