"""Which files are Nsight Systems exports or reports, and the SQLite export to read for one.

Light on purpose (no numpy, no sqlite3): trace/discover.py and trace/load.py call it for every
file they see.
"""


from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from trainprof.errors import TraceError

if TYPE_CHECKING:
    from trainprof.trace.model import Trace

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: File names of Nsight Systems exports and reports.
NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def is_nsys_name(name: str) -> bool:
    """Whether a file name is an nsys export or report (folder discovery)."""
    return name.endswith(NSYS_SUFFIXES)


def is_nsys_file(path: Path) -> bool:
    """Whether a file is an nsys report (by name) or a SQLite database (by its magic)."""
    return path.name.endswith(_REPORT_SUFFIXES) or is_sqlite(path)


def is_sqlite(path: Path) -> bool:
    """Whether the file starts with the SQLite 3 magic."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def export_command(report: Path) -> list[str]:
    """The command that writes a report's SQLite export beside it."""
    return ["nsys", "export", "--type", "sqlite", "--output", str(report.with_suffix(".sqlite")),
            str(report)]


def sqlite_of(path: Path) -> Path:
    """The SQLite export to read for ``path``: itself, or a report converted by nsys."""
    if not path.name.endswith(_REPORT_SUFFIXES):
        return path
    command = export_command(path)
    target = Path(command[-2])
    if target.exists() and target.stat().st_mtime >= path.stat().st_mtime:
        return target
    if shutil.which("nsys") is None:
        raise TraceError(f"{path} is an Nsight Systems report and nsys is not on the PATH to "
                         f"export it: run `{' '.join(command)}` and analyse {target.name}.")
    import subprocess

    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not target.exists():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TraceError(f"`{' '.join(command)}` failed ({last[0]}).")
    return target


def read_nsys(path: Path, step_marker: re.Pattern[str] | None = None) -> list[Trace]:
    """One trace per process with GPU work, in rank order. Raises ``TraceError``."""
    from trainprof.trace.nsys.build import read_export

    return read_export(sqlite_of(path), step_marker)
