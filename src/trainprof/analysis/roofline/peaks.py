"""The device whose peaks the roofline and the collectives use: ``--hardware`` or the table."""

from __future__ import annotations

from trainprof.hardware.table import Device, device_for
from trainprof.trace.model import Trace


def trace_device(trace: Trace, given: Device | None = None) -> tuple[Device | None, str | None]:
    """(device, where it came from: "--hardware" when ``given``, else "table"), or (None, None)
    when the trace has no GPU or its GPU is not in the table."""
    if given is not None:
        return given, "--hardware"
    device = device_for(trace.device_name()) if trace.has_gpu else None
    return device, None if device is None else "table"
