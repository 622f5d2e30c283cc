"""`sizing template`: a blank intake workbook in one of the three languages."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.paths import LANGUAGES

HELP = "write a blank intake workbook"
EXAMPLES = (("sizing template", "intake.xlsx in English, in this folder"),
            ("sizing template --lang zh-TW -o shared/intake-tw.xlsx", "in Traditional Chinese, under a name of your own"))
EXIT = "0 written; 2 a bad argument."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", type=Path, default=None, help="file to write (default: intake.xlsx, or intake.<lang>.xlsx for the other languages)")
    parser.add_argument("--lang", choices=LANGUAGES, default="en", help="language of labels and help")


def run(args) -> int:
    from engine.intake.template import write_template
    out = args.output or Path("intake.xlsx" if args.lang == "en" else f"intake.{args.lang}.xlsx")
    write_template(out, args.lang)
    print(f"wrote {out}")
    return 0
