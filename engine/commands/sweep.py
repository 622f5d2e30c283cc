"""`sizing sweep BASE`: a grid of GPUs, counts and precisions evaluated in one pass, ranked."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "evaluate a grid of configurations and recommend"
EXAMPLES = (("sizing sweep case.yaml --gpu H100,A100,L40S --gpu-count 1,2,4,8", "the cheapest setup that fits"),
            ("sizing sweep case.yaml --precision bf16,fp8 --by time --csv grid.csv",
             "the fastest, and every scenario in a CSV file"))
EXIT = "0 a recommendation; 1 nothing in the grid fits and meets the targets; 2 an invalid intake or grid."
OBJECTIVES = ("cost", "gpus", "time")      # the keys of engine.calc.sweep.OBJECTIVES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, metavar="BASE", help="an intake (.yaml, .json or .xlsx) to vary")
    parser.add_argument("--gpu", default="", metavar="LIST",
                        help="comma-separated GPUs (ids or aliases), e.g. H100,A100,4090 (default: the intake's)")
    parser.add_argument("--gpu-count", default="", metavar="LIST",
                        help="comma-separated GPU counts, e.g. 1,2,4,8 (default: the intake's)")
    parser.add_argument("--precision", default="", metavar="LIST",
                        help="comma-separated precisions, e.g. bf16,fp8 (default: the intake's)")
    parser.add_argument("--by", choices=OBJECTIVES, default="cost",
                        help="what to minimise: total cost, number of GPUs or time")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="rows to print")
    parser.add_argument("--csv", type=Path, default=None, metavar="FILE", help="also write every scenario to this CSV file")


def run(args) -> int:
    import pandas as pd

    from engine.calc.ruleset import current_ruleset
    from engine.calc.sweep import OBJECTIVES as COLUMNS
    from engine.calc.sweep import SHOWN, parse_grid, recommend, sweep
    from engine.job import read_checked
    from engine.problems import SizingError
    try:
        ruleset = current_ruleset()
        intake = read_checked(args.base, ruleset)
        grid = parse_grid(args.gpu, args.gpu_count, args.precision, ruleset.catalogs)
        table = sweep(intake.values, ruleset, grid)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    if args.csv:
        table.to_csv(args.csv, index=False)
    ranked = recommend(table, COLUMNS[args.by])
    print(f"{len(table)} configurations evaluated; {len(ranked)} fit in memory and meet the targets.")
    if ranked.empty:
        return 1
    columns = [c for c in SHOWN if c in ranked and ranked[c].notna().any()]
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.float_format", "{:,.4g}".format):
        print(ranked[columns].head(args.top).to_string(index=False))
    best = ranked.iloc[0]
    print(f"\nRecommended: {int(best['gpu_count'])} × {best.get('gpu_name', best['gpu'])} at {best['precision']} "
          f"(lowest {args.by}).")
    return 0
