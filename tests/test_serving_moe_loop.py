"""Hugging Face Transformers runs a mixture-of-experts layer one expert at a time (rules/serving.yaml,
stack_expert_host_ms, stack_moe_loop_all, moe_expert_loop_ms; docs/accuracy.md, serve22)."""

from __future__ import annotations

import math

import pytest

from engine.calc.evaluate import evaluate

# Qwen3-30B-A3B (48 layers, 128 routed experts, 8 per token) on one H20, one request, as the Qwen3 speed page ran it
QWEN3_MOE = {"customer": "Test Co.", "workload": "online-inference", "model": "qwen3-30b-a3b", "precision": "bf16",
             "gpu": "H20", "gpu_count": 1, "prompt_tokens": 1, "output_tokens": 2048, "concurrency": 1,
             "serving_engine": "transformers", "stack_expert_host_ms": 0.1}


def test_transformers_451_visits_every_expert_of_every_layer_each_step(ruleset):
    # Transformers 4.51's Qwen3MoeSparseMoeBlock loops 'for expert_idx in range(self.num_experts)': 128 experts
    # x 48 layers = 6,144 visits per step, at 0.1 ms each (torch.where's read-back and a dozen Python-launched
    # operators) = 614.4 ms more per token than the same step with a grouped kernel. By hand, at batch 1.
    old = evaluate({**QWEN3_MOE, "serving_engine_release": "transformers-4.51-or-earlier"}, ruleset).values
    assert old["moe_experts_looped"] == 128
    assert old["moe_expert_loop_ms"] == pytest.approx(128 * 48 * 0.1)          # 614.4 ms
    without = evaluate({**QWEN3_MOE, "serving_engine_release": "transformers-4.51-or-earlier",
                        "stack_expert_host_ms": 0}, ruleset).values
    assert (old["iteration_fixed_s"] - without["iteration_fixed_s"]) * 1000 == pytest.approx(614.4)
    assert old["tpot_ms"] - without["tpot_ms"] == pytest.approx(614.4, rel=1e-3)


def test_a_current_release_visits_only_the_experts_the_step_routes_to(ruleset):
    # From 4.52/4.53 the loop runs over 'expert_hitted' only. One request, 1-token prompt over 2,048 outputs: the
    # decoding token routes to 8/128 = 0.0625 of the experts; once in 2,048 steps a prompt, whose 1 token touches
    # 0.0625 of them too, 0.9375 x 0.0625 of them new: 0.0625 + 0.9375 x 0.0625 / 2048 = 0.062529 of the experts =
    # 8.0037 of 128, x 48 layers x 0.1 ms = 38.42 ms per step.
    now = evaluate(QWEN3_MOE, ruleset).values
    share = 0.0625 + 0.9375 * 0.0625 / 2048
    assert now["moe_experts_looped"] == pytest.approx(128 * share)
    assert now["moe_expert_loop_ms"] == pytest.approx(128 * share * 48 * 0.1, rel=1e-6)
    assert math.isclose(now["moe_expert_loop_ms"], 38.42, rel_tol=1e-3)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_a_grouped_expert_kernel_pays_no_loop(ruleset, engine):
    # vLLM's and SGLang's fused_moe and TensorRT-LLM's MoE plugin run a layer's experts as one kernel
    values = {**QWEN3_MOE, "serving_engine": engine}
    values.pop("stack_expert_host_ms")
    got = evaluate(values, ruleset).values
    assert got["moe_experts_looped"] == 0 and got["moe_expert_loop_ms"] == 0


def test_a_dense_model_under_transformers_pays_no_loop(ruleset):
    dense = evaluate({**QWEN3_MOE, "model": "qwen3-32b", "serving_engine_release": "transformers-4.51-or-earlier"},
                     ruleset).values
    assert dense["moe_experts_looped"] == 0 and dense["moe_expert_loop_ms"] == 0
