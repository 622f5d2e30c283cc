"""The planner: the layout a competent team would run on the hardware asked for, chosen in one array pass."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from engine.calc.evaluate import evaluate, evaluate_columns, evaluate_families, input_values
from engine.calc.targets import positive
from engine.contract import INFERENCE_LAYOUT, TRAINING_LAYOUT, TRAINING_WORKLOADS as TRAINING

ONLINE = "online-inference"
# What the candidates are judged by; the rule set computes them.
TRAINING_OUTPUTS = ("step_time_s", "fits_in_memory", "memory_per_gpu_gb", "memory_limit_gb")
SERVING_OUTPUTS = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "fits_in_memory", "memory_per_gpu_gb",
                   "concurrency_used", "memory_concurrency", "meets_latency_targets", "replica_max_batch", "dp")
SHAPE = ("n_layers", "n_heads", "n_kv_heads", "gpus_per_node_used", "moe_total_experts", "is_moe", "seq",
         "pp", "stack_layer_split", "node_pipeline_needed")
MAX_BATCH = 4096            # the largest serving batch the planner tries (per replica counts below it)
# Recomputing only as many layers as memory needs (Megatron-LM --recompute-method block
# --recompute-num-layers, NeMo activations_checkpoint_num_layers): the planner's recompute is full
# only when a smaller share does not fit; an intake's own activation_checkpointing is every layer.
RECOMPUTE_SHARES = [0.25, 0.5, 0.75, 1.0]
# Every share is still weighed, not only the smallest that fits: a larger share is not always slower
# (under ZeRO-3 with the data-parallel traffic all exposed the step time is flat in the share and
# rounding decides — 73 of bench_sweep's 860,000 layouts step faster at a larger share; with context
# parallelism a longer attention also hides more ring traffic, scaling.yaml cp_exposed_s), and the
# runner-up the quote shows is often the chosen layout at the next share. What is saved instead is
# the work: a layout's shares are evaluated together (evaluate_families), the share-free rules once.
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
    families = layout_families(values, shape, given, workload)
    frame = evaluate_layouts(values, ruleset, families, only=plan_outputs(workload))
    columns = candidate_columns(frame, families)
    count = len(next(iter(columns.values())))
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


def layout_families(values: dict, shape: dict, given: dict, workload: str
                    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """layout_candidates as (layouts, inner, family): the candidates are the layouts repeated by
    `family`, beside the `inner` columns that vary within one layout (training: the recompute share)."""
    if workload in TRAINING:
        layouts, shares, family = _training_families(values, shape, given)
        return layouts, {"recompute_share": shares}, family
    layouts = _serving_candidates(values, shape, given, workload)
    return layouts, {}, np.arange(len(next(iter(layouts.values()))))


def evaluate_layouts(values: dict, ruleset, families: tuple, *, only: Iterable[str]) -> dict[str, np.ndarray]:
    """The results `only` of every candidate of `families`, with the candidates' layout columns.
    Most rules do not read the recompute share, so they are computed once per layout, not once
    per share (evaluate_families): the same figures as evaluating every candidate in full."""
    layouts, inner, family = families
    if not inner:
        return evaluate_columns(values, ruleset, layouts, len(family), only=only)
    return evaluate_families(values, ruleset, layouts, len(next(iter(layouts.values()))), inner, family, only=only)


def candidate_columns(frame: dict, families: tuple) -> dict[str, np.ndarray]:
    """The candidates' layout columns (as layout_candidates gives them) from evaluate_layouts' frame."""
    layouts, inner, _ = families
    return {k: frame[k] for k in (*layouts, *inner)}


def plan_outputs(workload: str) -> tuple[str, ...]:
    """The results the candidates are judged by."""
    return TRAINING_OUTPUTS if workload in TRAINING else SERVING_OUTPUTS


def rank_layouts(frame, columns: dict, workload: str, values: dict) -> tuple[list[int], np.ndarray]:
    """Candidate indexes best first, and which of them are feasible."""
    keys, feasible = _rank_keys(frame, columns, workload, values)
    return list(np.lexsort(keys)), feasible


def best_layout(frame, columns: dict, workload: str, values: dict) -> int:
    """rank_layouts' first candidate, found without sorting them all (the sweep keeps only the best)."""
    keys, _ = _rank_keys(frame, columns, workload, values)
    return first_lexsorted(keys)


def first_lexsorted(keys: tuple) -> int:
    """np.lexsort(keys)[0] in linear time: narrow the candidates to the least value of the last key,
    then of the one before, …; the earliest index settles what is left. Sorting puts NaN after
    every number and treats NaNs as equal, so NaN counts as least only where all are NaN."""
    index = np.arange(len(keys[0]))
    for key in reversed(keys):
        values = np.asarray(key)[index]
        if values.dtype.kind == "f":
            numbers = ~np.isnan(values)
            if not numbers.any():
                continue
            index, values = index[numbers], values[numbers]
        index = index[values == values.min()]
        if len(index) == 1:
            break
    return int(index[0])


