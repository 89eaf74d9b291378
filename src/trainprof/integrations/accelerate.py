"""`from trainprof.integrations.accelerate import profile`; see the capture module."""

from trainprof.capture.integrations.accelerate import config_from_profile_kwargs, profile

__all__ = ["config_from_profile_kwargs", "profile"]
