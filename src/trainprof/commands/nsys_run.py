"""``trainprof run --nsys``: the script under Nsight Systems, with NVTX step marks, then the
analysis of nsys's SQLite export (docs/nsys.md).

    nsys profile --trace=cuda,nvtx,osrt --output OUT/nsys_report --export=sqlite \\
        python -m trainprof run --nvtx --activities cpu --no-analysis ... -- train.py

Inside nsys, torch.profiler records the host only (``--activities cpu``): nsys and Kineto
cannot both hold CUPTI, and nsys records the device side.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

#: nsys's capture: CUDA API and device work, NVTX ranges, OS runtime calls.
NSYS_TRACE = "cuda,nvtx,osrt"
#: The report's name inside ``--out``: nsys writes REPORT.nsys-rep and REPORT.sqlite.
REPORT_NAME = "nsys_report"
#: Said, with exit code 2, where nsys is not installed.
NO_NSYS = ("trainprof run: --nsys needs Nsight Systems' nsys command on the PATH, and there is "
           "none; install Nsight Systems, or record with --nvtx under your own nsys profile.")


def nsys_command(nsys: str, args: argparse.Namespace, argv: list[str]) -> list[str]:
    """The nsys command line that runs this ``trainprof run`` inside nsys, marks on."""
    script_at = argv.index("--") if "--" in argv else argv.index(args.script)
    own = [a for a in argv[:script_at] if a != "--nsys"]
    inner = [*own, "--nvtx", "--activities", "cpu", "--no-analysis", *argv[script_at:]]
    return [nsys, "profile", f"--trace={NSYS_TRACE}", "--output", str(report_path(args)),
            "--force-overwrite=true", "--export=sqlite",
            sys.executable, "-m", "trainprof", "run", *inner]


def report_path(args: argparse.Namespace) -> Path:
    return Path(args.out) / REPORT_NAME


def run_under_nsys(args: argparse.Namespace, argv: list[str]) -> int:
    """Runs the script under nsys and prints the analysis of its export; the script's exit
    code, or 2 where nsys is missing."""
    nsys = shutil.which("nsys")
    if nsys is None:
        print(NO_NSYS, file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    code = subprocess.call(nsys_command(nsys, args, argv))
    export = report_path(args).with_suffix(".sqlite")
    if args.no_analysis or not export.exists():
        return code
    from trainprof.errors import TraceError
    from trainprof.pipeline import analyze
    from trainprof.report.terminal.report import print_analysis

    print(f"trainprof: Nsight Systems export {export}", file=sys.stderr)
    try:
        print_analysis(analyze(str(export)))
    except TraceError as error:
        print(f"trainprof run: {error}", file=sys.stderr)
    return code
