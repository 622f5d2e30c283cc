"""Invariants every quote keeps, over intakes Hypothesis generates: physics guards and one answer everywhere.

Each generated intake is a JSON file quoted through the one path every channel uses
(engine.job.run_job). Hypothesis is seeded (derandomize), so a run is repeatable and a
failure shrinks to a minimal intake; each failure found is kept as a regular test in
tests/test_invariants_found.py.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.calc.ruleset import current_ruleset
from engine.job import run_job

EXAMPLES = int(os.environ.get("SIZING_INVARIANT_EXAMPLES", "50"))   # 7 invariants × 50: 350 intakes in CI
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# One or two of each GPU family and segment: Volta, Ampere, Hopper, Blackwell, Ada, consumer, AMD, Intel.
GPUS = ("nvidia-v100-sxm2-32gb", "nvidia-a100-sxm4-80gb", "nvidia-h100-sxm5-80gb", "nvidia-h20",
        "nvidia-h200-sxm-141gb", "nvidia-b200-hgx", "nvidia-l40s", "nvidia-t4", "nvidia-rtx-4090",
        "amd-mi300x", "intel-gaudi2", "intel-gaudi3")
# Dense models from 0.5B to 405B, and mixtures of experts.
MODELS = ("qwen2.5-0.5b", "llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
          "mixtral-8x7b", "qwen3-30b-a3b")
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
COUNTS = (1, 2, 4, 8, 16, 64, 256)

# What a customer reads: never None, NaN or negative where the workload has it.
TRAINING_FIGURES = ("training_time_hours", "gpu_hours", "cost_total", "memory_per_gpu_gb", "weights_gb",
                    "effective_tflops_total", "peak_tflops_per_gpu")
SERVING_FIGURES = ("output_tokens_per_s", "tpot_ms", "cost_total", "memory_per_gpu_gb", "weights_gb",
                   "peak_tflops_per_gpu")
ONLINE_FIGURES = ("ttft_ms",)
RAN = ("training_time_hours", "training_time_days", "gpu_hours", "output_tokens_per_s", "ttft_ms",
       "tpot_ms", "cost_total", "cost_per_million_tokens")


@st.composite
def intakes(draw) -> dict:
    """A valid intake of any workload, model, GPU family, precision and count."""
    workload = draw(st.sampled_from(("pretraining", "fine-tuning", "online-inference", "offline-inference")))
    intake = {"customer": "Invariant Co.", "workload": workload,
              "model": draw(st.sampled_from(MODELS)), "gpu": draw(st.sampled_from(GPUS)),
              "precision": draw(st.sampled_from(PRECISIONS)), "gpu_count": draw(st.sampled_from(COUNTS))}
    if workload == "pretraining":
        intake["training_tokens_billion"] = draw(st.sampled_from((0.1, 1, 20, 300, 2000)))
    elif workload == "fine-tuning":
        intake["finetune_method"] = draw(st.sampled_from(("full", "lora", "qlora")))
        intake["samples"] = draw(st.sampled_from((1000, 50_000, 1_000_000)))
        intake["tokens_per_sample"] = draw(st.sampled_from((256, 1024, 2048)))
    else:
        intake["prompt_tokens"] = draw(st.sampled_from((16, 200, 1000, 3000)))
        intake["output_tokens"] = draw(st.sampled_from((1, 100, 500, 1000)))
        if workload == "online-inference":
            if draw(st.booleans()):
                intake["concurrency"] = draw(st.sampled_from((1, 4, 32, 256)))
            if draw(st.booleans()):
                intake["ttft_target_ms"] = draw(st.sampled_from((200, 2000)))
                intake["tpot_target_ms"] = draw(st.sampled_from((20, 100)))
        else:
            intake["requests_total"] = draw(st.sampled_from((1000, 1_000_000)))
    if draw(st.booleans()):
        intake["deadline_days"] = draw(st.sampled_from((1, 30)))
    return intake


def quote(intake: dict):
    """The intake quoted as every channel quotes it (JSON output only: the figures are the same)."""
    with tempfile.TemporaryDirectory(prefix="sizing-invariant-") as tmp:
        source = Path(tmp) / "intake.json"
        source.write_text(json.dumps(intake, ensure_ascii=False), encoding="utf-8")
        job = run_job(source, Path(tmp), ruleset=current_ruleset(), formats=("json",))
    assert job.status in ("quoted", "invalid"), (job.status, [str(p) for p in job.problems])
    assume(job.status == "quoted")          # a request the form refuses is another suite's concern
    return job


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def assert_same_figures(shown: dict, quoted: dict, keys: tuple[str, ...], intake: dict) -> None:
    """Each of `keys` that the quote gives is the same number where `shown` (a table row) gives it too."""
    for key in keys:
        if key in shown and number(quoted.get(key)):
            assert shown[key] == pytest.approx(quoted[key], rel=1e-9), (key, shown[key], quoted[key], intake)


@SETTINGS
@given(intake=intakes())
def test_every_figure_a_customer_reads_is_a_real_number_or_withheld(intake):
    job = quote(intake)
    values = job.results.values
    training = intake["workload"] in ("pretraining", "fine-tuning")
    wanted = TRAINING_FIGURES if training else SERVING_FIGURES
    if intake["workload"] == "online-inference":
        wanted += ONLINE_FIGURES
    for key in wanted:
        if key in RAN + ("effective_tflops_total",) and values.get("feasible") is False:
            continue       # withheld where it cannot run (test_a_configuration_that_cannot_run… holds that)
        assert number(values.get(key)) and values[key] > 0, (key, values.get(key), intake)
    assert "None" not in " ".join(job.quote.warnings) and "nan" not in " ".join(job.quote.warnings).lower()


@SETTINGS
@given(intake=intakes())
def test_a_configuration_that_cannot_run_says_so_and_quotes_nothing_as_if_it_ran(intake):
    job = quote(intake)
    values = job.results.values
    assert isinstance(values.get("feasible"), bool), "every quote says whether it can run"
    if values.get("fits_in_memory") is False:
        assert values["feasible"] is False
        # nothing is quoted as if it ran: no time, throughput or cost
        assert not any(number(values.get(k)) for k in RAN), {k: values.get(k) for k in RAN}
    if values["feasible"] is False:
        assert "cannot" in job.quote.headline, job.quote.headline     # said in one sentence, first
        options = job.results.alternatives
        assert options and options[0].requested
        # nothing is compared against a configuration that cannot hold the model
        if values.get("fits_in_memory") is False:
            assert not any(number(options[0].figures.get(k)) for k in ("cost_total", "training_time_days",
                                                                           "output_tokens_per_s"))


@SETTINGS
@given(intake=intakes())
def test_physics_a_feasible_quote_stays_within_the_gpus_peak_and_bandwidth(intake):
    job = quote(intake)
    v = job.results.values
    assume(v.get("feasible", v.get("fits_in_memory")) is not False)
    count = v.get("gpu_count_used", intake["gpu_count"])
    peak = v["peak_tflops_per_gpu"] * 1e12 * count
    # memory per GPU holds at least its share of the weights, and the parts shown add up to no more
    assert v["memory_per_gpu_gb"] >= v["weights_gb"] * (1 - 1e-9)
    parts = sum(v.get(k, 0) or 0 for k in ("weights_gb", "gradients_gb", "optimizer_gb", "activations_gb",
                                           "kv_cache_gb"))
    assert parts <= v["memory_per_gpu_gb"] * (1 + 1e-9)
    if intake["workload"] in ("pretraining", "fine-tuning"):
        # compute ÷ time cannot beat every GPU's dense peak
        achieved = v["training_flops"] / (v["training_time_hours"] * 3600)
        assert achieved <= peak * 1.0001, (achieved / peak, intake)
    else:
        # every decode step reads the weights it uses at least once, each GPU its share (all of a dense
        # model's but an untied token embedding, looked up one row per token; a mixture of experts only
        # the experts its batch touches)
        floor_s = v["decode_weight_bytes"] / (v["tp"] * v["memory_bandwidth_gb_s"] * 1e9)
        # a mixture of experts' steps that carry no prompt read only the experts their own tokens route to: at
        # one request and short answers the average iteration's experts (prompts joining) overstate a token's
        # read (Mixtral on 4 V100s, 1,000-token prompt, one output token: 25.9 ms for all eight experts at full
        # bandwidth, 7.1 ms for the two a token uses; 13.2 ms quoted)
        floor_s *= v["decode_only_weight_read_s"] / v["weight_read_s"]
        if not v.get("is_moe"):
            untied = v["embedding_params"] > v["n_vocab"] * v["d_model"] * 1.5
            # the embedding at 16 bits in a quantised format, at the weights' own width otherwise (FP32 on a V100)
            looked_up = v["n_vocab"] * v["d_model"] * max(v["weight_bytes"], 2) if untied else 0
            assert v["decode_weight_bytes"] / v["tp"] >= (v["weights_gb"] * 1e9 - looked_up / v["tp"]) * 0.97, intake
        assert v["tpot_ms"] / 1000 >= floor_s * 0.999, (v["tpot_ms"], floor_s * 1000, intake)


@SETTINGS
@given(intake=intakes())
def test_the_scaling_row_at_the_quoted_count_is_the_headline(intake):
    job = quote(intake)
    v = job.results.values
    assume(v.get("feasible", True) is not False)
    columns = {c.key: c.values for c in job.quote.scaling}
    assume(columns)
    row = columns["gpu_count"].index(intake["gpu_count"])
    assert_same_figures({k: cells[row] for k, cells in columns.items()}, v,
                        ("training_time_hours", "training_time_days", "output_tokens_per_s", "cost_total"), intake)


@SETTINGS
@given(intake=intakes(), stated=st.sampled_from((None, 0.5, 0.8)))
def test_a_serving_tables_efficiency_and_speedup_agree(intake, stated):
    """Speedup ÷ GPUs is the efficiency on every serving row (it once said 100% beside a speedup of 12.3 on
    16 GPUs), and a serving quote states no efficiency of its own that could disagree with its table,
    even when the intake fills in training's scaling efficiency: then the quote says it was not used."""
    assume(intake["workload"].endswith("inference"))
    if stated is not None:
        intake["scaling_efficiency"] = stated
    job = quote(intake)
    assert "scaling_efficiency" not in job.results.values, intake
    not_used = [n.where for n in job.results.warnings if n.code == "not_used" and "scaling_efficiency" in n.where]
    assert not_used == (["intake.json:scaling_efficiency"] if stated is not None else []), (not_used, intake)
    columns = {c.key: c.values for c in job.quote.scaling}
    assume("speedup" in columns)
    for count, speedup, efficiency in zip(columns["gpu_count"], columns["speedup"], columns["scaling_efficiency"]):
        if number(speedup):
            assert efficiency * count == pytest.approx(speedup, rel=1e-9), (count, intake)


