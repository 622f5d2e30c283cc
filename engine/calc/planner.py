"""The planner: the layout a competent team would run on the hardware asked for, chosen in one array pass."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.calc.evaluate import evaluate, evaluate_columns, input_values
from engine.calc.targets import positive
from engine.contract import INFERENCE_LAYOUT, TRAINING_LAYOUT

TRAINING = ("pretraining", "fine-tuning")
ONLINE = "online-inference"
# What the candidates are judged by; the rule set computes them.
TRAINING_OUTPUTS = ("step_time_s", "fits_in_memory", "memory_per_gpu_gb", "memory_limit_gb")
SERVING_OUTPUTS = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "fits_in_memory", "memory_per_gpu_gb",
                   "concurrency_used", "memory_concurrency", "meets_latency_targets", "stack_max_batch", "dp")
SHAPE = ("n_layers", "n_heads", "n_kv_heads", "gpus_per_node_used", "moe_total_experts", "is_moe", "seq")
MAX_BATCH = 4096            # the largest serving batch the planner tries (per replica counts below it)
# Recomputing only as many layers as memory needs (Megatron-LM --recompute-method block
# --recompute-num-layers, NeMo activations_checkpoint_num_layers): the planner's recompute is full
# only when a smaller share does not fit; an intake's own activation_checkpointing is every layer.
RECOMPUTE_SHARES = [0.25, 0.5, 0.75, 1.0]
TIE = 0.005                 # layouts within 0.5% of the best are ties, settled by simplicity


@dataclass
class Plan:
    """The layout used: every layout key, who chose it, and the next best."""

    chosen: dict[str, Any]
    by: dict[str, str]
    runner_up: dict[str, Any] | None = None
    candidates: int = 0
    feasible: int = 0
    fits: bool = True              # the chosen layout fits in memory (and meets serving targets)
    free: dict[str, Any] | None = None   # when the intake's layout cannot fit: the planner's own choice
    derived: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {"chosen": dict(self.chosen), "by": dict(self.by), "runner_up": self.runner_up,
               "candidates": self.candidates, "feasible": self.feasible, "fits": self.fits}
        if self.free is not None:
            out["would_fit"] = dict(self.free)
        if self.derived:
            out["derived"] = dict(self.derived)
        return out


def planned(intake, ruleset):
    """(Results, Plan): the intake evaluated with the layout the planner chose for its blanks."""
    values = input_values(intake)
    plan = plan_layout(values, ruleset)
    return evaluate(values, ruleset, layout=plan.chosen), plan


def plan_layout(values: dict, ruleset) -> Plan:
    """Choose every layout field the intake left blank; honour the ones it gave."""
    workload = values.get("workload")
    given = given_layout(values, workload)
    shape = evaluate(values, ruleset, only=SHAPE).values
    plan = _best(values, ruleset, shape, given, workload)
    if not plan.fits and given:
        free = _best(values, ruleset, shape, {}, workload)
        if free.fits:
            plan.free = free.chosen
    return plan


def _best(values: dict, ruleset, shape: dict, given: dict, workload: str) -> Plan:
    training = workload in TRAINING
    columns = layout_candidates(values, shape, given, workload)
    count = len(next(iter(columns.values())))
    frame = evaluate_columns(values, ruleset, columns, count, only=plan_outputs(workload))
    order, feasible = rank_layouts(frame, columns, workload, values)
    best = order[0]
    chosen = chosen_layout(frame, columns, best, workload, given)
    runner = next((i for i in order[1:] if any(columns[k][i] != columns[k][best] for k in columns)), None)
    plan = Plan(chosen=chosen, by={k: "intake" if k in given else "planner" for k in chosen},
                runner_up={k: _plain(columns[k][runner]) for k in columns} if runner is not None else None,
                candidates=count, feasible=int(feasible.sum()), fits=bool(feasible[best]))
    if training:
        plan.derived = _training_derived(values, chosen, shape)
    return plan


def layout_candidates(values: dict, shape: dict, given: dict, workload: str) -> dict[str, np.ndarray]:
    """Every layout the planner weighs for this hardware, one array per layout key."""
    if workload in TRAINING:
        return _training_candidates(values, shape, given)
    return _serving_candidates(values, shape, given, workload)


def plan_outputs(workload: str) -> tuple[str, ...]:
    """The results the candidates are judged by."""
    return TRAINING_OUTPUTS if workload in TRAINING else SERVING_OUTPUTS


def rank_layouts(frame, columns: dict, workload: str, values: dict) -> tuple[list[int], np.ndarray]:
    """Candidate indexes best first, and which of them are feasible."""
    if workload in TRAINING:
        return _rank_training(frame, columns)
    return _rank_serving(frame, columns, workload, values)


def chosen_layout(frame, columns: dict, best: int, workload: str, given: dict) -> dict[str, Any]:
    """Candidate `best` as layout keys and values (offline serving adds the batch it runs at)."""
    chosen = {k: _plain(columns[k][best]) for k in columns}
    if chosen.get("recompute_share") in (0, 1):     # none or every layer: what activation_checkpointing says
        del chosen["recompute_share"]
    if workload not in TRAINING and (workload != ONLINE or "concurrency" in given):
        chosen["concurrency"] = _plain(frame["concurrency_used"][best])
    return chosen


def given_layout(values: dict, workload: str) -> dict[str, Any]:
    """The layout fields the intake fixed."""
    keys = TRAINING_LAYOUT if workload in TRAINING else INFERENCE_LAYOUT
    return {k: values[k] for k in keys if _given(values.get(k))}


# ----------------------------------------------------------------- training

def _training_candidates(values: dict, shape: dict, given: dict) -> dict[str, np.ndarray]:
    gpus = _count(values.get("gpu_count"))
    layers, heads, kv = (_count(shape.get(k)) for k in ("n_layers", "n_heads", "n_kv_heads"))
    per_node = _count(shape.get("gpus_per_node_used")) or 8
    seq = _count(shape.get("seq")) or 4096
    experts = _count(shape.get("moe_total_experts")) if shape.get("is_moe") else 1
    batch = _count(values.get("global_batch_size"))
    options = {
        # TP stays inside one server and must divide the attention heads and KV groups
        "tensor_parallel": [t for t in _pow2(min(per_node, gpus))
                            if not heads or (heads % t == 0 and (not kv or kv % t == 0))],
        # PP splits the layers evenly (or in powers of two, Megatron's uneven split)
        "pipeline_parallel": sorted({p for p in range(1, min(gpus, layers or 1, 64) + 1)
                                     if layers and layers % p == 0} | set(_pow2(min(gpus, 64, max(layers // 2, 1))))),
        # CP only for long sequences, keeping at least 2,048 tokens per GPU
        "context_parallel": [c for c in _pow2(16) if c == 1 or (seq >= 16384 and seq // c >= 2048)],
        "expert_parallel": [e for e in _pow2(min(experts, 256)) if experts % e == 0] if experts > 1 else [1],
        "zero_stage": [1, 2, 3],
        "micro_batch_size": [1, 2, 4, 8],
        "activation_checkpointing": [False, True],
        "virtual_pipeline_stages": [1, 2, 3, 4, 6, 8],
    }
    for key, value in given.items():
        options[key] = [value]
    options["recompute_share"] = [1.0] if "activation_checkpointing" in given else RECOMPUTE_SHARES
    rows = _training_rows(options, gpus, layers, batch)
    if not rows and batch:   # no layout divides the global batch: a team rounds the batch to one that does
        rows = _training_rows(options, gpus, layers, 0)
    if not rows:   # nothing divides evenly: fall back to the plainest layout the intake allows
        rows = [tuple(options[k][0] for k in ("tensor_parallel", "pipeline_parallel", "context_parallel",
                                                "expert_parallel", "micro_batch_size",
                                                "virtual_pipeline_stages", "zero_stage",
                                                "activation_checkpointing"))
                + (float(options["activation_checkpointing"][0]),)]
    names = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
             "micro_batch_size", "virtual_pipeline_stages", "zero_stage", "activation_checkpointing", "recompute_share")
    table = list(zip(*rows))
    columns = {name: np.asarray(col, dtype=bool if name == "activation_checkpointing" else float)
               for name, col in zip(names, table)}
    if experts <= 1 and "expert_parallel" not in given:
        del columns["expert_parallel"]
    return columns


def _training_rows(options: dict, gpus: int, layers: int, batch: int) -> list[tuple]:
    """Every combination of the options that divides the GPUs (and the global batch, when given)."""
    rows = []
    for tp in options["tensor_parallel"]:
        for pp in options["pipeline_parallel"]:
            for cp in options["context_parallel"]:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                for ep in options["expert_parallel"]:
                    if (dp * cp) % ep:
                        continue
                    for mbs in options["micro_batch_size"]:
                        if batch and (batch % (dp * mbs) or batch < dp * mbs):
                            continue
                        for vpp in (options["virtual_pipeline_stages"] if pp > 1 else [1]):
                            if vpp > 1 and layers and layers < pp * vpp:
                                continue          # at least one layer per model chunk (uneven splits allowed)
                            for zero in options["zero_stage"]:
                                for recompute in options["activation_checkpointing"]:
                                    for share in (options["recompute_share"] if recompute else [0.0]):
                                        rows.append((tp, pp, cp, ep, mbs, vpp, zero, recompute, share))
    return rows


def _rank_training(frame, columns) -> tuple[list[int], np.ndarray]:
    """Fastest layout that fits with memory to spare (rules/capacity.yaml, memory_limit_gb), else the
    fastest that fits; ties go to the simpler layout. Nothing fits: the leanest."""
    fits = np.asarray(frame["fits_in_memory"], dtype=bool)
    if "memory_limit_gb" in frame:
        roomy = fits & (np.asarray(frame["memory_per_gpu_gb"], dtype=float)
                        <= np.asarray(frame["memory_limit_gb"], dtype=float))
        if roomy.any():
            lean = {k: v for k, v in frame.items() if k != "memory_limit_gb"}
            order, _ = _rank_training({**lean, "fits_in_memory": roomy}, columns)
            return order, fits
    time = np.asarray(frame["step_time_s"], dtype=float)
    time = np.where(np.isfinite(time), time, np.inf)
    complexity = (np.log2(columns["tensor_parallel"]) + np.log2(columns["pipeline_parallel"])
                  + np.log2(columns.get("context_parallel", 1)) + 0.5 * np.log2(columns.get("expert_parallel", 1))
                  + 0.5 * np.log2(columns["virtual_pipeline_stages"]) + 0.3 * columns["zero_stage"]
                  + 2 * columns["activation_checkpointing"] + 0.1 * np.log2(columns["micro_batch_size"]))
    if fits.any():
        best = time[fits].min()
        rounded = np.floor(time / (best * TIE))      # buckets of 0.5% of the best time
        keys = (complexity, rounded, ~fits)          # np.lexsort: last key first
    else:
        keys = (complexity, np.asarray(frame["memory_per_gpu_gb"], dtype=float), ~fits)
    return list(np.lexsort(keys)), fits


def _training_derived(values: dict, chosen: dict, shape: dict) -> dict:
    gpus = _count(values.get("gpu_count"))
    split = chosen["tensor_parallel"] * chosen["pipeline_parallel"] * chosen.get("context_parallel", 1)
    return {"data_parallel": int(gpus // split) if split else None}


# ----------------------------------------------------------------- serving

def _serving_candidates(values: dict, shape: dict, given: dict, workload: str) -> dict[str, np.ndarray]:
    gpus = _count(values.get("gpu_count"))
    heads = _count(shape.get("n_heads"))
    per_node = _count(shape.get("gpus_per_node_used")) or 8
    tps = [t for t in _pow2(min(per_node, gpus)) if gpus % t == 0 and (not heads or heads % t == 0)]
    tps = [given["tensor_parallel"]] if "tensor_parallel" in given else tps or [1]
    if workload == ONLINE and "concurrency" not in given:
        batches = _batches(MAX_BATCH)
        rows = [(tp, b * max(gpus // tp, 1)) for tp in tps for b in batches]
        return {"tensor_parallel": np.asarray([r[0] for r in rows], dtype=float),
                "concurrency": np.asarray([r[1] for r in rows], dtype=float)}
    return {"tensor_parallel": np.asarray(tps, dtype=float)}


def _rank_serving(frame, columns, workload: str, values: dict) -> tuple[list[int], np.ndarray]:
    """Offline: most output tokens/s. Online: the most requests in flight that meet the targets."""
    fits = np.asarray(frame["fits_in_memory"], dtype=bool)
    tokens = np.nan_to_num(np.asarray(frame["output_tokens_per_s"], dtype=float), nan=0.0)
    tp = columns["tensor_parallel"]
    if workload == ONLINE and "concurrency" in columns:
        meets = np.asarray(frame["meets_latency_targets"], dtype=bool) if "meets_latency_targets" in frame \
            else np.ones(len(fits), dtype=bool)
        in_memory = columns["concurrency"] <= np.asarray(frame["memory_concurrency"], dtype=float)
        # the serving software never runs more than its batch cap per replica (vLLM's max_num_seqs,
        # TGI's max-concurrent-requests; serving.yaml): requests past it queue, they do not batch
        cap = np.nan_to_num(np.asarray(frame["stack_max_batch"], dtype=float), nan=np.inf) \
            if "stack_max_batch" in frame else np.inf
        replicas = np.maximum(np.nan_to_num(np.asarray(frame["dp"], dtype=float), nan=1.0), 1.0) \
            if "dp" in frame else 1.0
        in_cap = columns["concurrency"] <= cap * replicas
        ok = fits & meets & in_memory & in_cap
        rate = positive(values.get("requests_per_second"))
        if rate:
            # Little's law: at a given arrival rate the requests in flight are what the rate fills;
            # the operating point is the smallest batch whose throughput carries the load
            carries = tokens >= rate * positive(values.get("output_tokens"))
            if (ok & carries).any():
                keys = (tp, columns["concurrency"], ~(ok & carries))
                return list(np.lexsort(keys)), ok & carries
        keys = (tp, -tokens, -columns["concurrency"], ~ok)
        if not ok.any():       # nothing meets the targets: the fastest single request
            ttft = np.nan_to_num(np.asarray(frame["ttft_ms"], dtype=float), nan=np.inf)
            keys = (tp, columns["concurrency"], ttft, ~fits)
        return list(np.lexsort(keys)), ok
    # prefer fewer GPUs per replica among layouts within 0.5% of the best throughput
    best = tokens[fits].max() if fits.any() else tokens.max()
    rounded = -np.floor(tokens / max(best * TIE, 1e-9))
    keys = (tp, rounded, ~fits)
    return list(np.lexsort(keys)), fits


def model_copies(layout: dict, gpu_count: Any) -> int:
    """GPUs ÷ (tensor × pipeline × context parallel) — data-parallel replicas in training, serving
    replicas in inference — or 0 where that product does not divide the GPUs."""
    def whole(value) -> int:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return int(value) if ok else 0
    split = 1
    for key in ("tensor_parallel", "pipeline_parallel", "context_parallel"):
        split *= whole(layout.get(key)) or 1
    count = whole(gpu_count)
    return count // split if count >= split and count % split == 0 else 0


# ----------------------------------------------------------------- helpers

def _pow2(top: float) -> list[int]:
    out, n = [], 1
    while n <= max(top, 1):
        out.append(n)
        n *= 2
    return out


def _batches(top: int) -> list[int]:
    """1, 2, … 8, then about 20% apart up to `top`: fine enough to find a batch a target allows."""
    out, b = list(range(1, 9)), 8.0
    while b < top:
        b *= 1.2
        out.append(int(round(b)))
    return sorted(set(out))


def _count(value) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) and number > 0 else 0


def _given(value) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return not (isinstance(value, str) and not value.strip())


def _plain(value):
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
