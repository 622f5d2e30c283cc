"""A grid of configurations evaluated in one numpy pass, and the best that works."""

from __future__ import annotations

import pandas as pd

from engine.calc.evaluate import evaluate_grid
from engine.problems import Problem, SizingError

OBJECTIVES = {"cost": "cost_total", "time": "job_hours", "gpus": "gpu_count"}
SHOWN = ["gpu", "gpu_count", "precision", "job_hours", "training_time_days", "ttft_ms", "tpot_ms",
         "output_tokens_per_s", "memory_per_gpu_gb", "gpu_memory_gb", "cost_total",
         "cost_per_million_tokens", "bottleneck"]


def sweep(values: dict, ruleset, grid: dict[str, list]) -> pd.DataFrame:
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


def parse_grid(gpus: str, counts: str, precisions: str, catalogs) -> dict[str, list]:
    """The grid from comma-separated GPUs, counts and precisions; SizingError names each unknown."""
    problems, grid = [], {}
    gpus = [g.strip() for g in gpus.split(",") if g.strip()]
    resolved = []
    for g in gpus:
        gid = catalogs.resolve_gpu(g)
        if gid is None:
            near = ", ".join(n for _, n in catalogs.closest_gpus(g)) or "none"
            problems.append(Problem("sweep.unknown_gpu", "--gpu", f"unknown GPU `{g}`; closest: {near}."))
        resolved.append(gid)
    grid["gpu"] = resolved
    try:
        grid["gpu_count"] = [float(c) for c in counts.split(",") if c.strip()]
    except ValueError:
        problems.append(Problem("sweep.count", "--gpu-count", "GPU counts must be whole numbers, e.g. 1,2,4,8."))
    resolved_precisions = []
    for p in (p.strip() for p in precisions.split(",") if p.strip()):
        pid = catalogs.resolve_precision(p)
        if pid is None:
            problems.append(Problem("sweep.precision", "--precision",
                                    f"unknown precision `{p}`; use {', '.join(catalogs.precisions)}."))
        resolved_precisions.append(pid)
    grid["precision"] = resolved_precisions
    if problems:
        raise SizingError(problems)
    return grid