@SETTINGS
@given(intake=intakes())
def test_the_sweep_row_of_the_quoted_configuration_is_the_quote(intake):
    from engine.calc.sweep import sweep
    job = quote(intake)
    v = job.results.values
    assume(v.get("feasible", True) is not False)
    grid = {"gpu": [intake["gpu"]], "gpu_count": [intake["gpu_count"]], "precision": [intake["precision"]]}
    table = sweep(job.intake, current_ruleset(), grid).table
    assume(len(table))          # a precision the GPU lacks is left out of a sweep
    assert_same_figures(table.iloc[0].to_dict(), v,
                        ("training_time_days", "output_tokens_per_s", "cost_total", "memory_per_gpu_gb"), intake)


@SETTINGS
@given(intake=intakes())
def test_alternatives_charge_each_gpu_its_own_price(intake):
    intake = {**intake, "gpu_hour_price": 9.0, "currency": "USD"}
    job = quote(intake)
    catalogs = current_ruleset().catalogs
    for option in job.results.alternatives:
        hours = option.figures.get("job_hours")
        cost = option.figures.get("cost_total")
        if not (number(hours) and number(cost)) or intake["workload"] == "online-inference":
            continue
        price = 9.0 if option.gpu == intake["gpu"] else catalogs.gpus[option.gpu]["price_usd_per_gpu_hour"]
        assert cost == pytest.approx(hours * option.gpu_count * price, rel=1e-6), (option.gpu, intake)


