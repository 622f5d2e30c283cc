"""Other configurations worth quoting: GPU types, counts and precisions, each with a layout, best first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.calc.evaluate import evaluate, evaluate_columns
from engine.calc.planner import TRAINING, given_layout, plan_layout
from engine.calc.targets import fewer_gpus_first, misses, objective_score

SHOWN = 5                   # alternatives besides the requested configuration
CHANGES = 2                 # of them at most this many at another precision, while like-for-like ones exist
TRAINING_FIGURES = ("training_time_days", "job_hours", "cost_total", "cost_currency", "fits_in_memory", "feasible",
                    "memory_per_gpu_gb", "gpu_memory_gb", "memory_limit_gb", "meets_deadline")
SERVING_FIGURES = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "cost_total", "cost_per_million_tokens",
                   "cost_currency", "fits_in_memory", "feasible", "memory_per_gpu_gb", "gpu_memory_gb",
                   "memory_limit_gb", "meets_latency_targets", "meets_throughput", "job_hours", "ttft_target_used",
                   "tpot_target_used", "throughput_needed")
# A few layouts a competent team would try first: enough to tell a configuration that can work
# from one that cannot, before the best few are planned in full.
TRAINING_SKETCHES = ({"tensor_parallel": 1, "pipeline_parallel": 1, "zero_stage": 1},
                     {"tensor_parallel": 1, "pipeline_parallel": 1, "zero_stage": 3},
                     {"tensor_parallel": 1, "pipeline_parallel": 1, "zero_stage": 3, "activation_checkpointing": True},
                     {"tensor_parallel": 4, "pipeline_parallel": 1, "zero_stage": 1},
                     {"tensor_parallel": 8, "pipeline_parallel": 1, "zero_stage": 1},
                     {"tensor_parallel": 8, "pipeline_parallel": 1, "zero_stage": 1, "activation_checkpointing": True},
                     {"tensor_parallel": 8, "pipeline_parallel": 4, "zero_stage": 1, "virtual_pipeline_stages": 2},
                     {"tensor_parallel": 8, "pipeline_parallel": 8, "zero_stage": 1, "virtual_pipeline_stages": 2,
                      "activation_checkpointing": True},
                     {"tensor_parallel": 8, "pipeline_parallel": 16, "zero_stage": 1, "virtual_pipeline_stages": 2,
                      "activation_checkpointing": True})
SERVING_SKETCHES = tuple({"tensor_parallel": t} for t in (1, 2, 4, 8))
LAYOUT_DEFAULTS = {"tensor_parallel": 1, "pipeline_parallel": 1, "zero_stage": 1, "activation_checkpointing": False,
                   "virtual_pipeline_stages": 1, "micro_batch_size": 1, "context_parallel": 1}


@dataclass
class Option:
    """One configuration as quoted: what it is, its layout and figures, and whether it meets the targets."""

    gpu: str
    gpu_count: int
    precision: str
    layout: dict[str, Any]
    figures: dict[str, Any]
    meets_targets: bool
    requested: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        keep = {k: v for k, v in self.figures.items() if k not in ("job_hours",)}
        return {"gpu": self.gpu, "gpu_name": self.extra.get("gpu_name", self.gpu), "gpu_count": self.gpu_count,
                "precision": self.precision, "requested": self.requested, "meets_targets": self.meets_targets,
                "precision_change": bool(self.extra.get("precision_change")),
                **keep, "layout": dict(self.layout)}


def alternatives(values: dict, ruleset, *, requested_layout: dict, objective: str = "cost",
                 gpus: list[str] | None = None, counts: list[int] | None = None,
                 precisions: list[str] | None = None, shown: int = SHOWN) -> list[Option]:
    """The requested configuration first, then the best `shown` others that fit and meet the targets
    (or, where none does, come nearest), ranked by `objective` (cost, time or gpus)."""
    training = values.get("workload") in TRAINING
    gpu = ruleset.catalogs.resolve_gpu(values.get("gpu")) or values.get("gpu")
    values = priced_for(values, gpu)
    requested = _option(values, ruleset, gpu, _count(values.get("gpu_count")),
                        values.get("precision"), requested_layout, training, requested=True)
    grid = candidate_grid(values, ruleset, gpus, counts, precisions)
    sketches = _sketches(values, training)
    best = _best_per_configuration(evaluate_configurations(values, ruleset, grid, sketches, training),
                                   values, training)
    asked_precision = requested.precision
    if counts is None and not any(r["ok"] and r["precision"] == asked_precision for r in best):
        # nothing near the request meets the targets at its own precision: look further, up to 64 times the GPUs
        grid["gpu_count"] = _beyond(max(_count(values.get("gpu_count")), 1))
        best += _best_per_configuration(evaluate_configurations(values, ruleset, grid, sketches, training),
                                        values, training)
    ranked = _rank(best, objective)
    # like-for-like (the precision asked for) first; another precision is a change the customer must make
    groups: dict[bool, list[Option]] = {False: [], True: []}
    kinds: dict[bool, set] = {False: set(), True: set()}
    asked = (requested.gpu, requested.gpu_count, requested.precision)
    for row in ranked:
        if len(groups[False]) >= shown - CHANGES and len(groups[True]) >= CHANGES:
            break               # enough of both: planning a layout is the costly part
        change = row["precision"] != requested.precision
        if len(groups[change]) >= shown or row["gpu"] in kinds[change] \
                or (row["gpu"], int(row["gpu_count"]), row["precision"]) == asked:
            continue            # one line per GPU type and group (the requested type too, at another count
            #                     or precision)
        scenario = {**values, "gpu": row["gpu"], "gpu_count": int(row["gpu_count"]),
                    "precision": row["precision"]}
        layout = plan_layout(scenario, ruleset).chosen     # the sketch found it; the planner lays it out
        option = _option(values, ruleset, row["gpu"], int(row["gpu_count"]), row["precision"], layout, training)
        if row["ok"] and not option.meets_targets:
            continue            # a sketch the planner's layout cannot keep (the batch does not divide): next
        option.extra["precision_change"] = change
        kinds[change].add(row["gpu"])
        groups[change].append(option)
    same, changed = (_settled(groups[c], objective) for c in (False, True))
    count = min(len(changed), CHANGES if same else shown)
    others = same[:shown - count]
    others += changed[:shown - len(others)]
    # what works first; among it like-for-like before a change of precision
    others.sort(key=lambda o: (not o.meets_targets, o.extra["precision_change"] if o.meets_targets else 0))
    return [requested] + others


def _settled(options: list[Option], objective: str) -> list[Option]:
    """Those that meet the targets best first (within a few percent, fewer GPUs first); then the nearest misses."""
    meeting = [o for o in options if o.meets_targets]
    order = fewer_gpus_first([_score(o, objective) for o in meeting], [o.gpu_count for o in meeting])
    missing = sorted((o for o in options if not o.meets_targets), key=lambda o: (o.extra["shortfall"], o.gpu_count))
    return [meeting[i] for i in order] + missing


def priced_for(values: dict, gpu) -> dict:
    """The intake with its typed price tied to its own GPU (rules/cost.yaml, price_gpu): other GPUs
    tried beside it pay their catalog price in the intake's currency, never the typed one."""
    return {**values, "price_gpu": gpu} if gpu else dict(values)


