"""A Dask cluster as the executor of an analysis: connect to its scheduler, hand out its
``concurrent.futures`` executor, close the connection after.

Needs the optional extra ``trainprof[dask]`` (``dask.distributed``), imported only here and only
when asked for. The workers need trainprof installed and the traces on a filesystem they share
with this process, at the same path. docs/cluster.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from trainprof.errors import TrainprofError

if TYPE_CHECKING:
    from concurrent.futures import Executor

#: Seconds to wait for the scheduler to answer before saying it cannot be reached.
CONNECT_TIMEOUT_S = 10.0


@contextmanager
def dask_executor(scheduler: str | None = None,
                  scheduler_file: str | os.PathLike[str] | None = None,
                  timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[Executor]:
    """An executor whose tasks run on the Dask cluster at ``scheduler`` (``tcp://HOST:8786``)
    or named by ``scheduler_file`` (the JSON file ``dask scheduler --scheduler-file`` writes).

    Raises ``TrainprofError`` (one sentence) when dask is missing, the file cannot be read, or
    the scheduler does not answer within ``timeout_s``.
    """
    if (scheduler is None) == (scheduler_file is None):
        raise ValueError("give either a scheduler address or a scheduler file")
    try:
        from distributed import Client
    except ImportError:
        raise TrainprofError("A Dask scheduler needs dask.distributed: pip install "
                             "'trainprof[dask]'.") from None
    if scheduler_file is not None:
        scheduler = scheduler_address(Path(scheduler_file))
    _check_address(scheduler)  # type: ignore[arg-type]
    try:
        client = Client(address=scheduler, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise TrainprofError(f"Could not reach the Dask scheduler at {scheduler} within "
                             f"{timeout_s:g} s: is it running, and is the address one this "
                             f"machine can reach? ({_reason(exc)})") from None
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()


def scheduler_address(path: Path) -> str:
    """The address in a scheduler file (``{"address": "tcp://...", ...}``)."""
    import json

    try:
        address = json.loads(path.read_text(encoding="utf-8")).get("address")
    except FileNotFoundError:
        raise TrainprofError(f"The scheduler file {path} does not exist (dask scheduler "
                             "--scheduler-file writes it when the scheduler starts).") from None
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise TrainprofError(f"{path} is not a Dask scheduler file ({_reason(exc)}).") from None
    if not isinstance(address, str):
        raise TrainprofError(f"{path} is not a Dask scheduler file (it names no address).")
    return address


def _check_address(address: str) -> None:
    """A one-sentence error for an address Dask cannot parse, before any connection exists."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if scheme in ("tcp", "tls") and not parse_host_port(location)[0]:
            raise ValueError("no host")
    except (ValueError, TypeError) as exc:
        raise TrainprofError(f"{address!r} is not a Dask scheduler address like "
                             f"tcp://HOST:8786 ({_reason(exc)}).") from None


def _reason(exc: BaseException) -> str:
    """The exception's message on one line, without a trailing full stop."""
    text = " ".join(str(exc).split()).rstrip(".")
    return text or type(exc).__name__
