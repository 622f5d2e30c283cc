"""The sweep: every GPU × count × precision laid out by the planner in array passes, ranked, with why the rest fail."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from engine.calc.alternatives import priced_for
from engine.calc.evaluate import evaluate, evaluate_columns, input_values
from engine.calc.planner import (SHAPE, best_layout, candidate_columns, chosen_layout, evaluate_layouts, given_layout,
                                 layout_families, model_copies, plan_outputs)
from engine.calc.targets import CRITERIA, fewer_gpus_first, misses, objective_score
from engine.problems import Problem, SizingError

if TYPE_CHECKING:
    import pandas as pd   # imported where a table is made: a quote's scaling table does without

OBJECTIVES = {"cost": "cost_total", "time": "job_hours", "gpus": "gpu_count"}
MAX_COUNTS = 64             # GPU counts per sweep: each brings thousands of candidate layouts per GPU
MAX_GPU_COUNT = 10_000_000  # the intake form's own limit
SHOWN = ["gpu_name", "gpu_count", "precision", "layout", "training_time_days", "ttft_ms", "tpot_ms",
         "output_tokens_per_s", "memory_per_gpu_gb", "gpu_memory_gb", "cost_total", "cost_per_million_tokens",
         "bottleneck", "misses"]
FIGURES = ("training_time_days", "job_hours", "cost_total", "cost_per_million_tokens", "memory_per_gpu_gb",
           "gpu_memory_gb", "memory_limit_gb", "fits_in_memory", "meets_deadline", "meets_latency_targets",
           "meets_throughput", "ttft_ms", "tpot_ms", "output_tokens_per_s", "ttft_target_used", "tpot_target_used",
           "throughput_needed", "bottleneck", "gpu_name", "cost_currency")


@dataclass
class Sweep:
    """One row per configuration with its planned layout, qualifying ones first; what was left out and why."""

    table: pd.DataFrame
    scenarios: int                                   # layouts evaluated in all
    objective: str = "cost"
    left_out: list[tuple[str, str]] = field(default_factory=list)   # (GPU name, precision) it lacks

    @property
    def qualifying(self) -> pd.DataFrame:
        return self.table[self.table["qualifies"]] if len(self.table) else self.table

    def failures(self) -> dict[str, int]:
        """How many configurations miss each criterion (one may miss several)."""
        if not len(self.table):
            return {}
        misses = self.table["misses"]
        return {c: int(misses.str.contains(c, regex=False).sum()) for c in CRITERIA
                if misses.str.contains(c, regex=False).any()}

    def nearest(self) -> pd.Series | None:
        """The configuration that misses by the least (its `shortfall` is the factor it lacks)."""
        missing = self.table[~self.table["qualifies"]] if len(self.table) else self.table
        return missing.iloc[0] if len(missing) else None


def sweep(intake, ruleset, grid: dict[str, list], *, objective: str = "cost",
          progress: Callable[[Iterable, int], Iterable] | None = None) -> Sweep:
    """Each GPU × count × precision of `grid` (blank axes keep the intake's value), with the layout
    the planner would choose for it; precisions a GPU lacks are left out, not quoted at a fallback."""
    import pandas as pd
    rows, scenarios, left_out = planned_rows(intake, ruleset, grid, progress=progress)
    table = _ranked(pd.DataFrame(rows), input_values(intake), objective)
    return Sweep(table=table, scenarios=scenarios, objective=objective, left_out=left_out)


def planned_rows(intake, ruleset, grid: dict[str, list], *, outputs: Iterable[str] = (),
                 progress: Callable[[Iterable, int], Iterable] | None = None
                 ) -> tuple[list[dict], int, list[tuple[str, str]]]:
    """(rows, layouts evaluated, (GPU, precision) pairs left out): one row per GPU × count ×
    precision with the planner's layout and its figures (`outputs` adds result keys to FIGURES).
    The sweep ranks these rows; the quote's scaling table shows them — one path for both."""
    values = input_values(intake)
    workload = values.get("workload")
    values = priced_for(values, ruleset.catalogs.resolve_gpu(values.get("gpu")) or values.get("gpu"))
    gpus = [ruleset.catalogs.resolve_gpu(g) or g for g in (grid.get("gpu") or [values.get("gpu")])]
    counts = [int(c) for c in (grid.get("gpu_count") or [values.get("gpu_count")])]
    precisions = list(grid.get("precision") or [values.get("precision")])
    given = given_layout(values, workload)
    wanted = tuple(dict.fromkeys(plan_outputs(workload) + FIGURES + tuple(outputs)))
    wanted = tuple(o for o in wanted if o in ruleset.rules)
    has_precision = ruleset.functions["has_precision"].fn
    tasks = [(g, p) for g in gpus for p in precisions]
    rows, scenarios, left_out, candidates = [], 0, [], {}
    for gpu, precision in (progress(tasks, len(tasks)) if progress else tasks):
        base = {**values, "gpu": gpu, "precision": precision}
        if not has_precision(gpu, precision):
            left_out.append((ruleset.catalogs.name_of(gpu) or gpu, precision))
            continue
        if gpu not in candidates:
            candidates[gpu] = _candidates(base, ruleset, counts, given, workload)
        families, blocks = candidates[gpu]
        frame = evaluate_layouts(base, ruleset, families, only=plan_outputs(workload))
        columns = candidate_columns(frame, families)
        layouts = {k: v for k, v in columns.items() if k != "gpu_count"}
        scenarios += len(families[2])
        best = [start + _best_of(frame, layouts, start, stop, workload, {**values, "gpu_count": count})
                for count, start, stop in blocks]
        figures = _figures(base, ruleset, columns, best, wanted)
        for row, ((count, _, _), index) in enumerate(zip(blocks, best)):
            layout = chosen_layout(frame, layouts, index, workload, given)
            rows.append({"gpu": gpu, "gpu_count": count, "precision": precision,
                         **{k: _plain(figures[k][row]) for k in wanted if k in figures},
                         "layout_values": layout, "layout": describe_layout(layout),
                         "divides": model_copies(layout, count) > 0})
    return rows, scenarios, left_out


def _best_of(frame: dict, layouts: dict, start: int, stop: int, workload: str, values: dict) -> int:
    """The planner's choice among candidates start…stop (one GPU count), counted from start."""
    part = {k: v[start:stop] for k, v in frame.items()}
    return best_layout(part, {k: v[start:stop] for k, v in layouts.items()}, workload, values)


def _figures(base: dict, ruleset, columns: dict, chosen: list[int], wanted: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The figures `wanted` of the chosen candidates only: the layouts are ranked by a few results
    (plan_outputs), so the rest — costs, days, energy — are computed for the one layout kept per
    GPU count rather than for every layout weighed (the same values: each scenario's rules read
    only its own row). A yes/no figure that does not apply (a serving job's deadline) is blank, not "no"."""
    index = np.asarray(chosen, dtype=np.intp)
    return evaluate_columns(base, ruleset, {k: v[index] for k, v in columns.items()}, len(index), only=wanted,
                            unknown_where_not_applied=True)


def _candidates(base: dict, ruleset, counts: list[int], given: dict, workload: str):
    """The planner's candidate layouts for every count, stacked with a gpu_count column (as
    layout_families gives them), and each count's candidates (start, stop)."""
    shape = evaluate(base, ruleset, only=SHAPE).values
    parts, blocks, start, offset = [], [], 0, 0
    for count in counts:
        layouts, inner, family = layout_families({**base, "gpu_count": count}, shape, given, workload)
        size = len(family)
        layouts = {**layouts, "gpu_count": np.full(len(next(iter(layouts.values()))), float(count))}
        parts.append((layouts, inner, family + offset))
        blocks.append((count, start, start + size))
        start += size
        offset += len(layouts["gpu_count"])
    keys = list(dict.fromkeys(k for p in parts for k in p[0]))
    stacked = {k: np.concatenate([p[0].get(k, np.ones(len(p[0]["gpu_count"]))) for p in parts]) for k in keys}
    inner = {k: np.concatenate([p[1][k] for p in parts]) for k in parts[0][1]} if parts else {}
    family = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.intp)
    return (stacked, inner, family), blocks


def _ranked(table: pd.DataFrame, values: dict, objective: str) -> pd.DataFrame:
    """Qualifying configurations best first by the objective; then the rest, nearest miss first."""
    import pandas as pd
    if table.empty:
        return table.assign(qualifies=pd.Series(dtype=bool), misses=pd.Series(dtype=str),
                            shortfall=pd.Series(dtype=float))
    failed, worst = misses(table, values)
    table["misses"] = [", ".join(c for c in CRITERIA if failed[c][i]) for i in range(len(table))]
    table["qualifies"] = table["misses"] == ""
    table["shortfall"] = worst
    scores = objective_score(table, objective)
    qualifying = np.flatnonzero(table["qualifies"].to_numpy())
    # qualifying rows by the objective, within a few percent fewer GPUs first (as the alternatives)
    settled = qualifying[fewer_gpus_first(scores[qualifying], table["gpu_count"].to_numpy()[qualifying])] \
        if len(qualifying) else qualifying
    rest = table[~table["qualifies"]].sort_values(["shortfall", "gpu_count"], kind="stable").index.to_numpy()
    return table.loc[list(settled) + list(rest)].reset_index(drop=True)


def describe_layout(layout: dict) -> str:
    """A layout in the words engineers use: "TP 4 · PP 2 · ZeRO 1 · micro-batch 2 · recompute"."""
    names = (("tensor_parallel", "TP"), ("pipeline_parallel", "PP"), ("virtual_pipeline_stages", "VPP"),
             ("context_parallel", "CP"), ("expert_parallel", "EP"), ("zero_stage", "ZeRO"),
             ("micro_batch_size", "micro-batch"), ("concurrency", "batch"))
    parts = []
    for key, name in names:
        value = layout.get(key)
        if value is None or (key != "zero_stage" and key not in ("concurrency", "micro_batch_size")
                             and value == 1):
            continue
        parts.append(f"{name} {value}")
    if layout.get("activation_checkpointing") is True:
        share = layout.get("recompute_share")
        parts.append(f"recompute {share:.0%} of layers" if share not in (None, 1) else "recompute")
    return " · ".join(parts) or "one GPU per replica"


def _plain(value):
    return value.item() if hasattr(value, "item") else value


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
        grid["gpu_count"] = [int(c) for c in counts.split(",") if c.strip()]
        if any(c < 1 or c > MAX_GPU_COUNT for c in grid["gpu_count"]):
            raise ValueError
    except ValueError:
        problems.append(Problem("sweep.count", "--gpu-count", f"GPU counts must be whole numbers from 1 to "
                                f"{MAX_GPU_COUNT:,}, e.g. 1,2,4,8."))
    if len(grid.get("gpu_count", [])) > MAX_COUNTS:
        problems.append(Problem("sweep.count", "--gpu-count", f"at most {MAX_COUNTS} GPU counts at once "
                                f"({len(grid['gpu_count'])} given); sweep a wider range in steps, e.g. 8,16,32,64."))
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