@SETTINGS
@given(intake=intakes())
def test_every_row_of_the_scaling_table_is_what_the_sweep_says_for_that_count(intake):
    from engine.calc.sweep import sweep
    job = quote(intake)
    columns = {c.key: c.values for c in job.quote.scaling}
    assume(columns)
    grid = {"gpu": [intake["gpu"]], "gpu_count": columns["gpu_count"], "precision": [intake["precision"]]}
    table = sweep(job.intake, current_ruleset(), grid).table
    assume(len(table))
    by_count = {int(r["gpu_count"]): r for _, r in table.iterrows()}
    for row, count in enumerate(columns["gpu_count"]):
        for key in ("training_time_days", "training_time_hours", "output_tokens_per_s", "cost_total"):
            if key in columns and count in by_count and key in by_count[count] \
                    and number(columns[key][row]) and number(by_count[count][key]):
                assert columns[key][row] == pytest.approx(by_count[count][key], rel=1e-9), (key, count, intake)


@SETTINGS
@given(intake=intakes())
def test_explain_derives_the_figure_the_quote_shows(intake):
    from engine.calc.explain import explain
    from engine.job import planned_results, read_checked
    job = quote(intake)
    with tempfile.TemporaryDirectory(prefix="sizing-invariant-") as tmp:
        source = Path(tmp) / "intake.json"
        source.write_text(json.dumps(intake, ensure_ascii=False), encoding="utf-8")
        # what `sizing explain` does (engine/commands/explain.py), one figure at a time
        ruleset = current_ruleset()
        results, _ = planned_results(read_checked(source, ruleset), ruleset)
    for key in ("training_time_hours", "memory_per_gpu_gb", "tpot_ms", "output_tokens_per_s", "cost_total"):
        if number(job.results.values.get(key)):
            assert explain(key, results, ruleset).value == pytest.approx(job.results.values[key], rel=1e-9), key


