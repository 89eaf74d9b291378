"""The history's arguments: ``trainprof history`` and ``--record``/``--name``/``--db`` on the
commands that can record a run (``commands/history.py`` runs them; docs/history.md)."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from pathlib import Path

#: The exit code of a command whose result was written but that could not add the run to the
#: history database it was asked to (docs/history.md).
EXIT_NOT_RECORDED = 3
_RELATIVE = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DEFAULT_SHOWN = 30


def add_record_arguments(parser: argparse.ArgumentParser) -> None:
    """``--record``, ``--name`` and ``--db``, for the commands that can record a run."""
    group = parser.add_argument_group("history (docs/history.md)")
    group.add_argument("--record", action="store_true",
                       help="add this run to the history database")
    group.add_argument("--name", help="the run's name in the history (default: the trace's or "
                                      "the script's name)")
    group.add_argument("--db", type=Path, help="the history database (default: "
                                               "$TRAINPROF_HISTORY_DB, else .trainprof/history.db)")


def add_history_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="recorded runs: trends, regressions, export",
                       description="The runs in the history database, a trend per run name and "
                                   "the regressions found (docs/history.md).")
    p.add_argument("--db", type=Path, help="the database (default: $TRAINPROF_HISTORY_DB, else "
                                           ".trainprof/history.db)")
    p.add_argument("--name", help="only runs of this name (wildcards * and ? allowed)")
    p.add_argument("--since", type=moment, help="only runs recorded at or after: 2024-06-01, "
                                                "'2024-06-01 14:00', or 7d, 12h, 2w ago")
    p.add_argument("--until", type=moment, help="only runs recorded before (same forms)")
    p.add_argument("--commit", help="only runs of this git commit (a prefix is enough)")
    p.add_argument("--limit", type=int, metavar="N",
                   help=f"rows shown or exported: the N most recent (default {DEFAULT_SHOWN} in "
                        "the terminal, all in files)")
    p.add_argument("--baseline", type=_positive, metavar="N", default=None,
                   help="runs in the rolling baseline (default 5)")
    p.add_argument("--threshold", type=float, metavar="PCT", default=None,
                   help="smallest change flagged, in percent of the baseline (default 5)")
    p.add_argument("--format", choices=("text", "json", "csv", "html"), default="text",
                   help="text (the terminal), json or csv (the runs and their flags), or html "
                        "(a page with a chart per run name); -o FILE's ending chooses it too")
    p.add_argument("--export", choices=("csv", "json"), help=argparse.SUPPRESS)  # old spelling
    p.add_argument("-o", "--output", type=Path, help="write to this file (html: default "
                                                     "trainprof-history.html)")
    actions = p.add_subparsers(dest="history_action", metavar="{add,show}")
    add = actions.add_parser("add", help="record saved results, cluster_summary.json files or "
                                         "StepTimer summaries (JSON)")
    add.add_argument("files", nargs="+", type=Path)
    add.add_argument("--name", default=argparse.SUPPRESS, help="the runs' name")
    add.add_argument("--db", type=Path, default=argparse.SUPPRESS)
    show = actions.add_parser("show", help="one run in full")
    show.add_argument("id", type=_history_id)
    show.add_argument("--db", type=Path, default=argparse.SUPPRESS)


def moment(text: str) -> float:
    """A time as Unix seconds: a date or date and time (local), or 30m, 12h, 7d, 2w ago."""
    text = text.strip()
    unit = text[-1:].lower()
    if unit in _RELATIVE and text[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(text[:-1]) * _RELATIVE[unit]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date (2024-06-01, '2024-06-01 14:00') or an age (7d, 12h)"
        ) from None


def _history_id(text: str) -> int:
    digits = text.removeprefix("history:").removeprefix("@")
    if not digits.isdigit():
        raise argparse.ArgumentTypeError("give a run id: 12, @12 or history:12")
    return int(digits)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
