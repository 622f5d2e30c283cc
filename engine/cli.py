"""The `sizing` command: template, quote, explain, watch, mail, rules check/test/diff/doc, sweep, validate."""

from __future__ import annotations

import argparse
import logging
import os
import select
import sys

from engine.commands import (HelpFormatter, calibrate, explain, help_for, help_page, mail, quote, rules, sweep,
                             template, validate, watch)

COMMANDS = (("template", template), ("quote", quote), ("explain", explain), ("watch", watch), ("mail", mail),
            ("rules", rules), ("sweep", sweep), ("validate", validate), ("calibrate", calibrate))
EXAMPLES = (("sizing template", "a blank intake workbook to fill (intake.xlsx)"),
            ("sizing quote intake.xlsx -o quotes", "its quote: workbook, HTML page and JSON in quotes/"),
            ("sizing COMMAND --help", "what a command takes, its defaults and exit status"))
BROKEN_PIPE = 141        # what a shell reports for a program stopped by SIGPIPE (128 + 13)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s")
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        code = args.run(args)
        sys.stdout.flush()          # inside the try: the last of the output may be what finds the pipe closed
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `sizing validate | head -2`: the reader has what it wanted; stop quietly, as Unix tools do.
        if not _reader_gone(sys.stdout):
            raise                   # some other pipe or socket: a real error
        _discard_stdout()
        return BROKEN_PIPE


def build_parser() -> argparse.ArgumentParser:
    page = help_page(__doc__.splitlines()[0].removesuffix("."), EXAMPLES)
    parser = argparse.ArgumentParser(prog="sizing", description=page["description"], epilog=page["epilog"],
                                     formatter_class=HelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name, module in COMMANDS:
        p = sub.add_parser(name, **help_for(module))
        module.add_arguments(p)
        if hasattr(module, "run"):
            p.set_defaults(run=module.run)
    return parser


def _reader_gone(stream) -> bool:
    """Whether `stream` is a pipe whose reading end has been closed."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _discard_stdout() -> None:
    """Send what is still buffered for stdout to /dev/null, so the flush at exit is quiet too."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
