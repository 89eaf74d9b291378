"""The ``trainprof`` command: parses the arguments and calls ``commands.<command>.main(args)``;
nothing more (each subcommand's work is in its module of ``commands/``)."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from trainprof.analysis.options import DEFAULT_TOP, OPERATOR_SORT_COLUMNS
from trainprof.analysis.parallel.on_dask import CONNECT_TIMEOUT_S
from trainprof.cli_history import add_history_command, add_record_arguments
from trainprof.cli_parser import (
    OneLineParser,
    limit_percent,
    positive_float,
    positive_int,
    print_help_for_no_command,
    whole_number,
)
from trainprof.cli_sql import add_sql_commands
from trainprof.errors import TrainprofError
from trainprof.report.formats import formats_of
from trainprof.trackers.log_to import add_log_to_argument
from trainprof.version import __version__

#: Exit codes: 0 fine, 1 a check failed (e.g. a regression gate), 2 bad input or usage, 3 the
#: result was written but the run could not be added to the history (``EXIT_NOT_RECORDED``).
EXIT_BAD_INPUT = 2


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="analyse a trace file or a folder of ranks")
    p.add_argument("path", type=Path, help="a .json or .json.gz trace, a folder of them, or a "
                                           "cluster_summary.json (docs/distributed.md)")
    p.add_argument("-j", "--jobs", type=_positive_int, default=None, metavar="N",
                   help="processes analysing a folder's traces (default: as many as the cores "
                        "and the memory allow; 1: none besides this one)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="analyse each trace as a task on this Dask scheduler, like "
                            "tcp://HOST:8786 (needs trainprof[dask]; docs/cluster.md)")
    where.add_argument("--scheduler-file", type=Path, metavar="FILE",
                       help="the same, with the scheduler named by the file that `dask "
                            "scheduler --scheduler-file FILE` writes")
    p.add_argument("--scheduler-timeout", type=positive_float, default=CONNECT_TIMEOUT_S,
                   metavar="S", help="seconds to wait for the Dask scheduler to answer "
                                     f"(default {CONNECT_TIMEOUT_S:g})")
    p.add_argument("--format", choices=formats_of("analysis"), default="text",
                   help="text (the terminal report), json (docs/json.md), md (Markdown for a "
                        "pull-request comment) or html (the report page; `trainprof report` "
                        "adds each step's breakdown); -o FILE's ending chooses it too")
    p.add_argument("-o", "--output", type=Path, help="write the result to this file")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    p.add_argument("--sort", choices=OPERATOR_SORT_COLUMNS, default=None, metavar="COLUMN",
                   help="sort the operator table by this column: "
                        f"{', '.join(OPERATOR_SORT_COLUMNS)} (default: device self time, "
                        "or host self time on CPU traces)")
    p.add_argument("--top", type=_positive_int, default=DEFAULT_TOP,
                   help=f"rows shown per table in the text report (default {DEFAULT_TOP})")
    p.add_argument("--by-shape", action="store_true",
                   help="group the operator table by op name and input shapes")
    p.add_argument("--modules", action="store_true",
                   help="show the time per nn.Module as a tree (traces recorded with_stack=True; "
                        "docs/modules.md)")
    p.add_argument("--hardware", type=Path, metavar="FILE.json",
                   help="the device's peaks for the roofline, for a GPU the built-in table "
                        "does not know (docs/hardware.md)")
    p.add_argument("--all-ranks", action="store_true",
                   help="every rank's row in the per-rank tables (default: past 32 ranks, the "
                        "16 slowest, the 16 fastest and the straggler, with the spread of all)")
    p.add_argument("--max-memory", type=_memory_size, default=None, metavar="SIZE",
                   help="memory one trace's analysis may take, e.g. 4G, 512M, 1.5G; a trace "
                        "that would not fit read whole is streamed from disk window by window "
                        "(default: half the available memory; docs/performance.md)")
    p.add_argument("--step-marker", type=_pattern, default=None, metavar="REGEX",
                   help="NVTX ranges of an Nsight Systems export that mark steps, e.g. "
                        r"'^batch (\d+)$' (docs/nsys.md)")
    add_record_arguments(p)
    add_log_to_argument(p)


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report (works offline)")
    p.add_argument("path", type=Path,
                   help="a trace, a folder of traces, or a saved JSON result")
    p.add_argument("-o", "--output", type=Path, default=Path("trainprof-report.html"),
                   help="the HTML file to write (default: trainprof-report.html)")
    p.add_argument("--top", type=_positive_int, default=25,
                   help="rows per operator and kernel table (default 25)")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    p.add_argument("--trust", action="store_true",
                   help="read memory snapshots with plain pickle (runs any code in them)")


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two runs side by side; gate CI on a slowdown")
    p.add_argument("base", type=Path, help="the reference run: trace, folder, JSON result or "
                                           "history id (history:12 or @12)")
    p.add_argument("new", type=Path, help="the run to judge: trace, folder, JSON result or "
                                          "history id")
    p.add_argument("--format", choices=formats_of("comparison"), default="text")
    p.add_argument("-o", "--output", type=Path, help="write the comparison to this file")
    p.add_argument("--fail-if-slower", type=limit_percent, metavar="PCT",
                   help="exit 1 when NEW's median step is more than PCT%% slower than BASE's")
    p.add_argument("--batch-size", type=_batch_sizes, default=(None, None), metavar="N[,M]",
                   help="samples per step per rank (N for both runs, or N for BASE and M for "
                        "NEW), to report samples/s")
    p.add_argument("--top", type=_positive_int, default=10,
                   help="changed ops and kernels listed (default 10)")
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")


def _add_annotate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("annotate", help="copy a trace with trainprof's counters and findings, "
                                        "for Perfetto or chrome://tracing")
    p.add_argument("trace", type=Path, help="one trace file (.json or .json.gz)")
    p.add_argument("-o", "--output", type=Path,
                   help="the copy to write (default: <trace name>.annotated.json.gz here); "
                        "gzipped when the name ends in .gz")


def _add_memory(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="analyse a CUDA memory snapshot: fragmentation, an OOM's "
                                      "cause, top allocation sites (docs/memory_snapshots.md)")
    p.add_argument("snapshot", type=Path, help="a snapshot (.pickle), or a folder of them")
    p.add_argument("--trust", action="store_true",
                   help="read it with plain pickle, which runs any code in it: only for a file "
                        "you made yourself (by default anything but plain data is refused)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("-o", "--output", type=Path, help="write the result to this file")


def _batch_sizes(text: str) -> tuple[int, int]:
    parts = [_positive_int(x) for x in text.split(",")]
    if len(parts) not in (1, 2):
        raise argparse.ArgumentTypeError("give N, or N,M (BASE,NEW)")
    return (parts[0], parts[-1])


def _pattern(text: str) -> str:
    """A regular expression, checked (and kept as text: it travels to worker processes)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc})") from None
    return text


