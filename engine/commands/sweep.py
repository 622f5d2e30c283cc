"""`sizing sweep BASE`: GPUs × counts × precisions, each laid out by the planner, ranked; why the rest fail."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "evaluate a grid of configurations and recommend"
EXAMPLES = (("sizing sweep case.yaml --gpu H100,A100,L40S --gpu-count 1,2,4,8", "the cheapest setup that fits"),
            ("sizing sweep case.yaml --precision bf16,fp8 --by time -o sweeps/",
             "the fastest, and the ranked table as CSV, xlsx and HTML in sweeps/"))
EXIT = "0 a recommendation; 1 nothing in the grid fits and meets the targets; 2 an invalid intake or grid."
OBJECTIVES = ("cost", "gpus", "time")      # the keys of engine.calc.sweep.OBJECTIVES
PROGRESS_AFTER_S = 0.5                     # a bar only for sweeps long enough to wonder about


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, metavar="BASE", help="an intake (.yaml, .json or .xlsx) to vary")
    parser.add_argument("--gpu", default="", metavar="LIST",
                        help="comma-separated GPUs (ids or aliases), e.g. H100,A100,4090 (default: the intake's)")
    parser.add_argument("--gpu-count", default="", metavar="LIST",
                        help="comma-separated GPU counts, e.g. 1,2,4,8 (default: the intake's)")
    parser.add_argument("--precision", default="", metavar="LIST",
                        help="comma-separated precisions, e.g. bf16,fp8 (default: the intake's); "
                             "a precision a GPU lacks is left out for that GPU")
    parser.add_argument("--by", choices=OBJECTIVES, default="cost",
                        help="what to minimise: total cost, number of GPUs or time")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="rows to print")
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="DIR",
                        help="write the ranked table as DIR/<stem>.sweep.csv, .xlsx and .html")
    parser.add_argument("--csv", type=Path, default=None, metavar="FILE",
                        help="also write every configuration to this CSV file")


def run(args) -> int:
    from engine.calc.ruleset import current_ruleset
    from engine.calc.sweep import parse_grid, sweep
    from engine.files import write_atomic
    from engine.job import read_checked
    from engine.problems import SizingError
    from engine.quote.sweep_table import columns, csv_bytes, rows, write_sweep
    try:
        ruleset = current_ruleset()
        intake = read_checked(args.base, ruleset)
        grid = parse_grid(args.gpu, args.gpu_count, args.precision, ruleset.catalogs)
        result = sweep(intake.values, ruleset, grid, objective=args.by, progress=_progress_bar)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    training = intake.values.get("workload") in ("pretraining", "fine-tuning")
    # every GPU's cost in one currency: the typed price's, and catalog prices converted (rules/cost.yaml)
    table = result.table
    currency = str(table["cost_currency"].iloc[0]) if "cost_currency" in table and len(table) else "USD"
    if args.csv:
        write_atomic(args.csv, csv_bytes(result))
    if args.output:
        for path in write_sweep(result, ruleset, args.output, args.base.stem, training, currency):
            print(f"wrote {path}", file=sys.stderr)
    qualifying = result.qualifying
    print(f"{len(result.table)} configurations evaluated ({result.scenarios:,} layouts); "
          f"{len(qualifying)} fit in memory and meet the targets.")
    for name, precision in result.left_out:
        print(f"Left out: {precision} on {name} (the GPU has no {precision} support; it would only repeat "
              f"its fallback's figures).")
    heads = columns(result, ruleset, training, currency)
    keys = [k for k, _ in heads]
    shown = rows(result, keys, args.top)
    if shown:
        _print_table([h for _, h in heads], shown)
    if qualifying.empty:
        print("\nNothing qualifies: " + _failure_words(result.failures(), intake.values) + ".")
        nearest = result.nearest()
        if nearest is not None:
            print(f"Nearest: {_configuration(nearest)}, {_miss_words(nearest, intake.values)}.")
        return 1
    best = qualifying.iloc[0]
    print(f"\nRecommended: {_configuration(best)} (lowest {args.by}; within 3%, fewer GPUs; "
          f"memory headroom kept).")
    return 0


def _progress_bar(tasks, total):
    """A progress bar on a terminal (stderr), silent when piped or run by a service."""
    from tqdm import tqdm
    return tqdm(tasks, total=total, desc="sweep", unit="GPU×precision", file=sys.stderr, leave=False,
                delay=PROGRESS_AFTER_S, disable=not sys.stderr.isatty())


def _configuration(row) -> str:
    return f"{int(row['gpu_count'])} × {row.get('gpu_name', row['gpu'])} at {row['precision']} ({row['layout']})"


def _days(values: dict) -> str:
    try:
        return f"{float(values.get('deadline_days')):g}"
    except (TypeError, ValueError):
        return "given"


def _failure_words(failures: dict[str, int], values: dict) -> str:
    words = {"layout": "cannot take the fixed layout", "memory": "do not fit in memory with headroom",
             "deadline": f"miss the {_days(values)}-day deadline",
             "latency": "miss the latency targets", "throughput": "cannot carry the request rate"}
    return "; ".join(f"{n} {words[c]}" for c, n in failures.items()) or "no configuration was evaluated"


def _miss_words(row, values: dict) -> str:
    """What the nearest miss lacks, with the figure that shows it."""
    parts = []
    for criterion in str(row["misses"]).split(", "):
        if criterion == "memory":
            parts.append(f"needs {row['memory_per_gpu_gb']:.0f} GB per GPU of {row['gpu_memory_gb']:.0f} GB")
        elif criterion == "deadline":
            parts.append(f"takes {row['training_time_days']:.1f} days against the {_days(values)}-day "
                         f"deadline")
        elif criterion == "latency":
            parts.append(f"first token in {row['ttft_ms']:.0f} ms (target {row['ttft_target_used']:.0f}), "
                         f"{row['tpot_ms']:.0f} ms per token (target {row['tpot_target_used']:.0f})")
        elif criterion == "throughput":
            parts.append(f"gives {row['output_tokens_per_s']:,.0f} output tokens/s of the "
                         f"{row['throughput_needed']:,.0f} needed")
        elif criterion == "layout":
            parts.append("the fixed layout does not divide its GPUs")
    short = row["shortfall"]
    return "; ".join(parts) + (f" (short by {short:.2f}×)" if short < float("inf") else "")


def _print_table(labels: list[str], body: list[list]) -> None:
    cells = [labels] + [[f"{v:,}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
                         for v in line] for line in body]
    widths = [max(len(r[i]) for r in cells) for i in range(len(labels))]
    for line in cells:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip())
