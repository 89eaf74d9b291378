"""The command line's history parts: ``trainprof history`` and ``--record`` on ``analyze``.

``cli.py`` adds these parsers and calls these functions; the logic is the Python API's
(``History``, ``record``, ``regress.series_of``).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

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


def record_if_asked(args: argparse.Namespace, run: Any) -> bool:
    """Records ``run`` when ``--record`` was given and says so on stderr.

    Call it once the result is written: a store that cannot take the run (locked, damaged,
    another program's file) is one warning, never the analysis; the row waits in the pending
    file where it can. Returns False when the run was not recorded although asked to be
    (the command then exits with ``EXIT_NOT_RECORDED``).
    """
    if not getattr(args, "record", False):
        return True
    from trainprof.history.api import record
    from trainprof.history.errors import HistoryError
    from trainprof.history.store import db_path

    try:
        run_id = record(run, name=args.name, db=args.db)
    except HistoryError as error:
        print(f"trainprof: warning: not recorded in the history: {error}", file=sys.stderr)
        return False
    print(f"trainprof: recorded as history:{run_id} in {db_path(args.db)}", file=sys.stderr)
    return True


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
    p.set_defaults(func=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    from trainprof.history.store import History

    history = History(args.db)
    if args.history_action == "add":
        from trainprof.history.api import record

        for path in args.files:
            run_id = record(path, name=args.name, db=args.db)
            print(f"Recorded {path} as history:{run_id} in {history.path}.")
        return 0
    if args.history_action == "show":
        from trainprof.history.show import print_run

        print_run(history.get(args.id))
        return 0
    return _show_runs(history, args)


def _show_runs(history: Any, args: argparse.Namespace) -> int:
    from trainprof.history import regress

    records = history.runs(name=args.name, since=args.since, until=args.until, commit=args.commit)
    series = regress.series_of(
        records, baseline_runs=args.baseline or regress.BASELINE_RUNS,
        threshold_pct=regress.THRESHOLD_PCT if args.threshold is None else args.threshold)
    form = args.export or args.format
    to_file = form != "text" or args.output is not None
    limit = args.limit if args.limit is not None else (None if to_file else DEFAULT_SHOWN)
    shown = records[-limit:] if limit else records
    db = str(history.path)
    if form in ("csv", "json"):
        from trainprof.history import export

        text = (export.to_csv(shown, series) if form == "csv"
                else export.to_json(shown, series, db))
        _write_or_print(text, args.output)
    elif form == "html":
        from trainprof.history.html import write_html

        path = write_html(shown, series, args.output or Path("trainprof-history.html"), db,
                          _filters(args))
        print(f"History written to {path}; open it in a browser.")
    else:
        from trainprof.fileio import print_or_save
        from trainprof.history.render import print_history

        print_or_save(lambda console: print_history(shown, series, console, db=db), args.output)
    return 0


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


def _filters(args: argparse.Namespace) -> str:
    parts = [f"{k} {getattr(args, k)}" for k in ("name", "commit") if getattr(args, k)]
    parts += [f"{k} {time.strftime('%Y-%m-%d %H:%M', time.localtime(getattr(args, k)))}"
              for k in ("since", "until") if getattr(args, k) is not None]
    return ", ".join(parts)


def _write_or_print(text: str, output: Path | None) -> None:
    from trainprof.fileio import write_or_print

    write_or_print(text, output)
