"""The time to first token under load, the prompts ahead: a prompt longer than half the iteration's token budget
waits behind the long prompts ahead of it, an M/D/1 queue (inference.yaml: prompt_carrying_iteration_s,
prompt_queue_load, prompt_queue_s; docs/accuracy.md, serve21 — measured, not kept)."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# NIM's shape: Llama 3.3 70B at TP 2 on TensorRT-LLM, 50 requests in flight of 5,000 + 500 tokens; the iteration's
# parts given: an average iteration 64 ms, one without a prompt 32 ms, the prompt alone 344 ms, of which the weight
# read 18 ms, the fixed time 0.94 ms and 2 x 80 layers x 10 us = 1.6 ms of all-reduce latencies.
LONG = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.3-70b", "precision": "fp8",
        "gpu": "H100", "gpu_count": 2, "tensor_parallel": 2, "prompt_tokens": 5000, "output_tokens": 500,
        "concurrency": 50, "batch_per_replica": 50, "decode_step_s": 0.064, "decode_only_step_s": 0.032,
        "prefill_alone_s": 0.344, "weight_read_s": 0.018, "iteration_fixed_s": 0.00094,
        "allreduce_latency_s": 0.00001, "serving_engine": "tensorrt-llm"}


def test_a_prompt_longer_than_half_the_budget_waits_behind_the_prompts_ahead(ruleset):
    # 50 x ceil(5,000 / 8,192) / 500 = 0.1 of the iterations carry a prompt; each is 32 + 32 / 0.1 = 352 ms long,
    # so the server spends 0.1 x 352 / 64 = 0.55 of its time on them (rho). Wait for the iteration under way:
    # 64 / 2 + 0.9 x 32^2 / (2 x 0.1 x 64) = 32 + 72 = 104 ms. Behind the prompts ahead (M/D/1, beyond the rest of
    # the one under way): 0.55^2 x 352 / (2 x 0.45) = 118.3111 ms. Its own iteration: 64 ms + 344 - 18 - 0.94 - 1.6
    # = 323.46 ms -> 387.46 ms (no other whole prompt fits beside it). 104 + 118.3111 + 387.46 = 609.7711 ms;
    # the old rule had no queue: 491.46 ms.
    values = evaluate(LONG, ruleset).values
    assert values["prompt_iteration_share"] == pytest.approx(0.1)
    assert values["prompt_carrying_iteration_s"] * 1000 == pytest.approx(352.0, abs=1e-6)
    assert values["prompt_queue_load"] == pytest.approx(0.55, abs=1e-9)
    assert values["iteration_wait_s"] * 1000 == pytest.approx(104.0, abs=1e-6)
    assert values["prompt_queue_s"] * 1000 == pytest.approx(118.311111, abs=1e-5)
    assert values["prompt_iteration_s"] * 1000 == pytest.approx(387.46, abs=1e-6)
    assert values["ttft_ms"] == pytest.approx(609.771111, abs=1e-5)


def test_short_prompts_share_an_iteration_and_do_not_queue(ruleset):
    # 500-token prompts: 16 fit the 8,192-token budget, those arriving together go in one iteration
    values = evaluate({**LONG, "prompt_tokens": 500}, ruleset).values
    assert values["prompt_queue_s"] == 0


def test_one_request_alone_is_its_prompt(ruleset):
    values = evaluate({**LONG, "concurrency": 1, "batch_per_replica": 1}, ruleset).values
    assert values["prompt_queue_s"] == 0
    assert values["ttft_ms"] == pytest.approx(344.0, abs=1e-6)
