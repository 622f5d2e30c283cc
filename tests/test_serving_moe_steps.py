"""A mixture of experts reads the experts its tokens route to: a step without prompts only the decoding tokens' experts,
a prompt's pass the experts its tokens touch, and the steps between prompts the first plus their share of the second.
Expected numbers are derived by hand in the comments; each test fails if prompts are spread over the steps again."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# DeepSeek-R1 (the catalog's deepseek-v3: 61 layers, 8 of 256 routed experts) on 8 H200 with TensorRT-LLM, as
# TensorRT-LLM's issue #5929 ran it (validation/published.yaml, BW26-10..24)
DEEPSEEK = {"customer": "Test Co.", "workload": "online-inference", "model": "deepseek-v3", "gpu": "H200", "gpu_count": 8,
            "tensor_parallel": 8, "serving_engine": "tensorrt-llm", "precision": "fp8", "prompt_tokens": 1600,
            "output_tokens": 600, "concurrency": 1}
KEYS = ["tpot_ms", "kv_read_s", "weight_read_s", "decode_only_weight_read_s", "prompt_pass_weight_read_s",
        "expert_read_all_s", "experts_decoding_share", "experts_touched_share", "prompt_experts_share"]


def serve(ruleset, **intake):
    return evaluate({**DEEPSEEK, **intake}, ruleset, only=KEYS).values


def test_one_requests_time_per_token_does_not_grow_with_its_prompt_beyond_the_cache_it_reads(ruleset):
    # At one request no prompt rides in a decoding step: the step reads 1 - 248/256 = 3.1% of the experts whatever the
    # prompt. 1,600 and 8,192-token prompts differ only by the KV cache each step reads. TensorRT-LLM measured 13.78
    # and 14.53 ms; spread over the 600 steps, the 8,192-token prompt took the experts read from 11% to 37% of them
    # and the estimate from 5.6 to 13.1 ms
    short, long = serve(ruleset), serve(ruleset, prompt_tokens=8192)
    assert short["experts_decoding_share"] == pytest.approx(1 / 32)
    assert long["decode_only_weight_read_s"] == pytest.approx(short["decode_only_weight_read_s"])
    assert long["tpot_ms"] - short["tpot_ms"] == pytest.approx((long["kv_read_s"] - short["kv_read_s"]) * 1000)


def test_the_steps_between_prompts_read_the_decoding_experts_and_a_share_of_a_prompts(ruleset):
    # 8 requests: decoding 1 - (248/256)^8 = 0.22430; a prompt 1 - (248/256)^100 = 0.95820; a prompt every
    # 600 / 8 = 75 steps, 0.013333 of one per step: 0.22430 + 0.013333 x (1 - 0.22430) x 0.95820 = 0.23421
    v = serve(ruleset, concurrency=8)
    assert v["experts_decoding_share"] == pytest.approx(1 - (248 / 256) ** 8)
    assert v["prompt_experts_share"] == pytest.approx(1 - (248 / 256) ** 100)
    assert v["experts_touched_share"] == pytest.approx(0.23421, abs=2e-5)
    # the average step reads the experts read by the decoding step and the prompt's share; a prompt's pass reads its own
    assert v["weight_read_s"] - v["decode_only_weight_read_s"] == pytest.approx(
        v["expert_read_all_s"] * (0.23421 - 0.22430), rel=2e-3)
    assert v["prompt_pass_weight_read_s"] - v["weight_read_s"] == pytest.approx(
        v["expert_read_all_s"] * (0.95820 - 0.23421), rel=1e-4)


def test_a_dense_model_reads_its_weights_whole_in_every_step(ruleset):
    # no experts: every step and every prompt's pass reads the same weights
    v = serve(ruleset, model="llama-3.1-70b", concurrency=8)
    assert v["expert_read_all_s"] == 0
    assert v["decode_only_weight_read_s"] == v["weight_read_s"] == v["prompt_pass_weight_read_s"]
