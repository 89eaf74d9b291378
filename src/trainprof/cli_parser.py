"""Argument parsing for the ``trainprof`` command: usage errors in one line, and value checks.

argparse prints a usage block and then the error; a person (and a CI log) is better served by
one sentence that names the problem and where the help is. Exit code 2, as for any bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn

#: The exit code of bad input or usage (``cli.EXIT_BAD_INPUT``).
USAGE_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr, then exit 2."""

    def error(self, message: str) -> NoReturn:
        message = message.rstrip(".")
        self.exit(USAGE_ERROR, f"{self.prog}: {message} (see '{self.prog} --help' for usage).\n")


def whole_number(text: str) -> int:
    """An integer, or an error that says the text is not one."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive_int(text: str) -> int:
    """A whole number of at least 1."""
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """A whole number of 0 or more."""
    value = whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0 (seconds, say)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number above 0")
    return value


def limit_percent(text: str) -> float:
    """A percentage limit: a finite number, 0 or more (``--fail-if-slower``)."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a percentage of 0 or more, like 5")
    return value


def print_help_for_no_command(parser: argparse.ArgumentParser) -> int:
    """``trainprof`` alone: the list of commands, and the usage exit code."""
    parser.print_help(sys.stderr)
    return USAGE_ERROR
