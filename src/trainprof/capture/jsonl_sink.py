"""The step timer's JSONL file: one JSON object per line, appended.

A file that cannot be opened or written (a missing folder is created; a path that is a folder, a
full disk) warns once and stops the file, never the timer, nor the training.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Any

from trainprof.capture.safety import WarnOnce


class JsonlSink:
    """Appends records to `path`; after a failure, every call does nothing."""

    def __init__(self, path: str | os.PathLike[str], warn: WarnOnce) -> None:
        self.path = Path(path)
        self._warn = warn
        self._file: IO[str] | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as error:
            self._give_up("could not open", error)

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(record) + "\n")
        except OSError as error:
            self._give_up("could not write to", error)

    def flush(self) -> None:
        if self._file is None:
            return
        try:
            self._file.flush()
        except OSError as error:
            self._give_up("could not write to", error)

    def close(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.close()
        except OSError as error:
            self._warn(f"could not write to the step timer's JSONL file {str(self.path)!r}; "
                       "timing goes on", error)

    def _give_up(self, what: str, error: OSError) -> None:
        file, self._file = self._file, None
        if file is not None:  # closing flushes the bytes that just failed again: let it fail
            with contextlib.suppress(OSError):
                file.close()
        self._warn(f"{what} the step timer's JSONL file {str(self.path)!r}; timing goes on "
                   "without it", error)
