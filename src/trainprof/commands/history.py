"""``trainprof history``: the recorded runs, their trends and regressions (docs/history.md);
and ``--record``, which adds a command's run to the history."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from trainprof.cli_history import DEFAULT_SHOWN
from trainprof.fileio import write_or_print


def record_if_asked(args: argparse.Namespace, run: Any) -> bool:
    """Records ``run`` when ``--record`` was given and says so on stderr.

    Call it once the result is written: a store that cannot take the run (locked, damaged,
    another program's file) is one warning, never the analysis; the row waits in the pending
    file where it can. Returns False when the run was not recorded although asked to be
    (the command then exits with ``EXIT_NOT_RECORDED``).
    """
    if not getattr(args, "record", False):
        return True
    from trainprof.history.store.api import record
    from trainprof.history.store.database import db_path
    from trainprof.history.store.errors import HistoryError

    try:
        run_id = record(run, name=args.name, db=args.db)
    except HistoryError as error:
        print(f"trainprof: warning: not recorded in the history: {error}", file=sys.stderr)
        return False
    print(f"trainprof: recorded as history:{run_id} in {db_path(args.db)}", file=sys.stderr)
    return True


def main(args: argparse.Namespace) -> int:
    """``history add``, ``history show ID``, or the runs with their trends and flags."""
    from trainprof.history.store.database import History

    history = History(args.db)
    if args.history_action == "add":
        from trainprof.history.store.api import record

        for path in args.files:
            run_id = record(path, name=args.name, db=args.db)
            print(f"Recorded {path} as history:{run_id} in {history.path}.")
        return 0
    if args.history_action == "show":
        from trainprof.history.views.show import print_run

        print_run(history.get(args.id))
        return 0
    return _show_runs(history, args)


def _show_runs(history: Any, args: argparse.Namespace) -> int:
    from trainprof.history.views import regress

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
        from trainprof.history.views import export

        text = (export.to_csv(shown, series) if form == "csv"
                else export.to_json(shown, series, db))
        write_or_print(text, args.output)
    elif form == "html":
        from trainprof.history.views.html import write_html

        path = write_html(shown, series, args.output or Path("trainprof-history.html"), db,
                          _filters(args))
        print(f"History written to {path}; open it in a browser.")
    else:
        from trainprof.fileio import print_or_save
        from trainprof.history.views.terminal import print_history

        print_or_save(lambda console: print_history(shown, series, console, db=db), args.output)
    return 0


def _filters(args: argparse.Namespace) -> str:
    parts = [f"{k} {getattr(args, k)}" for k in ("name", "commit") if getattr(args, k)]
    parts += [f"{k} {time.strftime('%Y-%m-%d %H:%M', time.localtime(getattr(args, k)))}"
              for k in ("since", "until") if getattr(args, k) is not None]
    return ", ".join(parts)
