"""The services' time and memory limits for the one-shot commands: their flags, and one input run under them."""

from __future__ import annotations

import argparse
import io
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


def run_one(args, source: Path, ruleset, function) -> int:
    """A command's whole work on one input, `function(ruleset, args)` → exit status, under the
    limits; 2 when a limit stopped it or there is no such file."""
    if not_a_file(source):          # said here, not as a worker that stopped unexpectedly
        return 2
    box = sandbox(args)
    try:
        code = run_limited(box, source, ruleset, function, args)
    finally:
        box.close()
    return 2 if code is None else code


def not_a_file(source: Path) -> bool:
    """True, after saying so on stderr, when `source` is no file to read: missing, or a folder."""
    if source.is_file():
        return False
    what = "a folder, not a file: give the intake file inside it" if source.is_dir() else "no such file"
    print(f"{source}: {what}.", file=sys.stderr)
    return True


def run_limited(box: Sandbox, source: Path, ruleset, function, *args):
    """`function(ruleset, *args)` in a process of its own under the limits; None when a limit
    stopped it, after saying so on stderr with the flag that moves the limit."""
    from engine.problems import SizingError
    # The worker writes straight to this process's stdout and stderr (a progress bar stays
    # live); other streams (a caller's capture, a file it opened) are carried back instead:
    # the worker keeps only descriptors 0–2 open.
    capture = (not _standard_stream(sys.stdout), not _standard_stream(sys.stderr))
    try:
        value, out, err, reader_gone = box.call(source, ruleset, _call, function, args, capture)
    except SizingError as e:
        for p in e.problems:
            flag = {"limit.time": "--time-limit-seconds", "limit.memory": "--memory-limit-mb"}.get(p.code)
            hint = f" ({flag} sets the limit)" if flag else ""
            print(f"{source}: {p.message}{hint}", file=sys.stderr)
        return None
    if reader_gone:               # `sizing quote a b | head -1`: stopped quietly, as by the command itself
        raise BrokenPipeError
    sys.stdout.write(out)
    sys.stderr.write(err)
    return value


def _call(ruleset, function, args: tuple, capture: tuple[bool, bool]):
    """In the worker: the function's value, and what it printed to streams to carry back."""
    saved = sys.stdout, sys.stderr
    buffers = [io.StringIO() if c else None for c in capture]
    sys.stdout, sys.stderr = (b or s for b, s in zip(buffers, saved))
    value, reader_gone = None, False
    try:
        value = function(ruleset, *args)
        sys.stdout.flush()            # here, so that a reader gone away is seen, not swallowed later
    except BrokenPipeError:
        reader_gone = True
    finally:
        sys.stdout, sys.stderr = saved
    return value, *(b.getvalue() if b else "" for b in buffers), reader_gone


def _standard_stream(stream) -> bool:
    """Whether the stream writes to descriptor 1 or 2, which the worker inherits open."""
    try:
        return stream.fileno() in (1, 2)
    except (AttributeError, OSError, ValueError):     # io.UnsupportedOperation is both of the last
        return False


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value
