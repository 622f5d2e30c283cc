"""`sizing validate`: the estimates beside published measurements, with limits that fail the run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.paths import PUBLISHED_CASES
from engine.problems import Problem, SizingError

HELP = "compare estimates with published measurements"
EXAMPLES = (("sizing validate", "every published case beside its estimate, and the error by group"),
            ("sizing validate --max-median-error training=0.10 --max-worst-factor inference=1.6",
             "fail past these limits (in CI)"),
            ("sizing validate --cv", "each figure also out of sample: coefficients chosen without its own source"),
            ("sizing validate --cv --fit-orders 3", "and how far out of sample moves with the order the fits "
             "take the coefficients in"),
            ("sizing validate --json", "the same as JSON"))
EXIT = "0 within every limit given; 1 a limit exceeded (FAIL lines); 2 a bad cases file or limit."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", type=Path, default=PUBLISHED_CASES,
                        help="cases file (default: validation/published.yaml)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--cv", action="store_true",
                        help="leave-one-source-out: refit the coefficients (validation/fitting.yaml) once per "
                             "source without it and estimate its figures; limits then apply out of sample")
    parser.add_argument("--converged-fit", action="store_true",
                        help="with --cv: fit until no pass improves, with pattern moves and errors within "
                             "±5%% rounded off, from the all-sources fit (engine/calc/fitting.py)")
    parser.add_argument("--fit-orders", type=int, default=1, metavar="N",
                        help="with --cv: cross-validate again with the coefficients fitted in N orders (the "
                             "file's, then seeded shuffles) and print how far out of sample moves with the "
                             "order; about three minutes per order")
    parser.add_argument("--max-median-error", action="append", default=[], metavar="GROUP=FRACTION",
                        help="fail if a group's median absolute error exceeds this, e.g. training=0.10")
    parser.add_argument("--max-worst-error", action="append", default=[], metavar="GROUP=FRACTION",
                        help="fail if any case of the group is further off than this, e.g. memory=0.25")
    parser.add_argument("--max-worst-factor", action="append", default=[], metavar="GROUP=FACTOR",
                        help="fail if any case is off by more than this factor either way, e.g. inference=1.6")


def run(args) -> int:
    from engine.calc.evidence import GROUPS, load_cases
    from engine.calc.ruleset import current_ruleset
    from engine.validation import (check_limits, compare, cross_validate, cv_tables, order_spread,
                                   render_cv_text, render_order_spread, render_text, summarise)
    try:
        limits = parse_limits(args, GROUPS)
        if args.fit_orders < 1 or (args.fit_orders > 1 and (not args.cv or args.converged_fit)):
            raise SizingError([Problem("validate.orders", f"--fit-orders {args.fit_orders}",
                                       "--fit-orders takes a count of 1 or more, with --cv and without "
                                       "--converged-fit: it varies the order of the three-pass fits.")])
        cases = load_cases(args.file)
        if args.cv:
            cv = cross_validate(cases, current_ruleset(), converge=args.converged_fit)
            inside, table = cv_tables(cv)
            spread = order_spread(cases, current_ruleset(), args.fit_orders) if args.fit_orders > 1 else None
        else:
            table = compare(cases, current_ruleset())
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    summary = summarise(table)
    failures = check_limits(summary, limits)
    if args.json:
        document = {"cases": table.to_dict("records"), "groups": summary, "failures": failures}
        if args.cv:
            document |= {"in_sample": summarise(inside), "out_of_sample": summary,
                         "coefficients": {r: {"rules": cv.shipped[r], "fitted": cv.fitted[r],
                                              "sources": sorted(cv.informed.get(r, ()))} for r in cv.shipped}}
            if spread:
                document["fit_orders"] = spread
        print(json.dumps(document, indent=2, default=float))
    else:
        print(render_cv_text(cv, current_ruleset()) if args.cv else render_text(table, summary))
        if args.cv and spread:
            print(render_order_spread(spread))
        for f in failures:
            print(f"FAIL: {f}")
    return 1 if failures else 0


def parse_limits(args, groups: tuple[str, ...]) -> list[tuple[str, str, float]]:
    """`--max-median-error training=0.10` and the like, as (kind, group, limit)."""
    out, problems = [], []
    for kind, items in (("median", args.max_median_error), ("worst", args.max_worst_error),
                        ("factor", args.max_worst_factor)):
        for item in items:
            group, _, value = item.partition("=")
            try:
                out.append((kind, group.strip(), float(value)))
            except ValueError:
                problems.append(Problem("validate.limit", item, "write limits as GROUP=NUMBER, e.g. training=0.10."))
            if group.strip() not in groups:
                problems.append(Problem("validate.limit", item, f"group must be one of {', '.join(groups)}."))
    if problems:
        raise SizingError(problems)
    return out
