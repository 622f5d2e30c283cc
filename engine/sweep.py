"""`sizing sweep`: evaluate a grid of configurations in one numpy pass and recommend the best that works."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from engine.problems import Problem, SizingError

OBJECTIVES = {"cost": "cost_total", "time": "job_hours", "gpus": "gpu_count"}
SHOWN = ["gpu", "gpu_count", "precision", "job_hours", "training_time_days", "ttft_ms", "tpot_ms",
         "output_tokens_per_s", "memory_per_gpu_gb", "gpu_memory_gb", "cost_total",
         "cost_per_million_tokens", "bottleneck"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, help="an intake (.yaml, .json or .xlsx) to vary")
    parser.add_argument("--gpu", default="", help="comma-separated GPUs (ids or aliases), e.g. H100,A100,4090")
    parser.add_argument("--gpu-count", default="", help="comma-separated GPU counts, e.g. 1,2,4,8")
    parser.add_argument("--precision", default="", help="comma-separated precisions, e.g. bf16,fp8")
    parser.add_argument("--by", choices=sorted(OBJECTIVES), default="cost", help="what to minimise")
    parser.add_argument("--top", type=int, default=10, help="rows to print")
    parser.add_argument("--csv", type=Path, default=None, help="also write every scenario to this CSV file")


def run(args) -> int:
    from engine.rules import current_ruleset
    try:
        ruleset = current_ruleset()
        values = _base_values(args.base, ruleset)
        grid = _grid(args, ruleset)
        table = sweep(values, ruleset, grid)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    if args.csv:
        table.to_csv(args.csv, index=False)
    ranked = recommend(table, OBJECTIVES[args.by])
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


def sweep(values: dict, ruleset, grid: dict[str, list]) -> pd.DataFrame:
    from engine.evaluate import evaluate_grid
    return evaluate_grid(values, ruleset, {k: v for k, v in grid.items() if v})


def recommend(table: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Scenarios that fit and meet their targets, best first by the objective."""
    ok = table["fits_in_memory"].astype(bool)
    if "meets_latency_targets" in table and table["is_inference"].any():
        targets = table["meets_latency_targets"]
        ok &= targets.astype(bool) | ~(table.get("warning.latency_target_missed", False))
    for warning in ("warning.deadline_missed", "warning.throughput_short", "warning.latency_target_missed"):
        if warning in table:
            ok &= ~table[warning].astype(bool)
    ranked = table[ok]
    key = objective if objective in ranked and ranked[objective].notna().any() else "cost_total"
    return ranked.sort_values([key, "gpu_count"], kind="stable")


def _base_values(path: Path, ruleset) -> dict:
    from engine.intake import read
    intake = read(path)
    try:
        from engine.validate import validate
    except ImportError:
        return intake.values
    problems = validate(intake, ruleset.catalogs)
    if problems:
        raise SizingError(problems)
    return intake.values


def _grid(args, ruleset) -> dict[str, list]:
    problems, grid = [], {}
    gpus = [g.strip() for g in args.gpu.split(",") if g.strip()]
    resolved = []
    for g in gpus:
        gid = ruleset.catalogs.resolve_gpu(g)
        if gid is None:
            near = ", ".join(n for _, n in ruleset.catalogs.closest_gpus(g)) or "none"
            problems.append(Problem("sweep.unknown_gpu", "--gpu", f"unknown GPU `{g}`; closest: {near}."))
        resolved.append(gid)
    grid["gpu"] = resolved
    try:
        grid["gpu_count"] = [float(c) for c in args.gpu_count.split(",") if c.strip()]
    except ValueError:
        problems.append(Problem("sweep.count", "--gpu-count", "GPU counts must be whole numbers, e.g. 1,2,4,8."))
    precisions = []
    for p in (p.strip() for p in args.precision.split(",") if p.strip()):
        pid = ruleset.catalogs.resolve_precision(p)
        if pid is None:
            problems.append(Problem("sweep.precision", "--precision",
                                    f"unknown precision `{p}`; use {', '.join(ruleset.catalogs.precisions)}."))
        precisions.append(pid)
    grid["precision"] = precisions
    if problems:
        raise SizingError(problems)
    return grid
