"""`sizing explain INPUT RESULT_KEY`: how one figure of a quote was derived, down to intake cells and catalog lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.commands import limits

HELP = "show how one result was derived (rules, intake cells, catalog lines)"
EXAMPLES = (("sizing explain samples/seed002-bert-base-8xv100.xlsx training_time_hours",
             "each rule behind the training time, with the values that flowed in"),
            ("sizing explain intake.yaml cost_total --rules /srv/sizing", "the same against a deployment's own rules"))
EXIT = ("0 explained; 1 the rule files are broken; 2 an invalid intake or an unknown result name, or past "
        "the time or memory limit.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path, help="the intake: .xlsx, .yaml or .json")
    parser.add_argument("key", help="the result to explain, e.g. training_time_days or cost_total")
    parser.add_argument("--rules", type=Path, default=None, metavar="DIR",
                        help="folder holding rules/ and catalogs/ (default: the ones in use)")
    limits.add_arguments(parser)


def run(args) -> int:
    from engine.calc.schema import did_you_mean
    from engine.commands.rules import load_or_report
    ruleset = load_or_report(args.rules)
    if ruleset is None:
        return 1
    if args.key not in ruleset.rules and args.key not in ruleset.input_types:
        print(f"{args.key}: no rule or input has this name{did_you_mean(args.key, ruleset.rules)}",
              file=sys.stderr)
        return 2
    return limits.run_one(args, args.input, ruleset, explain_one)      # in a process of its own, under the limits


def explain_one(ruleset, args) -> int:
    """The derivation printed; its exit status."""
    from engine.calc.evaluate import evaluate
    from engine.calc.explain import explain, render
    from engine.job import read_checked
    from engine.problems import SizingError
    try:
        intake = read_checked(args.input, ruleset)
        results = evaluate(intake, ruleset)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    typed = {**intake.values, **intake.raw}
    print(render(explain(args.key, results, ruleset, _places(intake), typed, intake.language)))
    return 0


def _places(intake) -> dict[str, str]:
    """Where each input came from; a value the form filled in names the form's line."""
    from engine.intake.form import current_form
    fields = current_form().fields
    return {key: f"the form's default, rules/intake.yaml:{fields[key].line}" if where == "default" and key in fields
            else where for key, where in intake.sources.items()}