def _rank_keys(frame, columns: dict, workload: str, values: dict) -> tuple[tuple, np.ndarray]:
    """The np.lexsort keys that order the candidates (last key first), and which are feasible."""
    if workload in TRAINING:
        return _training_keys(frame, columns)
    return _serving_keys(frame, columns, workload, values)


def chosen_layout(frame, columns: dict, best: int, workload: str, given: dict) -> dict[str, Any]:
    """Candidate `best` as layout keys and values (offline serving adds the batch it runs at)."""
    chosen = {k: _plain(columns[k][best]) for k in columns}
    if chosen.get("recompute_share") in (0, 1):     # none or every layer: what activation_checkpointing says
        del chosen["recompute_share"]
    if workload not in TRAINING and chosen.get("pipeline_parallel") == 1:   # serving's default: one stage
        del chosen["pipeline_parallel"]
    if workload not in TRAINING and (workload != ONLINE or "concurrency" in given):
        chosen["concurrency"] = _plain(frame["concurrency_used"][best])
    return chosen


def given_layout(values: dict, workload: str) -> dict[str, Any]:
    """The layout fields the intake fixed."""
    keys = TRAINING_LAYOUT if workload in TRAINING else INFERENCE_LAYOUT
    return {k: values[k] for k in keys if _given(values.get(k))}


# ----------------------------------------------------------------- training

LAYOUT_KEYS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
               "micro_batch_size", "virtual_pipeline_stages", "zero_stage", "activation_checkpointing")


def _training_candidates(values: dict, shape: dict, given: dict) -> dict[str, np.ndarray]:
    columns, shares, family = _training_families(values, shape, given)
    return {**{k: v[family] for k, v in columns.items()}, "recompute_share": shares}


