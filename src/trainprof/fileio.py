"""Writing output files atomically: a temporary file in the same folder, then a rename."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from trainprof.errors import TrainprofError

if TYPE_CHECKING:
    from rich.console import Console

#: Width of text reports written to a file (a terminal's own width is used on screen).
FILE_WIDTH = 120
#: zlib's own default: about as small as level 9 on trace JSON, several times faster to write.
GZIP_LEVEL = 6


def temp_path_beside(path: Path, tag: str = "") -> Path:
    """A new, empty, hidden file next to ``path``, with mode 0o666 less the umask (mkstemp's
    0o600 would make reports unreadable to the user's group)."""
    while True:
        candidate = path.parent / f".{path.name}{tag}.{os.urandom(4).hex()}.tmp"
        try:
            os.close(os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return candidate
        except FileExistsError:
            continue


@contextlib.contextmanager
def _cannot_write(path: Path) -> Iterator[None]:
    """An ``OSError`` while creating or finishing ``path`` as one sentence (exit 2 in the CLI)."""
    try:
        yield
    except OSError as exc:
        raise TrainprofError(f"Cannot write {path}: {exc.strerror or exc}.") from None


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary stream that replaces ``path`` only when the block ends without an error, so that
    readers see the old file or the whole new one; gzipped when the name ends in ``.gz`` (with
    no name or time in the header, so equal content gives equal files)."""
    path = Path(path)
    with _cannot_write(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "it is a folder; give a file name")
        tmp = temp_path_beside(path)
    try:
        with open(tmp, "wb") as raw:
            if path.name.endswith(".gz"):
                import gzip

                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL,
                                   mtime=0) as zipped:
                    yield cast(IO[bytes], zipped)  # a GzipFile writes bytes like one
            else:
                yield raw
            with _cannot_write(path):
                raw.flush()
                os.fsync(raw.fileno())
        with _cannot_write(path):
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (gzipped when the name ends in ``.gz``)."""
    with atomic_output(path) as handle:
        handle.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def announce_written(path: str | os.PathLike[str]) -> None:
    """The one line every command prints on stderr once it has written a file."""
    print(f"trainprof: wrote {path}", file=sys.stderr)


def write_or_print(text: str, output: str | os.PathLike[str] | None) -> None:
    """``text`` to standard output, or written atomically to ``output`` (and said so)."""
    if output is None:
        sys.stdout.write(text)
        return
    atomic_write_text(output, text)
    announce_written(output)


def print_or_save(render: Callable[[Console], None],
                  output: str | os.PathLike[str] | None = None) -> None:
    """``render(console)`` to the terminal, or as plain text to ``output``, written atomically
    (rich is imported here: writing JSON never needs it)."""
    from rich.console import Console

    if output is None:
        render(Console())
        return
    console = Console(record=True, width=FILE_WIDTH, file=io.StringIO())
    render(console)
    write_or_print(console.export_text(), output)
