"""Event columns derived once per loaded trace and shared by every section.

Stored on the ``Events`` object itself, so they live and die with it (a window of a streamed
trace is its own ``Events``). Like the call tree's cache (analysis/calls/cache.py), they assume
the columns are not rewritten in place once an analysis has read them (columns replaced
by new arrays are noticed).
"""

from __future__ import annotations

import numpy as np

from trainprof.trace.model import Events

_END = "_trainprof_end"


def event_ends(ev: Events) -> np.ndarray:
    """``ev.ts + ev.dur``, computed on first use; read-only, since every section shares it."""
    cached = ev.__dict__.get(_END)
    if cached is not None and cached[0] is ev.ts and cached[1] is ev.dur:
        return cached[2]
    end = ev.ts + ev.dur
    end.flags.writeable = False
    ev.__dict__[_END] = (ev.ts, ev.dur, end)
    return end
