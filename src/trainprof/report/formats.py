"""The output formats: one renderer per format and result type, in one table.

A renderer writes a result (an ``Analysis`` of ``trainprof analyze``, a ``Comparison`` of
``trainprof compare``) to a file, atomically, or to standard output when no file is given, and
says on stderr that it wrote the file. The commands and the command line's ``--format`` choices
read ``FORMATS``: a new format is one renderer function and one entry here
(docs/contributing.md). The renderers' modules are imported when one runs, so that importing
this table costs nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainprof.fileio import announce_written, print_or_save, write_or_print

if TYPE_CHECKING:
    from trainprof.analysis.results import Analysis
    from trainprof.diagnose.comparison import Comparison

Output = str | os.PathLike[str] | None
#: ``render(result, output, top)``: ``top`` rows per table where the format has tables.
Renderer = Callable[[Any, Output, int], None]


def _analysis_text(analysis: Analysis, output: Output, top: int) -> None:
    from trainprof.report.terminal.report import print_analysis

    print_or_save(lambda console: print_analysis(analysis, console, top=top), output)


def _analysis_json(analysis: Analysis, output: Output, top: int) -> None:
    from trainprof.report.json import json_chunks, write_json

    if output:
        announce_written(write_json(analysis, output))
    else:
        sys.stdout.buffer.writelines(json_chunks(analysis))  # a rank at a time


def _analysis_markdown(analysis: Analysis, output: Output, top: int) -> None:
    from trainprof.report.markdown.report import to_markdown

    write_or_print(to_markdown(analysis, top=top), output)


def _analysis_html(analysis: Analysis, output: Output, top: int) -> None:
    from trainprof.report.html.report import render_html

    write_or_print(render_html(analysis, max(top, 25)), output)


def _comparison_text(comparison: Comparison, output: Output, top: int) -> None:
    from trainprof.report.compare import render_text

    print_or_save(lambda console: render_text(comparison, console, top=top), output)


def _comparison_json(comparison: Comparison, output: Output, top: int) -> None:
    from trainprof.report.json import to_json_bytes

    write_or_print(to_json_bytes(comparison.with_top(top).to_dict()).decode(), output)


def _comparison_markdown(comparison: Comparison, output: Output, top: int) -> None:
    from trainprof.report.compare import render_markdown

    write_or_print(render_markdown(comparison, top), output)


#: Per result kind, the renderer of each format, in the order ``--format`` lists them.
FORMATS: dict[str, dict[str, Renderer]] = {
    "analysis": {"text": _analysis_text, "json": _analysis_json, "md": _analysis_markdown,
                 "html": _analysis_html},
    "comparison": {"text": _comparison_text, "json": _comparison_json,
                   "md": _comparison_markdown},
}


def formats_of(kind: str) -> tuple[str, ...]:
    """The formats a result kind can be written in (``--format``'s choices)."""
    return tuple(FORMATS[kind])


def write_result(kind: str, result: Any, fmt: str, output: Output, top: int) -> None:
    """``result`` in format ``fmt``, to ``output`` or standard output. A format the kind has
    no renderer for raises ``ValueError`` naming the ones it has."""
    renderers = FORMATS[kind]
    if fmt not in renderers:
        raise ValueError(f"a {kind} is written as {', '.join(renderers)}, not {fmt!r}")
    renderers[fmt](result, output, top)
