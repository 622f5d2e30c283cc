"""`sizing template`: a blank intake workbook in one of the three languages."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.paths import LANGUAGES

HELP = "write a blank intake workbook"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", type=Path, default=None, help="file to write (default intake.xlsx)")
    parser.add_argument("--lang", choices=LANGUAGES, default="en", help="language of labels and help")


def run(args) -> int:
    from engine.intake.template import write_template
    out = args.output or Path("intake.xlsx" if args.lang == "en" else f"intake.{args.lang}.xlsx")
    write_template(out, args.lang)
    print(f"wrote {out}")
    return 0
