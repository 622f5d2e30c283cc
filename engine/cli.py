"""The `sizing` command: template, quote, explain, watch, mail, rules check/test/diff/doc, sweep, validate."""

from __future__ import annotations

import argparse
import logging

from engine.commands import explain, mail, quote, rules, sweep, template, validate, watch

COMMANDS = (("template", template), ("quote", quote), ("explain", explain), ("watch", watch), ("mail", mail),
            ("rules", rules), ("sweep", sweep), ("validate", validate))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s")
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sizing", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name, module in COMMANDS:
        p = sub.add_parser(name, help=module.HELP)
        module.add_arguments(p)
        if hasattr(module, "run"):
            p.set_defaults(run=module.run)
    return parser