def candidate_grid(values: dict, ruleset, gpus=None, counts=None, precisions=None) -> dict[str, list]:
    """GPUs with a price, counts around the requested one, precisions each GPU really has."""
    catalogs = ruleset.catalogs
    gpus = gpus or [g for g, e in catalogs.gpus.items()
                    if e.get("price_usd_per_gpu_hour") and e.get("segment") != "edge"]
    base = max(_count(values.get("gpu_count")), 1)
    counts = counts or sorted({c for c in _around(base) if c >= 1})
    asked = values.get("precision") or "bf16"
    wanted = precisions or list(dict.fromkeys([asked, "bf16", "fp8"]))
    return {"gpu": gpus, "gpu_count": counts, "precision": wanted}


def evaluate_configurations(values: dict, ruleset, grid: dict[str, list], sketches: list[dict],
                            training: bool, *, outputs: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Every GPU × count × precision × sketched layout as one array pass; rows a GPU cannot run
    (a precision it lacks, a layout its count does not divide) are left out before evaluating."""
    gpus, precisions, counts = list(grid["gpu"]), list(grid["precision"]), list(grid["gpu_count"])
    if not (gpus and precisions and counts and sketches):
        return {}
    has = ruleset.functions["has_precision"].fn
    runs = np.array([[bool(has(g, p)) for p in precisions] for g in gpus])
    per_node = np.array([(ruleset.catalogs.gpus.get(g) or {}).get("gpus_per_node") or 8 for g in gpus])
    tp = np.array([s.get("tensor_parallel", 1) for s in sketches])
    pp = np.array([s.get("pipeline_parallel", 1) for s in sketches])
    count_of = np.asarray(counts)
    # every GPU × precision × count × sketch, in that order; each index array one row per scenario
    g, p, c, k = (a.ravel() for a in np.meshgrid(np.arange(len(gpus)), np.arange(len(precisions)),
                                                  np.arange(len(counts)), np.arange(len(sketches)), indexing="ij"))
    # a precision the GPU lacks would only repeat its fallback's figures; TP stays within a node
    keep = (runs[g, p] & (count_of[c] % (tp[k] * pp[k]) == 0)
            & (tp[k] <= np.minimum(per_node[g], count_of[c])))
    g, p, c, k = g[keep], p[keep], c[keep], k[keep]
    if not len(g):
        return {}
    columns = {"gpu": np.asarray(gpus, dtype=str)[g], "gpu_count": count_of[c].astype(float),
               "precision": np.asarray(precisions, dtype=str)[p]}
    for key in {key for s in sketches for key in s}:
        default = LAYOUT_DEFAULTS.get(key, 1)
        column = np.array([s.get(key, default) for s in sketches])
        columns[key] = (column.astype(bool) if isinstance(default, bool) else column.astype(float))[k]
    base = {key: value for key, value in values.items() if key not in columns}
    wanted = outputs or (TRAINING_FIGURES if training else SERVING_FIGURES)
    frame = evaluate_columns(base, ruleset, columns, len(g), only=[w for w in wanted if w in ruleset.rules])
    out = {key: np.asarray(frame[key]) for key in frame}
    out["sketch"] = k
    out["configuration"] = (g * len(precisions) + p) * len(counts) + c
    return out


def _best_per_configuration(table: dict[str, np.ndarray], values: dict, training: bool) -> list[dict]:
    """Per GPU × count × precision, its fastest sketch that meets everything (or the one nearest to it)."""
    if not table:
        return []
    _, worst = misses(table, values)
    ok = worst <= 1
    speed = table["job_hours"] if training else -np.nan_to_num(table["output_tokens_per_s"], nan=0.0)
    speed = np.where(np.isfinite(speed), speed, np.inf)
    group = table["configuration"]
    # within each configuration: meets everything first, then the smallest shortfall, then the fastest
    order = np.lexsort((speed, worst, ~ok, group))
    first = order[np.r_[True, group[order][1:] != group[order][:-1]]]
    picked = {key: column[first].tolist() for key, column in table.items()}
    picked["ok"], picked["shortfall"] = ok[first].tolist(), worst[first].astype(float).tolist()
    return [{key: picked[key][i] for key in picked} for i in range(len(first))]


def _rank(rows: list[dict], objective: str) -> list[dict]:
    """Those that meet everything first, best by the objective (within a few percent of each other,
    fewer GPUs first: more GPUs often cost the same GPU-hours and only finish sooner); then the nearest misses."""
    if not rows:
        return []
    scores = objective_score({k: [r.get(k, np.nan) for r in rows] for k in rows[0]}, objective)
    meeting = [i for i, r in enumerate(rows) if r["ok"]]
    order = fewer_gpus_first([scores[i] for i in meeting], [rows[i]["gpu_count"] for i in meeting])
    missing = sorted((i for i, r in enumerate(rows) if not r["ok"]),
                     key=lambda i: (rows[i]["shortfall"], rows[i]["gpu_count"]))
    return [rows[meeting[j]] for j in order] + [rows[i] for i in missing]


def _option(values, ruleset, gpu, count, precision, layout, training, requested=False) -> Option:
    scenario = {**values, "gpu": gpu, "gpu_count": count, "precision": precision}
    wanted = [k for k in (TRAINING_FIGURES if training else SERVING_FIGURES) + ("gpu_name",) if k in ruleset.rules]
    result = evaluate(scenario, ruleset, layout=layout, only=wanted).values     # no trace: figures only
    figures = {k: result.get(k) for k in (TRAINING_FIGURES if training else SERVING_FIGURES) if k in result}
    _, worst = misses({k: [v] for k, v in result.items() if k in figures or k == "job_hours"}, values)
    meets = bool(worst[0] <= 1)
    return Option(gpu=gpu, gpu_count=int(count), precision=str(precision), layout=dict(layout),
                  figures=figures, meets_targets=meets, requested=requested,
                  extra={"gpu_name": result.get("gpu_name", gpu), "shortfall": float(worst[0])})


def _sketches(values: dict, training: bool) -> list[dict]:
    """The sketched layouts, with whatever the intake fixed put into each (duplicates dropped)."""
    given = given_layout(values, values.get("workload"))
    out = []
    for sketch in (TRAINING_SKETCHES if training else SERVING_SKETCHES):
        merged = {**sketch, **given}
        if merged not in out:
            out.append(merged)
    return out


def _around(base: int) -> list[int]:
    """Counts worth comparing: powers of two from an eighth to four times the request, and ×1.5 steps."""
    out = {base, max(base // 2, 1), base * 2, base * 4, int(base * 1.5)}
    n = 1
    while n <= base * 4:
        if n >= base / 8:
            out.add(n)
            if n >= 8:
                out.add(n * 3 // 2)
        n *= 2
    return sorted(c for c in out if c >= 1)


def _beyond(base: int) -> list[int]:
    """Counts from 8 to 64 times the request, in powers of two and ×1.5 steps."""
    return sorted({int(base * f) for f in (6, 8, 12, 16, 24, 32, 48, 64)})


def _score(option: Option, objective: str) -> float:
    figures = {k: [v] for k, v in option.figures.items()}
    return float(objective_score({**figures, "gpu_count": [option.gpu_count]}, objective)[0])


def _count(value) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0
