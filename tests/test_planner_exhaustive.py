"""The planner's and the sweep's shortcuts against the exhaustive answer: every candidate layout,
every recompute share, evaluated through the whole rule set and sorted.

The planner evaluates a layout's shares together (rules that do not read the share once per layout),
and the sweep keeps only the best layout per GPU count, then computes its other figures. Neither may
change an answer: the chosen layout, its recompute share, the runner-up, the counts of candidates and
of feasible ones, and every figure must be what evaluating and sorting all of them gives.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.calc.evaluate import evaluate, evaluate_columns, evaluate_families
from engine.calc.planner import (SHAPE, TRAINING, chosen_layout, first_lexsorted, given_layout, layout_candidates,
                                 layout_families, plan_layout, plan_outputs, rank_layouts)
from engine.calc.sweep import FIGURES, planned_rows
from engine.intake.model import Intake
from engine.job import validate_intake

H100, A100, L40S, RTX4090 = "nvidia-h100-sxm5-80gb", "nvidia-a100-sxm4-80gb", "nvidia-l40s", "nvidia-rtx-4090"
BASE = {"customer": "Test Co.", "workload": "pretraining", "model": "llama-2-70b", "precision": "bf16",
        "training_tokens_billion": 2000, "gpu": H100, "gpu_count": 64}
INTAKES = {
    # 70B on 16 GPUs: memory is tight, so the planner recomputes part of the layers
    "tight-70b": {**BASE, "gpu_count": 16},
    # NeMo's Llama 2 70B SFT (docs/accuracy.md T39) and the ZeRO paper's 7.5B model on 64 V100s
    # (M07c), DeepSpeed ZeRO-2, and Llama 3 70B under FSDP (T112): the planner recomputes ¾, ½, ¾ of the layers
    "sft-70b-fp8": {**BASE, "workload": "fine-tuning", "precision": "fp8", "gpu_count": 16, "seq_len": 4096,
                    "global_batch_size": 32, "micro_batch_size": 1, "tensor_parallel": 4, "pipeline_parallel": 4},
    "zero2-7.5b": {**BASE, "model": "custom", "params_billion": 7.5, "layers": 32, "hidden_size": 4096,
                   "attention_heads": 32, "precision": "fp16", "gpu": "nvidia-v100-sxm2-32gb", "zero_stage": 2,
                   "tensor_parallel": 1, "pipeline_parallel": 1},
    "fsdp-70b": {**BASE, "model": "llama-3.1-70b", "seq_len": 8192, "gpu_count": 512, "zero_stage": 3,
                 "tensor_parallel": 1, "pipeline_parallel": 1},
    # long sequences bring context parallelism; ZeRO-3 exposes the data-parallel traffic, where a larger
    # recompute share hides more of it (step time is not always rising with the share)
    "long-zero3": {**BASE, "model": "llama-3.1-8b", "seq_len": 32768, "zero_stage": 3, "gpu_count": 64},
    "long-70b": {**BASE, "seq_len": 65536, "gpu_count": 128, "gpu": A100},
    "moe": {**BASE, "model": "mixtral-8x7b", "gpu_count": 32},
    "given-recompute": {**BASE, "activation_checkpointing": True, "gpu_count": 32},
    "given-pipeline": {**BASE, "pipeline_parallel": 4, "gpu_count": 32, "global_batch_size": 512},
    "nothing-fits": {**BASE, "gpu": RTX4090, "gpu_count": 2},
    "small-l40s": {**BASE, "model": "llama-2-7b", "gpu": L40S, "gpu_count": 8},
}


@pytest.fixture(scope="module")
def intakes(ruleset) -> dict[str, dict]:
    """INTAKES as a quote sees them: validated, with the form's defaults (flash attention, optimizer, …)."""
    out = {}
    for name, values in INTAKES.items():
        intake = Intake(values=dict(values), sources={k: name for k in values}, kind="yaml")
        assert not validate_intake(intake, ruleset)
        out[name] = intake.values
    return out


def _exhaustive(values: dict, ruleset, only) -> tuple[dict, dict, list[int], np.ndarray]:
    """Every candidate (each recompute share its own row) evaluated in full and sorted."""
    workload = values["workload"]
    shape = evaluate(values, ruleset, only=SHAPE).values
    given = given_layout(values, workload)
    keys = ["tensor_parallel", "pipeline_parallel", "context_parallel"] \
        + (["expert_parallel"] if shape.get("is_moe") or "expert_parallel" in given else []) \
        + ["micro_batch_size", "virtual_pipeline_stages", "zero_stage", "activation_checkpointing", "recompute_share"]
    rows = _loops(values, shape, given, keys)     # the candidates written out as loops, not the planner's arrays
    columns = {k: np.asarray(col, dtype=bool if k == "activation_checkpointing" else float)
               for k, col in zip(keys, zip(*rows))}
    count = len(rows)
    frame = evaluate_columns(values, ruleset, columns, count, only=only)
    order, feasible = rank_layouts(frame, columns, workload, values)
    return frame, columns, order, feasible