def _positive_int(text: str) -> int:
    return positive_int(text)


def _memory_size(text: str) -> int:
    from trainprof.analysis.streaming.memory_budget import parse_memory

    try:
        return parse_memory(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--max-memory ")) from None


def _at_least_two(text: str) -> int:
    value = whole_number(text)
    if value < 2:
        raise argparse.ArgumentTypeError("the demo needs at least 2 steps")
    return value


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="record and analyse a small built-in training job (CPU)")
    p.add_argument("--out", type=Path, default=Path("trainprof-demo"))
    p.add_argument("--steps", type=_at_least_two, default=30, help="steps to train (>= 2)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show the profiler's own log lines (Kineto, c10)")


def _add_run(sub: argparse._SubParsersAction) -> None:
    # Listed for --help only: main() hands `run` to commands/run.py before parsing, so that
    # the other commands never import torch and `run`'s own options reach its parser.
    sub.add_parser("run", help="profile a training script without changing it: "
                               "trainprof run [options] -- train.py args...")


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure training strategies side by side: bf16, compile, "
                                     "fused optimizer, DataLoader workers... (docs/bench.md)")
    _add_workload_args(p)
    p.add_argument("--strategies", metavar="A,B,...",
                   help="comma-separated strategies, e.g. fp32,bf16,bf16+compile,accum8 "
                        "(default: the default set in docs/bench.md)")
    p.add_argument("--steps", type=_positive_int, default=20,
                   help="timed steps per repeat (default 20)")
    p.add_argument("--warmup", type=_non_negative_int, default=3,
                   help="untimed steps first (default 3)")
    p.add_argument("--repeats", type=_positive_int, default=3,
                   help="repeats, for the spread (default 3)")
    p.add_argument("--isolate", action="store_true", help="each strategy in its own process")
    p.add_argument("--timeout", type=positive_float, metavar="S", help="with --isolate: stop a "
                                                                        "strategy after S seconds")
    p.add_argument("--baseline", help="the strategy others are compared with (default fp32)")
    p.add_argument("--no-recheck", action="store_true",
                   help="do not run the baseline again at the end (a check for drift)")


