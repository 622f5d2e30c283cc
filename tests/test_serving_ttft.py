"""The time to first token under load, as the schedulers run it: the wait for the iteration under way, the
iteration that runs the prompt, and SGLang's overlap scheduler (inference.yaml: iteration_wait_s,
prompt_iteration_s, ttft_ms; serving.yaml: stack_overlap_schedule; docs/accuracy.md, serve18)."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Llama 3.1 70B at TP 4, 10 requests in flight of 467 + 256 tokens; the iteration's parts given, as measured
# parts would be: an average iteration 18 ms, one without a prompt 16.5 ms, the prompt alone 47.6 ms, of which
# the weight read 13 ms, the fixed time 0.94 ms and 2 x 80 layers x 10 us = 1.6 ms of all-reduce latencies.
PARTS = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-70b", "precision": "bf16",
         "gpu": "H100", "gpu_count": 4, "tensor_parallel": 4, "prompt_tokens": 467, "output_tokens": 256,
         "concurrency": 10, "batch_per_replica": 10, "decode_step_s": 0.018, "decode_only_step_s": 0.0165,
         "prefill_alone_s": 0.0476, "weight_read_s": 0.013, "iteration_fixed_s": 0.00094,
         "allreduce_latency_s": 0.00001}

# 10 requests x 1 chunk / 256 = 0.0390625 of the iterations carry a prompt. Those take 16.5 + 1.5 / 0.0390625
# = 54.9 ms, the others 16.5 ms; a request lands in a long one more often: the rest of the iteration it lands in is
# 18 / 2 + (1 - 0.0390625) x 1.5^2 / (2 x 0.0390625 x 18) = 9 + 2.162109 / 1.40625 = 10.5375 ms.
WAIT_MS = 10.5375


def test_the_wait_is_the_rest_of_a_length_biased_iteration(ruleset):
    values = evaluate({**PARTS, "serving_engine": "tensorrt-llm"}, ruleset).values
    assert values["prompt_iteration_share"] == pytest.approx(0.0390625)
    assert values["iteration_wait_s"] * 1000 == pytest.approx(WAIT_MS, abs=1e-6)


def test_a_prompt_folded_into_the_next_iteration_shares_its_weight_read(ruleset):
    # TensorRT-LLM's in-flight batching: the next iteration is an average one (18 ms, the others' prompts in it)
    # plus this prompt's own work, 47.6 - 13 - 0.94 - 1.6 = 32.06 ms -> 50.06 ms; 10.5375 + 50.06 = 60.5975 ms.
    # The old rule: 9 + max(18, 16.5 + 47.6) = 73.1 ms.
    values = evaluate({**PARTS, "serving_engine": "tensorrt-llm"}, ruleset).values
    assert values["stack_overlap_schedule"] is False
    assert values["prompt_iteration_s"] * 1000 == pytest.approx(50.06, abs=1e-6)
    assert values["ttft_ms"] == pytest.approx(60.5975, abs=1e-6)


@pytest.mark.parametrize("release, overlap, ttft_ms", [
    # the overlap scheduler (SGLang from PR #2067): the wait, the batch already launched (18 ms), its own pass
    # (47.6 ms, weights read again): 10.5375 + 18 + 47.6 = 76.1375 ms
    (None, True, 76.1375),
    # SGLang 0.3: received when the batch ends, its pass next: 10.5375 + 47.6 = 58.1375 ms
    ("sglang-0.3", False, 58.1375),
])
def test_sglang_overlap_scheduler_queues_one_batch_ahead(ruleset, release, overlap, ttft_ms):
    job = {**PARTS, "serving_engine": "sglang", **({"serving_engine_release": release} if release else {})}
    values = evaluate(job, ruleset).values
    assert values["stack_overlap_schedule"] is overlap
    assert values["prompt_iteration_s"] * 1000 == pytest.approx(47.6, abs=1e-6)
    assert values["ttft_ms"] == pytest.approx(ttft_ms, abs=1e-6)


def test_one_request_alone_is_its_prompt(ruleset):
    job = {**PARTS, "serving_engine": "sglang", "concurrency": 1, "batch_per_replica": 1}
    assert evaluate(job, ruleset).values["ttft_ms"] == pytest.approx(47.6, abs=1e-6)
