"""The exceptions trainprof raises on purpose; anything else is a bug."""


class TrainprofError(Exception):
    """Base of every documented trainprof error; its message is one sentence for a person."""


class TraceError(TrainprofError):
    """A trace file or folder cannot be read or is not a Kineto trace."""


class NotATraceError(TraceError):
    """A file that is no trace at all: JSON of another kind (a config, a number) or not JSON.
    Inside a folder such a file is skipped with a warning; named on its own it is an error."""


class BenchError(TrainprofError):
    """A strategy benchmark or checklist was asked for something it cannot do (see docs/bench.md)."""


class HardwareError(TrainprofError):
    """A ``--hardware`` file cannot be read as a device description (see docs/hardware.md)."""