@pytest.mark.parametrize("name", INTAKES)
def test_the_planner_chooses_what_weighing_every_candidate_in_full_chooses(ruleset, intakes, name):
    values = intakes[name]
    frame, columns, order, feasible = _exhaustive(values, ruleset, plan_outputs(values["workload"]))
    best = order[0]
    runner = next((i for i in order[1:] if any(columns[k][i] != columns[k][best] for k in columns)), None)
    plan = plan_layout(values, ruleset).to_json()
    assert plan["chosen"] == chosen_layout(frame, columns, best, values["workload"],
                                           given_layout(values, values["workload"]))
    assert plan["runner_up"] == ({k: columns[k][runner].item() for k in columns} if runner is not None else None)
    assert list(plan["runner_up"]) == list(columns)          # the same keys in the same order (the quote's JSON)
    assert (plan["candidates"], plan["feasible"], plan["fits"]) == (len(order), feasible.sum(), feasible[best])


def test_the_cases_above_exercise_partial_recomputation(ruleset, intakes):
    # if no intake above chose a share between none and all, the comparison would not test the shares;
    # one whose runner-up is the same layout at another share tests that the shares are all still weighed
    plans = [plan_layout(v, ruleset) for v in intakes.values()]
    assert sum(p.chosen.get("recompute_share") not in (None, 0, 1) for p in plans) >= 2
    assert any(p.runner_up and p.chosen.get("recompute_share") not in (None, 0, 1)
               and {k: v for k, v in p.runner_up.items() if k != "recompute_share"}
               == {k: v for k, v in p.chosen.items() if k != "recompute_share"} for p in plans)


@pytest.mark.parametrize("name", ["fsdp-70b", "tight-70b"])
def test_the_sweep_keeps_what_weighing_every_candidate_in_full_keeps(ruleset, intakes, name):
    values = intakes[name]
    grid = {"gpu": [H100, A100, RTX4090], "gpu_count": [8, 16, 64], "precision": ["bf16", "fp8"]}
    wanted = tuple(o for o in dict.fromkeys(plan_outputs("pretraining") + FIGURES) if o in ruleset.rules)
    rows, scenarios, left_out = planned_rows(values, ruleset, grid)
    seen = 0
    for row in rows:
        one = {**values, "price_gpu": values["gpu"], "gpu": row["gpu"], "gpu_count": row["gpu_count"],
               "precision": row["precision"]}       # as the sweep prices it (alternatives.priced_for)
        frame, columns, order, _ = _exhaustive(one, ruleset, wanted)
        seen += len(order)
        assert row["layout_values"] == chosen_layout(frame, columns, order[0], "pretraining", {})
        # what the sweep shows people: a yes/no figure of another workload (a pretraining row's latency verdict)
        # blank where the rules read False
        kept = {k: v[order[0]:order[0] + 1] for k, v in columns.items()}
        shown = evaluate_columns(one, ruleset, kept, 1, only=wanted, unknown_where_not_applied=True)
        for key in wanted:      # bit for bit: the figures of the kept layout are computed apart
            if shown[key][0] is None:
                assert row[key] is None and not frame[key][order[0]], key
                continue
            assert _same(np.asarray(row[key]), np.asarray(frame[key][order[0]])), key
    assert scenarios == seen and len(rows) == 3 * 3 * 2 - 3 * len(left_out)


@pytest.mark.parametrize("name", ["zero2-7.5b", "long-zero3", "moe", "nothing-fits"])
def test_a_layouts_shares_evaluated_together_give_the_same_figures_bit_for_bit(ruleset, intakes, name):
    values = intakes[name]
    workload = values["workload"]
    shape = evaluate(values, ruleset, only=SHAPE).values
    given = given_layout(values, workload)
    layouts, inner, family = layout_families(values, shape, given, workload)
    assert inner and len(family) > len(next(iter(layouts.values())))     # shares do share a layout
    wanted = [n for n in ruleset.rules if not n.startswith("warning")]
    together = evaluate_families(values, ruleset, layouts, len(next(iter(layouts.values()))), inner, family,
                                 only=wanted)
    columns = layout_candidates(values, shape, given, workload)
    apart = evaluate_columns(values, ruleset, columns, len(family), only=wanted)
    assert set(together) == set(apart)
    for key in apart:
        a, b = np.asarray(apart[key]), np.asarray(together[key])
        assert a.dtype == b.dtype and _same(a, b), key


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f" and b.dtype.kind == "f")


