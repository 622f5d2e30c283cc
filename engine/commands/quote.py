"""`sizing quote INPUT...`: one quote per intake file — workbook, HTML and JSON — and a summary."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.commands import limits

HELP = "quote intake files (.xlsx, .yaml, .json)"
EXAMPLES = (("sizing quote intake.xlsx", "intake.quote.xlsx, .quote.html and .quote.json in this folder"),
            ("sizing quote a.xlsx b.yaml -o quotes", "several at once, into quotes/"),
            ("sizing quote case.yaml --json | jq .results", "the result document on stdout"),
            ("sizing quote case.yaml --calibration calibration.yaml", "speeds corrected by your measurement"))
EXIT = ("0 every intake quoted; 2 an intake is invalid or unreadable, or past the time or memory limit "
        "(each problem on stderr as cell-or-key: message, and DIR/<stem>.errors.xlsx beside a workbook); "
        "1 no published rule set: the rule files are broken or their edit is held by the publication gate and "
        "none passed it before (an edit held while an earlier set was published is said on stderr, and that "
        "set quotes).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", type=Path, metavar="INPUT",
                        help="filled intake templates (.xlsx), or YAML/JSON intakes of canonical keys")
    parser.add_argument("-o", "--outdir", type=Path, default=Path("."), metavar="DIR",
                        help="folder for <stem>.quote.xlsx, .quote.html and .quote.json (default: this folder)")
    parser.add_argument("--json", action="store_true",
                        help="also print the result document as JSON on stdout (a list for several inputs)")
    add_calibration_argument(parser)
    limits.add_arguments(parser)


def add_calibration_argument(parser: argparse.ArgumentParser) -> None:
    """`--calibration FILE`, the same for `quote` and `explain`."""
    parser.add_argument("--calibration", type=Path, metavar="FILE",
                        help="a file written by `sizing calibrate`: its factors apply to intakes on the GPU, "
                             "software and precision it was measured on")


def apply_calibration(args) -> bool:
    """The file of `--calibration`, if given, read and applied to every job of this process; False
    (the problems said on stderr) when it cannot be read."""
    if not args.calibration:
        return True
    import engine.job
    from engine.calc.calibration import load_calibration
    from engine.problems import SizingError
    try:
        engine.job.CALIBRATION = load_calibration(args.calibration)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return False
    return True


def run(args) -> int:
    from engine.authoring.gate import consult
    from engine.paths import CATALOGS_DIR, RULES_DIR
    from engine.problems import SizingError

    # Only a published rule set quotes: an edit the gate holds is said here, and the last set that passed quotes.
    publication = consult(RULES_DIR, CATALOGS_DIR)
    if publication.held:
        print(publication.note(RULES_DIR), file=sys.stderr)
    ruleset = publication.ruleset
    if ruleset is None:
        return 1
    if not apply_calibration(args):        # read once here; each input's own process inherits it
        return 2
    args.outdir.mkdir(parents=True, exist_ok=True)
    code, documents = 0, []
    box = limits.sandbox(args)
    try:
        for source in args.inputs:
            if limits.not_a_file(source):
                code = max(code, 2)
                continue
            # Each input in a process of its own, under the services' limits.
            outcome = limits.run_limited(box, source, ruleset, quote_one, source, args.outdir, args.json)
            one, document = outcome if outcome is not None else (2, None)
            code = max(code, one)
            if document is not None:
                documents.append(document)
    finally:
        box.close()
    if args.json:
        json.dump(documents[0] if len(documents) == 1 else documents, sys.stdout,
                  ensure_ascii=False, indent=2)
        print()
    return code


def quote_one(ruleset, source: Path, outdir: Path, as_json: bool) -> tuple[int, dict | None]:
    """Quote one input and say so (run in the input's own process): (exit status, JSON document)."""
    from engine.job import run_job
    from engine.quote.text import summary_text
    job = run_job(source, outdir, ruleset=ruleset)
    document = None
    if job.ok:
        if as_json:
            document = job.results.to_json(job.language)
        else:
            print(summary_text(job.quote))
    else:
        for p in job.problems:
            print(f"{p.where}: {p.message}" if p.where else p.message, file=sys.stderr)
    for out in job.outputs:
        print(f"wrote {out}", file=sys.stderr)
    code = 0 if job.ok else 2 if job.status in ("invalid", "failed") else 1
    return code, document
