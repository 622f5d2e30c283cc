"""A DeepSeek-family prompt pass runs without CUDA graphs: the request waits for the host to issue its layers.
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

DEEPSEEK = {"customer": "Test Co.", "workload": "online-inference", "model": "deepseek-v3", "gpu": "H200",
            "gpu_count": 8, "tensor_parallel": 8, "precision": "fp8", "serving_engine": "sglang",
            "prompt_tokens": 1024, "output_tokens": 1024, "concurrency": 1}
KEYS = ["prompt_host_s", "prefill_alone_s", "ttft_ms", "tpot_ms", "first_wave_ttft_s", "first_wave_passes"]
HOST_S = 61 * 0.98e-3   # 61 layers x 0.98 ms (SGLang PR #12160: 82.64 ms eager - 23.10 ms replayed, over 61 layers)


def quote(values: dict, ruleset, host_ms: float | None = None) -> dict:
    """The figures, with the stack's host time per layer as the rules hold it or set to `host_ms`."""
    given = values if host_ms is None else {**values, "stack_prompt_host_ms": host_ms}
    return evaluate(given, ruleset, only=KEYS).values


def test_one_request_waits_for_the_host_to_issue_its_prompt_pass(ruleset):
    # At one request the first token is the prompt pass alone: 61 x 0.98 ms = 59.78 ms more than the GPU's own time;
    # the time per token does not move (decode batches replay CUDA graphs)
    now, without = quote(DEEPSEEK, ruleset), quote(DEEPSEEK, ruleset, host_ms=0)
    assert now["prompt_host_s"] == pytest.approx(HOST_S)
    assert now["ttft_ms"] - without["ttft_ms"] == pytest.approx(HOST_S * 1000, rel=1e-6)
    assert now["tpot_ms"] == pytest.approx(without["tpot_ms"], rel=1e-9)


def test_a_wave_pays_it_once_per_pass_not_once_per_prompt(ruleset):
    # 64 requests at once: 64 x 1,024 tokens go through in passes of the stack's token budget; the k-th of n passes
    # gives its prompts their first token at k/n of the wave's prefill, so the mean rises by n x host x (n + 1) / 2n =
    # host x (n + 1) / 2, not by 64 hosts' worth
    wave = {**DEEPSEEK, "concurrency": 64, "requests_total": 640}
    now, without = quote(wave, ruleset), quote(wave, ruleset, host_ms=0)
    passes = now["first_wave_passes"]
    assert passes > 1
    assert now["first_wave_ttft_s"] - without["first_wave_ttft_s"] == pytest.approx(HOST_S * (passes + 1) / 2, rel=1e-6)
    assert now["tpot_ms"] == pytest.approx(without["tpot_ms"], rel=1e-9)


@pytest.mark.parametrize("change", [{"model": "llama-3.1-70b"}, {"model": "qwen3-235b-a22b"},
                                    {"serving_engine": "tensorrt-llm"}])
def test_only_a_python_launched_deepseek_family_prompt_pays_it(ruleset, change):
    # a dense model, an expert model without latent attention, and a stack that launches from C++ add none
    assert quote({**DEEPSEEK, **change}, ruleset)["prompt_host_s"] == 0
