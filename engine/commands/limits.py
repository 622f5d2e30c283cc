"""The services' time and memory limits for the one-shot commands: their flags, and one input run under them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.services.sandbox import Limits, Sandbox


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--time-limit-seconds", type=_positive, default=Limits.seconds, metavar="S",
                        help="longest one input may take, as in the services; past it the input is "
                             "stopped with a plain sentence (exit 2)")
    parser.add_argument("--memory-limit-mb", type=_positive, default=Limits.memory_mb, metavar="MB",
                        help="most memory one input may use, as in the services; past it the same")


def sandbox(args) -> Sandbox:
    """A sandbox with the limits the command line gave; close it when done."""
    return Sandbox(Limits(args.time_limit_seconds, args.memory_limit_mb))


def run_limited(box: Sandbox, source: Path, ruleset, function, *args):
    """`function(ruleset, *args)` in a process of its own under the limits; None when a limit
    stopped it, after saying so on stderr with the flag that moves the limit."""
    from engine.problems import SizingError
    try:
        return box.call(source, ruleset, function, *args)
    except SizingError as e:
        for p in e.problems:
            flag = {"limit.time": "--time-limit-seconds", "limit.memory": "--memory-limit-mb"}.get(p.code)
            hint = f" ({flag} sets the limit)" if flag else ""
            print(f"{source}: {p.message}{hint}", file=sys.stderr)
        return None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value
