"""vLLM and SGLang on AMD Instinct run mixture-of-experts layers several times faster since their early-2025 builds;
the release an intake names picks the rows, and NVIDIA's rows do not depend on it."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate
from engine.intake.validate import validate
from tests.test_intake_kit import catalogs, serving_release_intake

# gpt-oss-120b (36 layers, every one a mixture of experts) on eight MI300X at TP 8, one request
GPT_OSS_ON_MI300X = {"customer": "Test Co.", "workload": "online-inference", "model": "gpt-oss-120b", "gpu": "MI300X",
                     "gpu_count": 8, "tensor_parallel": 8, "precision": "bf16", "weight_precision": "mxfp4",
                     "serving_engine": "vllm", "concurrency": 1, "prompt_tokens": 1024, "output_tokens": 1024}


def test_a_current_build_reads_the_rows_fitted_on_its_releases(ruleset):
    v = evaluate(GPT_OSS_ON_MI300X, ruleset).values
    assert v["serving_release_used"] == "current"
    assert v["stack_moe_layer_ms"] == pytest.approx(0.055)
    assert v["stack_moe_gemm"] == pytest.approx(2.0)
    assert v["stack_allreduce_latency_ms"] == pytest.approx(0.023)
    # 36 expert layers x 0.055 ms
    assert v["moe_fused_layers_ms"] == pytest.approx(36 * 0.055)


def test_an_early_2025_build_reads_the_slower_rows_and_its_token_takes_longer(ruleset):
    now = evaluate(GPT_OSS_ON_MI300X, ruleset).values
    old = evaluate({**GPT_OSS_ON_MI300X, "serving_engine_release": "vllm-0.7-or-earlier"}, ruleset).values
    assert old["stack_moe_layer_ms"] == pytest.approx(0.38)
    assert old["stack_moe_gemm"] == pytest.approx(8.1)
    # the fixed time alone: 36 x (0.38 - 0.055) = 11.7 ms more per iteration, so at one request more per token
    assert old["moe_fused_layers_ms"] - now["moe_fused_layers_ms"] == pytest.approx(36 * (0.38 - 0.055))
    # (the expert multiplies' extra time, 8.1 against 2.0 times, adds a little more)
    assert old["tpot_ms"] - now["tpot_ms"] >= 36 * (0.38 - 0.055) - 1e-9


def test_sglang_names_its_own_early_release(ruleset):
    sglang = {**GPT_OSS_ON_MI300X, "serving_engine": "sglang", "serving_engine_release": "sglang-0.4.3-or-earlier"}
    assert evaluate(sglang, ruleset).values["stack_moe_layer_ms"] == pytest.approx(0.38)


def test_nvidia_quotes_do_not_depend_on_the_release(ruleset):
    # vLLM's expert layers on NVIDIA read its kernel timing (0.027 ms) whatever the release
    h100 = {**GPT_OSS_ON_MI300X, "gpu": "H100"}
    now = evaluate(h100, ruleset).values
    old = evaluate({**h100, "serving_engine_release": "vllm-0.7-or-earlier"}, ruleset).values
    assert now["stack_moe_layer_ms"] == old["stack_moe_layer_ms"] == pytest.approx(0.027)
    assert now["tpot_ms"] == pytest.approx(old["tpot_ms"], rel=1e-12)


@pytest.mark.parametrize("engine, release, problems", [("vllm", "vllm 0.7.3", []), ("sglang", "sglang 0.4.3", []),
                                                       ("sglang", "vllm 0.7.3", ["release_stack"]),
                                                       ("tensorrt-llm", "sglang 0.4.3", ["release_stack"])])
def test_a_release_belongs_to_its_stack(tmp_path, engine, release, problems):
    intake = serving_release_intake(tmp_path, engine, release, "MI300X")
    assert [p.code for p in validate(intake, catalogs())] == problems
