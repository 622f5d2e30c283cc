"""`sizing sweep BASE`: GPUs × counts × precisions, each laid out by the planner, ranked; why the rest fail."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.commands import limits

HELP = "evaluate a grid of configurations and recommend"
EXAMPLES = (("sizing sweep case.yaml --gpu H100,A100,L40S --gpu-count 1,2,4,8", "the cheapest setup that fits"),
            ("sizing sweep case.yaml --precision bf16,fp8 --by time -o sweeps/",
             "the fastest, and the ranked table as CSV, xlsx and HTML in sweeps/"))
EXIT = ("0 a recommendation; 1 nothing in the grid fits and meets the targets; 2 an invalid intake or grid, "
        "or past the time or memory limit.")
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
    limits.add_arguments(parser)


def run(args) -> int:
    from engine.calc.ruleset import current_ruleset
    from engine.problems import SizingError
    try:
        ruleset = current_ruleset()
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    return limits.run_one(args, args.base, ruleset, sweep_one)      # in a process of its own, under the limits


def sweep_one(ruleset, args) -> int:
    """The sweep of one intake, printed (and written with -o); its exit status."""
    from engine.calc.sweep import parse_grid, sweep
    from engine.contract import TRAINING_WORKLOADS
    from engine.files import write_atomic
    from engine.job import read_checked
    from engine.problems import SizingError
    from engine.files import output_stem
    from engine.intake.form import current_form
    from engine.quote.messages import messages
    from engine.quote.sweep_table import columns, csv_bytes, rows, write_sweep
    try:
        intake = read_checked(args.base, ruleset)
        grid = parse_grid(args.gpu, args.gpu_count, args.precision, ruleset.catalogs)
        result = sweep(intake.values, ruleset, grid, objective=args.by, progress=_progress_bar)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    m = messages(intake.language)
    training = intake.values.get("workload") in TRAINING_WORKLOADS
    # every GPU's cost in one currency: the typed price's, and catalog prices converted (rules/cost.yaml)
    table = result.table
    currency = str(table["cost_currency"].iloc[0]) if "cost_currency" in table and len(table) else "USD"
    if args.csv:
        write_atomic(args.csv, csv_bytes(result))
    if args.output:
        for path in write_sweep(result, ruleset, args.output, output_stem(args.base.name), training, m,
                                currency):
            print(f"wrote {path}", file=sys.stderr)
    qualifying = result.qualifying
    print(m("sweep.summary", configurations=len(result.table), layouts=f"{result.scenarios:,}",
            qualifying=len(qualifying)))
    for name, precision in result.left_out:
        print(m("sweep.left_out", precision=precision, gpu=current_form().catalog_name(name, m.lang)))
    heads = columns(result, ruleset, training, m, currency)
    keys = [k for k, _ in heads]
    shown = rows(result, keys, m, args.top)
    if shown:
        _print_table([h for _, h in heads], shown)
    if qualifying.empty:
        print("\n" + m("sweep.nothing", reasons=_failure_words(m, result.failures(), intake.values)))
        nearest = result.nearest()
        if nearest is not None:
            print(m("sweep.nearest", configuration=_configuration(m, nearest),
                    misses=_miss_words(m, nearest, intake.values)))
        return 1
    best = qualifying.iloc[0]
    print("\n" + m("sweep.recommended", configuration=_configuration(m, best),
                   objective=m(f"sweep.objectives.{args.by}")))
    return 0


def _progress_bar(tasks, total):
    """A progress bar on a terminal (stderr), silent when piped or run by a service."""
    from tqdm import tqdm
    return tqdm(tasks, total=total, desc="sweep", unit="GPU×precision", file=sys.stderr, leave=False,
                delay=PROGRESS_AFTER_S, disable=not sys.stderr.isatty())


def _configuration(m, row) -> str:
    from engine.quote.sweep_table import gpu_name, layout_text
    return m("sweep.configuration", count=int(row["gpu_count"]), gpu=gpu_name(row, m),
             precision=row["precision"], layout=layout_text(row, m))


def _days(m, values: dict) -> str:
    try:
        return f"{float(values.get('deadline_days')):g}"
    except (TypeError, ValueError):
        return m("sweep.deadline_given")


def _failure_words(m, failures: dict[str, int], values: dict) -> str:
    return m("sweep.joiner").join(m(f"sweep.failures.{c}", count=n, days=_days(m, values))
                                  for c, n in failures.items()) or m("sweep.nothing_evaluated")


def _miss_words(m, row, values: dict) -> str:
    """What the nearest miss lacks, with the figure that shows it."""
    # the quote's rounding, and GB as the GPU's name counts them (engine.quote.messages.shown)
    words = {"memory": lambda: dict(need=m.number(m.shown(row["memory_per_gpu_gb"], "GB", gpu_memory=True)[0]),
                                    have=m.number(m.shown(row["gpu_memory_gb"], "GB", gpu_memory=True)[0])),
             "deadline": lambda: dict(days=m.number(row["training_time_days"]), deadline=_days(m, values)),
             "latency": lambda: dict(ttft=f"{row['ttft_ms']:.0f}", ttft_target=f"{row['ttft_target_used']:.0f}",
                                     tpot=f"{row['tpot_ms']:.0f}", tpot_target=f"{row['tpot_target_used']:.0f}"),
             "throughput": lambda: dict(tokens=f"{row['output_tokens_per_s']:,.0f}",
                                        needed=f"{row['throughput_needed']:,.0f}"),
             "layout": dict}
    parts = [m(f"sweep.misses.{c}", **words[c]()) for c in str(row["misses"]).split(", ") if c in words]
    short = row["shortfall"]
    return m("sweep.joiner").join(parts) + (m("sweep.short_by", times=f"{short:.2f}") if short < float("inf") else "")


def _print_table(labels: list[str], body: list[list]) -> None:
    cells = [labels] + [[f"{v:,}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
                         for v in line] for line in body]
    widths = [max(_width(r[i]) for r in cells) for i in range(len(labels))]
    for line in cells:       # padded by what a terminal shows: a Chinese character takes two columns
        print("  ".join(v + " " * (w - _width(v)) for v, w in zip(line, widths)).rstrip())


def _width(text: str) -> int:
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