def _add_checklist(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("checklist", help="time data, forward, backward and optimizer on their "
                                         "own and flag shares out of the usual range")
    _add_workload_args(p)
    p.add_argument("--min-time", type=positive_float, default=0.5, metavar="S",
                   help="seconds each phase is timed for, at least (default 0.5)")


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", nargs="?", help="module:name or file.py:name of a "
                                               "trainprof.bench.Workload (or a function making one)")
    p.add_argument("--demo", action="store_true", help="the built-in demo job instead")
    p.add_argument("--device", help="cpu, cuda, cuda:1... (default: cuda when there is one)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("-o", "--output", type=Path, help="write the result to this file")


def _non_negative_int(text: str) -> int:
    value = whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _add_completion(sub: argparse._SubParsersAction) -> None:
    from trainprof.completion import SHELLS

    p = sub.add_parser("completion", help="print a shell completion script: "
                                          'eval "$(trainprof completion bash)"')
    p.add_argument("shell", choices=SHELLS)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="trainprof", description="Find out why a PyTorch training run is slow."
    )
    parser.add_argument("--version", action="version", version=f"trainprof {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)  # names a module of commands/
    _add_analyze(sub)
    _add_report(sub)
    _add_compare(sub)
    _add_annotate(sub)
    _add_memory(sub)
    _add_demo(sub)
    _add_run(sub)
    add_history_command(sub)
    _add_bench(sub)
    _add_checklist(sub)
    _add_completion(sub)
    add_sql_commands(sub)
    return parser


def console_main() -> int:
    """The ``trainprof`` command (and ``python -m trainprof``): ``main``, then a cheaper exit.
    The objects left are frozen out of the garbage collector, so that Python's collection at
    exit does not walk an analysis's objects one last time (20 ms after the reference trace's
    analysis; the process's exit frees them all the same, and atexit handlers still run). Not
    after ``trainprof run``, whose script's objects may need their finalizers."""
    code = main()
    if sys.argv[1:2] != ["run"]:
        gc.freeze()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        return print_help_for_no_command(parser)
    args = _parse(parser, argv) if argv[:1] != ["run"] else None
    try:
        if args is None:  # the script keeps Python's own warning filters and format
            return _run(argv[1:])
        # the subcommand's name is its module's; imported only now, so each command's needs
        # (torch for bench, duckdb for sql...) load only when it runs
        command = importlib.import_module(f"trainprof.commands.{args.command}")
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.formatwarning = _one_line_warning
            return int(command.main(args) or 0)
    except TrainprofError as exc:
        print(f"trainprof: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("trainprof: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # unreadable or unwritable files: the user's to fix, not a bug
        print(f"trainprof: {_os_error_sentence(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RecursionError:
        print("trainprof: the input nests too deeply to be read (over Python's recursion "
              "limit); is it a Kineto trace?", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # a bug: say so in one line, keep the traceback for debugging
        if os.environ.get("TRAINPROF_DEBUG"):
            raise
        print(
            f"trainprof: internal error ({type(exc).__name__}: {exc}); "
            "set TRAINPROF_DEBUG=1 for the traceback and please report it.",
            file=sys.stderr,
        )
        return 1


def _run(argv: Sequence[str]) -> int:
    """``trainprof run``: the profiler's log lines quietened before torch is imported, then
    ``commands.run`` parses the rest itself."""
    from trainprof.commands.quiet import quiet_profiler

    quiet_profiler(verbose="-v" in argv[:argv.index("--")] if "--" in argv else "-v" in argv)
    try:
        from trainprof.commands.run import main as run_main
    except ImportError as exc:
        print(f"trainprof: `trainprof run` needs PyTorch ({exc}).", file=sys.stderr)
        return EXIT_BAD_INPUT
    return int(run_main(list(argv)) or 0)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parsed arguments; an unknown option is reported by its subcommand's parser, so that the
    message points to that command's help."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = _subcommand_parser(parser, args.command)
        (command or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    _check_output_format(parser, args, argv)
    return args


def _subcommand_parser(parser: argparse.ArgumentParser, name: str | None
                       ) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    return None


#: The format a file name's ending asks for, where ``--format`` is not given.
FORMAT_OF_SUFFIX = {".json": "json", ".md": "md", ".html": "html", ".htm": "html",
                    ".csv": "csv", ".txt": "text"}


def _check_output_format(parser: argparse.ArgumentParser, args: argparse.Namespace,
                         argv: list[str]) -> None:
    """``-o result.json`` without ``--format`` writes JSON (``.json.gz`` too); a format that
    contradicts the file name's ending (``--format md -o r.json``) is refused, and so is an
    ending the command cannot write (``-o out.xml``) unless ``--format`` says what to write."""
    output, given = getattr(args, "output", None), getattr(args, "format", None)
    if output is None or given is None:
        return
    ending = output_ending(Path(str(output)))
    wanted = FORMAT_OF_SUFFIX.get(ending)
    explicit = any(a == "--format" or a.startswith("--format=") for a in argv)
    command = _subcommand_parser(parser, args.command) or parser
    choices = _format_choices(command)
    if wanted == given or (explicit and (wanted is None or wanted not in choices)):
        return
    if explicit:
        command.error(f"--format {given} does not match the output file {output} "
                      f"(its ending asks for {wanted})")
    if wanted in choices:
        args.format = wanted
    elif ending:
        endings = ", ".join(e for e, f in FORMAT_OF_SUFFIX.items() if f in choices)
        command.error(f"cannot tell which format to write to {output}: name it with one of "
                      f"{endings} (.gz may follow), or give --format")


def output_ending(path: Path) -> str:
    """The ending that says a file's format, lower case, past a ``.gz``: ``.json`` for
    ``r.JSON.gz``; ``""`` for a name without one."""
    name = path.name.lower().removesuffix(".gz")
    return Path(name).suffix


def _format_choices(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    for action in parser._actions:
        if action.dest == "format" and action.choices:
            return tuple(action.choices)
    return ()


def _os_error_sentence(exc: OSError) -> str:
    what = exc.filename if exc.filename is not None else ""
    reason = exc.strerror or str(exc)
    if isinstance(exc, PermissionError):
        return f"cannot access {what}: permission denied."
    return f"{what}: {reason}." if what else f"{reason}."


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, line: str | None = None) -> str:
    return f"trainprof: warning: {message}\n"


if __name__ == "__main__":
    sys.exit(main())