@SETTINGS
@given(total=st.floats(1, 2000), active_share=st.floats(0.001, 0.999), batch=st.sampled_from((1, 2, 8, 64, 1024)))
def test_a_custom_mixture_of_experts_never_holds_or_reads_more_than_the_model(total, active_share, batch):
    # A custom model given only its total and active parameters (no expert counts): its experts hold at most the whole
    # model, what it shares at least nothing, and an iteration reads at least the active parameters a token uses and
    # at most the model (less the input embedding, which a token looks up rather than reads)
    from engine.calc.evaluate import evaluate
    keys = ["expert_params", "dense_params", "params", "active_params", "decode_weight_params", "n_vocab", "d_model"]
    v = evaluate({"customer": "Invariant Co.", "workload": "online-inference", "model": "custom",
                  "params_billion": total, "active_params_billion": total * active_share, "layers": 32,
                  "hidden_size": 4096, "attention_heads": 32, "kv_heads": 8, "vocab_size": 32000, "gpu": "nvidia-h100-sxm5-80gb", "gpu_count": 8,
                  "precision": "bf16", "concurrency": batch, "prompt_tokens": 100, "output_tokens": 100},
                 current_ruleset(), only=keys).values
    assert v["expert_params"] <= v["params"] * (1 + 1e-9)
    assert v["dense_params"] >= 0
    embedding = v["n_vocab"] * v["d_model"]
    assert v["decode_weight_params"] <= v["params"] - embedding + 1e-3 * v["params"]
    assert v["decode_weight_params"] >= v["active_params"] - embedding - 1e-3 * v["params"]
