"""vLLM's latent-attention decode on NVIDIA GPUs: a fixed time per layer that a small batch does not hide.
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate
from engine.calc.evidence import DEFAULT_CASES, load_cases
from engine.validation import estimate

DEEPSEEK = {"customer": "Test Co.", "workload": "online-inference", "model": "deepseek-v3", "gpu": "H200",
            "gpu_count": 8, "tensor_parallel": 8, "precision": "fp8", "serving_engine": "vllm",
            "prompt_tokens": 128, "output_tokens": 1024, "concurrency": 1}
KEYS = ["latent_attention_layers_ms", "iteration_fixed_s", "tpot_ms"]


def test_each_latent_attention_layer_adds_its_fixed_time_to_every_step(ruleset):
    # 61 layers x 0.256 ms (stack_latent_decode_ms, from dstack's vLLM run on 8x H200) = 15.616 ms an iteration; at one
    # request a token is an iteration, so the time per token rises by exactly that
    now = evaluate(DEEPSEEK, ruleset, only=KEYS).values
    without = evaluate({**DEEPSEEK, "stack_latent_decode_ms": 0}, ruleset, only=KEYS).values
    assert now["latent_attention_layers_ms"] == pytest.approx(61 * 0.256)
    assert now["iteration_fixed_s"] - without["iteration_fixed_s"] == pytest.approx(61 * 0.256e-3)
    assert now["tpot_ms"] - without["tpot_ms"] == pytest.approx(61 * 0.256, rel=1e-6)


def test_the_published_run_it_was_set_from_is_reproduced(ruleset):
    # dstack's vLLM decode of DeepSeek-R1 on 8x H200 at 4 requests (validation/published.yaml H2-I21): 25.73 ms a token
    case = next(c for c in load_cases(DEFAULT_CASES) if c.id == "H2-I21-dstack-vllm-deepseekr1-fp8-8xH200-c4")
    assert estimate(case, ruleset)["tpot_ms"] == pytest.approx(case.measured["tpot_ms"], rel=0.01)


@pytest.mark.parametrize("change", [{"serving_engine": "sglang"}, {"serving_engine": "tensorrt-llm"}, {"gpu": "MI300X"},
                                    {"model": "llama-3.1-70b"}, {"model": "qwen3-235b-a22b"}])
def test_other_stacks_vendors_and_attention_add_none(ruleset, change):
    # SGLang replays its whole decode step; TensorRT-LLM's runs need none; on AMD the fitted expert-layer time holds it;
    # models without latent attention have no such layer
    assert evaluate({**DEEPSEEK, **change}, ruleset, only=KEYS).values["latent_attention_layers_ms"] == 0
