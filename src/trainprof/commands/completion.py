"""``trainprof completion SHELL``: a shell completion script for the command line."""

from __future__ import annotations

import argparse
import sys


def main(args: argparse.Namespace) -> int:
    """Print the completion script of ``args.shell``."""
    from trainprof.cli import build_parser
    from trainprof.completion import script

    sys.stdout.write(script(build_parser(), args.shell))
    return 0
