"""`from trainprof.integrations.lightning import TrainprofCallback`; see the capture module."""

from trainprof.capture.integrations.lightning import TrainprofCallback

__all__ = ["TrainprofCallback"]
