"""The time to first token under load, the others' prompts in a request's iteration: those that arrived during the
iteration it waited in, which is a long one more often than the average — E[S²] / E[S] = 2 · iteration_wait_s long,
not decode_step_s (inference.yaml: prompt_iteration_s; docs/accuracy.md, serve21). Folded into the next iteration
(TensorRT-LLM, vLLM) or taken into SGLang's prefill batch alike."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# TensorRT-LLM 0.14's shape: Llama 3.1 70B at TP 4, 10 requests in flight of 467 + 256 tokens; an average iteration
# 18 ms, one without a prompt 16.5 ms, the prompt alone 47.6 ms, of which the weight read 13 ms, the fixed time
# 0.94 ms and 2 x 80 layers x 10 us = 1.6 ms of all-reduce latencies (tests/test_serving_ttft.py's parts).
SHORT = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-70b", "precision": "bf16",
         "gpu": "H100", "gpu_count": 4, "tensor_parallel": 4, "prompt_tokens": 467, "output_tokens": 256,
         "concurrency": 10, "batch_per_replica": 10, "decode_step_s": 0.018, "decode_only_step_s": 0.0165,
         "prefill_alone_s": 0.0476, "weight_read_s": 0.013, "iteration_fixed_s": 0.00094,
         "allreduce_latency_s": 0.00001, "serving_engine": "tensorrt-llm"}


def test_the_others_prompts_in_its_iteration_are_those_of_a_long_iteration(ruleset):
    # The wait: 10.5375 ms (10 / 256 = 0.0390625 of the iterations carry a prompt: 18 / 2 + 0.9609375 x 1.5^2 /
    # (2 x 0.0390625 x 18)). The iteration it waited in is E[S^2] / E[S] = 2 x 10.5375 = 21.075 ms long on average,
    # not 18: the prompts that arrived during it, and ride with its own, are 1.5 ms x 21.075 / 18 = 1.75625 ms of
    # work. Its iteration: 16.5 + 1.75625 + its own 47.6 - 13 - 0.94 - 1.6 = 32.06 ms -> 50.31625 ms;
    # 10.5375 + 50.31625 = 60.85375 ms (serve18's rule, the others those of an average iteration: 60.5975).
    values = evaluate(SHORT, ruleset).values
    assert values["iteration_wait_s"] * 1000 == pytest.approx(10.5375, abs=1e-6)
    assert values["prompt_iteration_s"] * 1000 == pytest.approx(50.31625, abs=1e-6)
    assert values["ttft_ms"] == pytest.approx(60.85375, abs=1e-6)


def test_sglang_prefill_pass_takes_the_prompts_that_arrived_with_it(ruleset):
    # SGLang's prefill batch takes every waiting prompt that fits: beside its own 47.6 ms pass, 10 / 256 prompts per
    # iteration x 32.06 ms of work each x 21.075 / 18 = 1.466277 ms -> 49.066277 ms; behind the batch already
    # launched (its overlap scheduler, 18 ms) and the wait: 10.5375 + 18 + 49.066277 = 77.603777 ms (serve18: 76.1375).
    values = evaluate({**SHORT, "serving_engine": "sglang"}, ruleset).values
    assert values["prompt_iteration_s"] * 1000 == pytest.approx(49.066277, abs=1e-5)
    assert values["ttft_ms"] == pytest.approx(77.603777, abs=1e-5)


def test_a_prompt_longer_than_half_the_budget_has_no_whole_prompt_beside_it(ruleset):
    # 5,000-token prompts, 50 in flight of 5,000 + 500 (NIM's shape), the 8,192-token budget holds one: its iteration
    # is an average one, 64 ms, plus its own 344 - 18 - 0.94 - 1.6 = 323.46 ms -> 387.46 ms, as serve18's rule
    long = {**SHORT, "model": "llama-3.3-70b", "precision": "fp8", "gpu_count": 2, "tensor_parallel": 2,
            "prompt_tokens": 5000, "output_tokens": 500, "concurrency": 50, "batch_per_replica": 50,
            "decode_step_s": 0.064, "decode_only_step_s": 0.032, "prefill_alone_s": 0.344, "weight_read_s": 0.018}
    values = evaluate(long, ruleset).values
    assert values["prompt_iteration_s"] * 1000 == pytest.approx(387.46, abs=1e-6)
