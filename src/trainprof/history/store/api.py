"""``trainprof.history.record``: put any run trainprof measured into the history."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from trainprof.history.store import context as where
from trainprof.history.store import sources
from trainprof.history.store.database import History
from trainprof.history.store.errors import HistoryInputError
from trainprof.history.store.rows import RunRecord

Recordable = Any  # Analysis | StepTimer | dict | str | os.PathLike | RunRecord


def record(run: Recordable, *, name: str | None = None, db: str | os.PathLike[str] | None = None,
           **context: Any) -> int:
    """Records a run in the history and returns its id (``history:ID`` for ``trainprof compare``).

    ``run`` is an ``Analysis`` (``trainprof.analyze``), a ``StepTimer`` (its summary and every
    step's time) or its ``summary()`` dict, a saved JSON result, a ``cluster_summary.json``
    (a dict or a path to the file), or a ``RunRecord``. ``name`` defaults to the trace's or the
    script's name; ``db`` to ``$TRAINPROF_HISTORY_DB``, else ``.trainprof/history.db``.
    ``context`` overrides recorded fields (``git_commit``, ``host``, ``job``, ``rank``...).

    Raises ``HistoryCorruptError``, ``HistoryBusyError`` or another ``HistoryError`` when the
    row cannot be written, after keeping it in the pending file beside the database.
    """
    return History(db).record(to_record(run, name=name, **context))


def to_record(run: Recordable, *, name: str | None = None, **context: Any) -> RunRecord:
    """The `RunRecord` for ``run`` (see `record`), with where and when it was recorded."""
    if isinstance(run, RunRecord):
        rec = run
        for key, value in context.items():
            setattr(rec, key, value)
    elif isinstance(run, dict):
        rec = sources.from_json(run, name or where.default_name(run.get("source") or None),
                                **context)
    elif isinstance(run, str | os.PathLike):
        rec = _from_file(Path(run), name, context)
    elif callable(getattr(run, "to_run_record", None)):  # a StepTimer hands a plain record
        rec = sources.from_timer_record(run.to_run_record(), name or where.default_name(),
                                        **context)
    elif hasattr(run, "ranks") and hasattr(run, "findings"):
        rec = sources.from_analysis(run, name or where.default_name(run.source or None), **context)
    else:
        raise HistoryInputError(f"Cannot record a {type(run).__name__} in the history.")
    return with_context(rec, context)


def with_context(rec: RunRecord, given: dict[str, Any]) -> RunRecord:
    """Fills in the commit and host unless given or already known, and the job for a row
    that one rank of a distributed job writes."""
    if "git_commit" not in given and rec.git_commit is None:
        rec.git_commit = where.git_commit()
    if "host" not in given and rec.host is None:
        rec.host = where.host()
    if "job" not in given and rec.job is None and rec.rank is not None and (rec.world_size or 1) > 1:
        rec.job = where.job_key()  # one rank's row of a distributed job
    return rec


def _from_file(path: Path, name: str | None, context: dict[str, Any]) -> RunRecord:
    try:
        data = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as error:
        raise HistoryInputError(f"Cannot read {path} as JSON to record it ({error}).") from None
    if name is None:
        inner = data.get("source") if isinstance(data, dict) else None
        name = where.default_name(inner or (path.parent if path.name == "cluster_summary.json"
                                            else path))
    context.setdefault("source", str(path))
    return sources.from_json(data, name, **context)