def test_the_training_candidates_are_the_nested_loops_over_the_options(ruleset, intakes):
    # the candidates are built as arrays; here the loops they replace, written out, for a few intakes
    for values in (intakes["tight-70b"], intakes["given-pipeline"], intakes["long-70b"], intakes["moe"],
                   {**BASE, "gpu_count": 96, "global_batch_size": 1000}, {**BASE, "gpu_count": 7}):
        shape = evaluate(values, ruleset, only=SHAPE).values
        given = given_layout(values, values["workload"])
        columns = layout_candidates(values, shape, given, values["workload"])
        got = list(zip(*(columns[k].tolist() for k in columns)))
        assert got == _loops(values, shape, given, list(columns))


def _loops(values: dict, shape: dict, given: dict, keys: list[str]) -> list[tuple]:
    gpus, layers, heads, kv = (int(values["gpu_count"]), int(shape["n_layers"]), int(shape["n_heads"]),
                               int(shape["n_kv_heads"]))
    experts = int(shape["moe_total_experts"]) if shape.get("is_moe") else 1
    seq, batch = int(shape["seq"]), int(values.get("global_batch_size") or 0)
    pow2 = lambda top: [2 ** i for i in range(20) if 2 ** i <= max(top, 1)]   # noqa: E731
    per_node = int(shape.get("gpus_per_node_used") or 8)
    options = {"tensor_parallel": [t for t in pow2(min(per_node, gpus)) if heads % t == 0 and kv % t == 0],
               "pipeline_parallel": sorted({p for p in range(1, min(gpus, layers, 64) + 1) if layers % p == 0}
                                           | set(pow2(min(gpus, 64, max(layers // 2, 1))))),
               "context_parallel": [c for c in pow2(16) if c == 1 or (seq >= 16384 and seq // c >= 2048)],
               "expert_parallel": [e for e in pow2(min(experts, 256)) if experts % e == 0] if experts > 1 else [1],
               "zero_stage": [1, 2, 3], "micro_batch_size": [1, 2, 4, 8], "activation_checkpointing": [False, True],
               "virtual_pipeline_stages": [1, 2, 3, 4, 6, 8]}
    options.update({k: [v] for k, v in given.items()})
    shares = [1.0] if "activation_checkpointing" in given else [0.25, 0.5, 0.75, 1.0]
    for divide_batch in ([batch, 0] if batch else [0]):
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
                            if divide_batch and (divide_batch % (dp * mbs) or divide_batch < dp * mbs):
                                continue
                            for vpp in (options["virtual_pipeline_stages"] if pp > 1 else [1]):
                                if vpp > 1 and layers < pp * vpp:
                                    continue
                                for zero in options["zero_stage"]:
                                    for ac in options["activation_checkpointing"]:
                                        for share in (shares if ac else [0.0]):
                                            row = {"tensor_parallel": tp, "pipeline_parallel": pp,
                                                   "context_parallel": cp, "expert_parallel": ep,
                                                   "micro_batch_size": mbs, "virtual_pipeline_stages": vpp,
                                                   "zero_stage": zero, "activation_checkpointing": ac,
                                                   "recompute_share": share}
                                            rows.append(tuple(row[k] for k in keys))
        if rows:
            return rows
    return []


def test_the_first_of_a_lexsort_is_found_without_sorting():
    rng = np.random.default_rng(7)
    for _ in range(3000):
        n = int(rng.integers(1, 40))
        keys = []
        for _ in range(int(rng.integers(1, 4))):
            key = rng.integers(0, 3, n).astype(float)
            key[rng.random(n) < 0.3] = np.nan          # NaN sorts after every number
            key[rng.random(n) < 0.1] = np.inf
            key[rng.random(n) < 0.1] = -0.0            # equal to 0.0 when sorting
            keys.append(key if rng.random() < 0.7 else rng.random(n) < 0.5)
        assert first_lexsorted(tuple(keys)) == np.lexsort(tuple(keys))[0]
    assert first_lexsorted((np.array([np.nan, np.nan]), np.array([True, False]))) == 1
    assert TRAINING == ("pretraining", "fine-tuning")
