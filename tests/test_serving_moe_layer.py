"""A fused mixture-of-experts layer's fixed time: what a small batch pays besides reading its experts' weights.
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

BASE = {"customer": "Test Co.", "workload": "online-inference", "gpu": "H100", "gpu_count": 1, "tensor_parallel": 1,
        "prompt_tokens": 1000, "output_tokens": 1000, "precision": "fp8", "concurrency": 1}
KEYS = ["decode_step_s", "iteration_fixed_s", "moe_fused_layers_ms", "stack_moe_layer_ms", "n_layers", "is_moe"]


def test_vllm_pays_its_kernels_fixed_time_in_every_expert_layer(ruleset):
    # Qwen3-30B-A3B has 48 layers, each a mixture of experts. vLLM's fused kernel takes 0.027 ms a layer besides its
    # weights (vLLM PR #24700's own benchmark: 40.4 us for 1 token on an H100, 14.3 us of it the routed experts'
    # 37.7 MB): 48 x 0.027 = 1.296 ms an iteration. The layer's other kernels (attention, norms) take the dense
    # layers' fixed 0.023 ms as well: 48 x 0.023 = 1.104 ms. With the iteration's 0.47 ms: 2.87 ms of fixed time
    vllm = evaluate({**BASE, "model": "qwen3-30b-a3b", "serving_engine": "vllm"}, ruleset, only=KEYS).values
    assert vllm["is_moe"] and vllm["n_layers"] == 48
    assert vllm["moe_fused_layers_ms"] == pytest.approx(1.296)
    assert vllm["iteration_fixed_s"] == pytest.approx(2.870e-3, rel=1e-3)
    # SGLang runs the same Triton kernel. TensorRT-LLM's expert layers on Hopper take 0.11 ms each, fitted on its
    # published small-batch runs (validation/published.yaml, BW26) with the other kernels counted apart and Blackwell's
    # runs on a row of their own: 48 x 0.11 = 5.28 ms, + 1.104 ms + 0.47 ms = 6.854 ms
    sglang = evaluate({**BASE, "model": "qwen3-30b-a3b", "serving_engine": "sglang"}, ruleset, only=KEYS).values
    trtllm = evaluate({**BASE, "model": "qwen3-30b-a3b", "serving_engine": "tensorrt-llm"}, ruleset, only=KEYS).values
    assert sglang["moe_fused_layers_ms"] == pytest.approx(1.296)
    assert trtllm["moe_fused_layers_ms"] == pytest.approx(5.28)
    assert trtllm["iteration_fixed_s"] == pytest.approx(6.854e-3, rel=1e-3)
    # the step carries it: TensorRT-LLM's one-token step is longer than vLLM's, whose weight reads are slower
    assert trtllm["decode_step_s"] > vllm["decode_step_s"] > vllm["iteration_fixed_s"]


def test_a_dense_model_and_an_expert_loop_pay_no_fused_layer_time(ruleset):
    # Llama 3.1 8B is dense: no expert layer. Transformers 4.51 visits the experts from Python, a cost of its own
    # (moe_expert_loop_ms), so the fused kernel's time is not added to it
    dense = evaluate({**BASE, "model": "llama-3.1-8b", "serving_engine": "vllm"}, ruleset, only=KEYS).values
    looped = evaluate({**BASE, "model": "qwen3-30b-a3b", "serving_engine": "transformers", "precision": "bf16",
                       "serving_engine_release": "transformers-4.51-or-earlier"}, ruleset,
                      only=KEYS + ["moe_expert_loop_ms"]).values
    assert not dense["is_moe"] and dense["moe_fused_layers_ms"] == 0
    assert looped["moe_expert_loop_ms"] > 0 and looped["moe_fused_layers_ms"] == 0


def test_the_fixed_time_follows_the_kernels_benchmark(ruleset):
    # The value is the benchmark's own arithmetic, not a fit: with the routed experts' weights read at 79% of the
    # H100's 3.35 TB/s, 1 token (37.7 MB, 14.3 us) and 8 tokens (243.6 MB, 92.5 us) leave 26.1 and 26.1 us of the
    # measured 40.4 and 118.6 us. 64 tokens (594.5 MB) then come to 26 + 225 = 251 us, within the 237-263 us measured
    share, peak = 0.79, 3.35e12
    expert_mb, experts, routed = 3 * 2048 * 768 / 1e6, 128, 8      # FP8: one byte a weight
    touched = [experts * (1 - (1 - routed / experts) ** n) for n in (1, 8, 64)]
    weights_us = [t * expert_mb * 1e6 / (share * peak) * 1e6 for t in touched]
    fixed = [40.4 - weights_us[0], 118.6 - weights_us[1]]
    assert fixed == pytest.approx([26.1, 26.1], abs=0.6)
    assert 237 <= 26.1 + weights_us[2] <= 263
    value = evaluate({**BASE, "model": "qwen3-30b-a3b", "serving_engine": "vllm"}, ruleset,
                     only=["stack_moe_layer_ms"]).values["stack_moe_layer_ms"]
    assert value * 1000 == pytest.approx(sum(fixed) / 2, abs=1.5)


def test_tensorrt_llms_expert_layers_on_blackwell_take_their_own_fitted_time(ruleset):
    # TensorRT-LLM's Blackwell runs at a few requests (B200, GB200) are fitted on a row of their own: 0.055 ms a
    # layer against Hopper's 0.11 (rules/serving.yaml). Qwen3-30B-A3B's 48 layers on one B200: 48 x 0.055 = 2.64 ms;
    # on one H100 48 x 0.11 = 5.28 ms. vLLM's row is its kernel benchmark's on either: 48 x 0.027 = 1.296 ms
    qwen = {**BASE, "model": "qwen3-30b-a3b", "serving_engine": "tensorrt-llm"}
    blackwell = evaluate({**qwen, "gpu": "B200"}, ruleset, only=KEYS).values
    hopper = evaluate(qwen, ruleset, only=KEYS).values
    assert blackwell["moe_fused_layers_ms"] == pytest.approx(2.64)
    assert hopper["moe_fused_layers_ms"] == pytest.approx(5.28)
    vllm = evaluate({**qwen, "gpu": "B200", "serving_engine": "vllm"}, ruleset, only=KEYS).values
    assert vllm["moe_fused_layers_ms"] == pytest.approx(1.296)