def _training_families(values: dict, shape: dict, given: dict) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(layouts, shares, family): every layout the planner weighs (one row each, no recompute share),
    then the candidates: each layout that recomputes once per recompute share, `family` naming its layout."""
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
    shares = [1.0] if "activation_checkpointing" in given else RECOMPUTE_SHARES
    layouts = _training_layouts(options, gpus, layers, batch)
    if not len(layouts["tensor_parallel"]) and batch:
        # no layout divides the global batch: a team rounds the batch to one that does
        layouts = _training_layouts(options, gpus, layers, 0)
    if not len(layouts["tensor_parallel"]):
        # nothing divides evenly: the plainest layout the intake allows, recomputing all layers or none
        layouts = {k: np.asarray(options[k][:1], dtype=bool if k == "activation_checkpointing" else float)
                   for k in LAYOUT_KEYS}
        shares = [float(options["activation_checkpointing"][0])]
    if experts <= 1 and "expert_parallel" not in given:
        del layouts["expert_parallel"]
    # a layout without recomputation is one candidate (share 0); one with it, one per share
    recompute = layouts["activation_checkpointing"]
    family = np.repeat(np.arange(len(recompute)), np.where(recompute, len(shares), 1))
    within = np.arange(len(family)) - np.searchsorted(family, family)        # 0, 1, … within each layout
    share = np.where(recompute[family], np.asarray(shares, dtype=float)[np.minimum(within, len(shares) - 1)], 0.0)
    return layouts, share, family


def _training_layouts(options: dict, gpus: int, layers: int, batch: int) -> dict[str, np.ndarray]:
    """Every combination of the options that divides the GPUs (and the global batch, when given),
    one array per layout key, in the order of nested loops over LAYOUT_KEYS (the last fastest)."""
    sizes = [len(options[k]) for k in LAYOUT_KEYS]
    index = np.indices(sizes).reshape(len(sizes), -1)
    pick = {k: np.asarray(options[k], dtype=bool if k == "activation_checkpointing" else float)[i]
            for k, i in zip(LAYOUT_KEYS, index)}
    tp, pp, cp, ep = (pick[k] for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel"))
    mbs, vpp = pick["micro_batch_size"], pick["virtual_pipeline_stages"]
    with np.errstate(all="ignore"):
        split = tp * pp * cp
        keep = gpus % split == 0
        dp = gpus // split
        keep &= (dp * cp) % ep == 0
        if batch:
            keep &= (batch % (dp * mbs) == 0) & (batch >= dp * mbs)
    # one pipeline stage has no virtual stages: it takes the first option only, as 1
    staged = pp > 1
    keep &= staged | (index[LAYOUT_KEYS.index("virtual_pipeline_stages")] == 0)
    pick["virtual_pipeline_stages"] = vpp = np.where(staged, vpp, 1.0)
    if layers:
        keep &= ~((vpp > 1) & (layers < pp * vpp))     # at least one layer per model chunk (uneven splits allowed)
    return {k: v[keep] for k, v in pick.items()}


def _training_keys(frame, columns) -> tuple[tuple, np.ndarray]:
    """Fastest layout that fits with memory to spare (rules/capacity.yaml, memory_limit_gb), else the
    fastest that fits; ties go to the simpler layout. Nothing fits: the leanest."""
    fits = np.asarray(frame["fits_in_memory"], dtype=bool)
    if "memory_limit_gb" in frame:
        roomy = fits & (np.asarray(frame["memory_per_gpu_gb"], dtype=float)
                        <= np.asarray(frame["memory_limit_gb"], dtype=float))
        if roomy.any():
            lean = {k: v for k, v in frame.items() if k != "memory_limit_gb"}
            keys, _ = _training_keys({**lean, "fits_in_memory": roomy}, columns)
            return keys, fits
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
    return keys, fits


def _training_derived(values: dict, chosen: dict, shape: dict) -> dict:
    gpus = _count(values.get("gpu_count"))
    split = chosen["tensor_parallel"] * chosen["pipeline_parallel"] * chosen.get("context_parallel", 1)
    return {"data_parallel": int(gpus // split) if split else None}


# ----------------------------------------------------------------- serving

def _serving_candidates(values: dict, shape: dict, given: dict, workload: str) -> dict[str, np.ndarray]:
    gpus = _count(values.get("gpu_count"))
    heads = _count(shape.get("n_heads"))
    per_node = _count(shape.get("gpus_per_node_used")) or 8
    stages = _count(shape.get("pp")) or 1      # a pipeline's stages each take their own GPUs
    splits = [(tp, pp) for pp in _serving_stages(shape, given, gpus, per_node, stages)
              for tp in _serving_tps(shape, given, per_node, max(gpus // pp, 1), heads)
              if pp == stages or tp * pp <= gpus]      # the planner's own stages fit the GPUs; the intake's are kept
    if workload == ONLINE and "concurrency" not in given:
        rows = [(tp, pp, b * max(gpus // (tp * pp), 1)) for tp, pp in splits for b in _batches(MAX_BATCH)]
    else:
        rows = [(tp, pp, None) for tp, pp in splits]
    columns = {"tensor_parallel": np.asarray([r[0] for r in rows], dtype=float)}
    if rows[0][2] is not None:
        columns["concurrency"] = np.asarray([r[2] for r in rows], dtype=float)
    if any(r[1] > 1 for r in rows):     # the stages the intake gave, the software's layer split, or a model
        columns["pipeline_parallel"] = np.asarray([r[1] for r in rows], dtype=float)  # too big for one node
    return columns


def _serving_tps(shape: dict, given: dict, per_node: int, per_stage: int, heads: int) -> list[int]:
    """Tensor-parallel widths within one node and one stage's GPUs that divide the heads; software that
    splits a model by layers across GPUs (serving.yaml, stack_layer_split) does not also split each layer."""
    if "tensor_parallel" in given:
        return [given["tensor_parallel"]]
    if shape.get("stack_layer_split"):
        return [1]
    return [t for t in _pow2(min(per_node, per_stage)) if per_stage % t == 0 and (not heads or heads % t == 0)] or [1]


def _serving_stages(shape: dict, given: dict, gpus: int, per_node: int, stages: int) -> list[int]:
    """The pipeline stages weighed: the intake's or the software's layer split; otherwise one, and, when
    the weights outgrow one node's GPUs (scaling.yaml, node_pipeline_needed), one stage per node (vLLM
    --pipeline-parallel-size, SGLang --pp-size): tensor parallelism stays inside a node's links."""
    if stages > 1 or {"pipeline_parallel", "tensor_parallel"} & set(given) or not shape.get("node_pipeline_needed"):
        return [stages]
    return [1] + [p for p in _pow2(gpus // per_node) if p > 1]


def _serving_keys(frame, columns, workload: str, values: dict) -> tuple[tuple, np.ndarray]:
    """Offline: most output tokens/s. Online: the most requests in flight that meet the targets."""
    fits = np.asarray(frame["fits_in_memory"], dtype=bool)
    tokens = np.nan_to_num(np.asarray(frame["output_tokens_per_s"], dtype=float), nan=0.0)
    tp = columns["tensor_parallel"]
    if workload == ONLINE and "concurrency" in columns:
        meets = np.asarray(frame["meets_latency_targets"], dtype=bool) if "meets_latency_targets" in frame \
            else np.ones(len(fits), dtype=bool)
        in_memory = columns["concurrency"] <= np.asarray(frame["memory_concurrency"], dtype=float)
        # the serving software never runs more than its batch cap per replica (vLLM's max_num_seqs,
        # TGI's max-concurrent-requests, per attention rank with attention data parallelism;
        # inference.yaml, replica_max_batch): requests past it queue, they do not batch
        cap = np.nan_to_num(np.asarray(frame["replica_max_batch"], dtype=float), nan=np.inf) \
            if "replica_max_batch" in frame else np.inf
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
                return keys, ok & carries
        keys = (tp, -tokens, -columns["concurrency"], ~ok)
        if not ok.any():       # nothing meets the targets: the fastest single request
            ttft = np.nan_to_num(np.asarray(frame["ttft_ms"], dtype=float), nan=np.inf)
            keys = (tp, columns["concurrency"], ttft, ~fits)
        return keys, ok
    # prefer fewer GPUs per replica among layouts within 0.5% of the best throughput
    best = tokens[fits].max() if fits.any() else tokens.max()
    rounded = -np.floor(tokens / max(best * TIE, 1e-9))
    keys = (tp, rounded, ~fits)
    return keys, fits


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
