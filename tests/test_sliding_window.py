"""A model whose layers attend to a sliding window (gpt-oss, Gemma 2 and 3): its prompt's attention scores only the
pairs inside the window, a decoding token reads only the window's cache, and a request keeps in the cache what its
serving stack sets aside for a windowed layer (model.yaml window_tokens; inference.yaml prompt_attended_tokens,
decode_kv_context, request_kv_tokens; serving.yaml stack_window_cache, stack_window_decode)."""

from __future__ import annotations

import math

import pytest

from engine.calc.evaluate import evaluate

GPT_OSS = {"customer": "Test Co.", "workload": "online-inference", "model": "gpt-oss-120b", "precision": "bf16",
           "weight_precision": "mxfp4", "gpu": "H200", "gpu_count": 1, "serving_engine": "vllm",
           "prompt_tokens": 8192, "output_tokens": 1024, "concurrency": 16}


def values(ruleset, **change):
    return evaluate({**GPT_OSS, **change}, ruleset).values


def test_the_prompts_attention_scores_only_the_pairs_inside_the_window(ruleset):
    # gpt-oss-120b: 18 of 36 layers attend to the last 128 tokens. An 8,192-token prompt scores 8,192²/2 pairs in a
    # full layer and 8,192 × 128 − 128²/2 in a windowed one, 2 × 128/8,192 − (128/8,192)² = 0.0310059 of them:
    # 8,192 × (0.5 + 0.5 × 0.0310059) = 4,223.0 tokens of full attention.
    v = values(ruleset)
    assert v["window_tokens"] == 128 and v["window_layer_share"] == 0.5
    assert v["prompt_attended_tokens"] == pytest.approx(8192 * (0.5 + 0.5 * (256 / 8192 - (128 / 8192) ** 2)))
    assert v["prompt_attended_tokens"] == pytest.approx(4223.0, abs=0.1)
    # a prompt inside the window is causal attention as before: 100 tokens work over 100
    assert values(ruleset, prompt_tokens=100)["prompt_attended_tokens"] == pytest.approx(100)


def test_a_decoding_token_reads_only_the_windows_cache(ruleset):
    # decoding at 8,192 + 1,024 / 2 = 8,704 tokens of context: the full layers read all of it, the windowed ones
    # 128, 0.5 × 8,704 + 0.5 × 128 = 4,416 tokens' worth of cache per request and step
    v = values(ruleset)
    assert v["avg_context"] == 8704
    assert v["decode_kv_context"] == pytest.approx(4416)
    assert v["decode_kv_bytes"] == pytest.approx(v["batch_per_replica"] * 4416 * v["kv_cache_bytes_per_token"])
    # on AMD Instinct the ROCm decoding paths are not established to skip the older cache: all 8,704 are read
    assert values(ruleset, gpu="MI300X")["decode_kv_context"] == pytest.approx(8704)


@pytest.mark.parametrize("engine, kept", [
    # a request of 8,192 + 1,024 = 9,216 tokens: the full layers keep all of them; a windowed layer keeps
    ("vllm", 0.5 * 9216 + 0.5 * 128),            # vLLM's hybrid KV cache manager: the window, 4,672
    ("sglang", 0.5 * 9216 + 0.5 * 0.8 * 9216),   # SGLang: a pool 0.8 the size of the full layers', 8,294.4
    ("tensorrt-llm", 9216),                      # TensorRT-LLM without max_attention_window: all of it
])
def test_a_request_keeps_what_its_stack_sets_aside(ruleset, engine, kept):
    v = values(ruleset, serving_engine=engine)
    assert v["request_kv_tokens"] == pytest.approx(kept)
    assert v["kv_seq_gb"] == pytest.approx(v["kv_cache_bytes_per_token"] * kept / 1e9)
    assert v["memory_concurrency"] == math.floor(v["kv_capacity_tokens"] / kept) * v["dp"]


def test_the_window_doubles_the_requests_vllm_holds_at_long_contexts(ruleset):
    # at 32,768 + 1,024 tokens a request keeps 16,960 tokens' cache under vLLM, 33,792 under a stack that keeps it
    # in full (TensorRT-LLM): the same cache C holds floor(C / 16,960) requests, about twice floor(C / 33,792)
    vllm = values(ruleset, prompt_tokens=32768)
    full = values(ruleset, prompt_tokens=32768, serving_engine="tensorrt-llm")
    assert vllm["request_kv_tokens"] == pytest.approx(16960) and full["request_kv_tokens"] == 33792
    held = vllm["kv_capacity_tokens"]
    assert vllm["memory_concurrency"] == math.floor(held / 16960) >= 2 * math.floor(held / 33792) > 0


def test_gemma_3_keeps_one_layer_in_six_whole(ruleset):
    # Gemma 3 27B: 52 of 62 layers attend to the last 1,024 tokens; 16,384 + 512 tokens under vLLM keep
    # 10/62 × 16,896 + 52/62 × 1,024 = 2,725.2 + 858.8 = 3,584.0 tokens' worth, 21% of full attention
    v = evaluate({**GPT_OSS, "model": "gemma-3-27b", "weight_precision": "bf16", "prompt_tokens": 16384,
                  "output_tokens": 512}, ruleset).values
    assert v["window_layer_share"] == pytest.approx(52 / 62)
    assert v["request_kv_tokens"] == pytest.approx(10 / 62 * 16896 + 52 / 62 * 1024)


def test_a_model_that_attends_to_everything_is_unchanged(ruleset):
    # Llama 3.1 8B has no window: a request keeps, and a prompt works over, every token
    v = evaluate({**GPT_OSS, "model": "llama-3.1-8b", "weight_precision": "bf16"}, ruleset).values
    assert v["window_layer_share"] == 0
    assert v["request_kv_tokens"] == 9216 and v["prompt_attended_tokens"] == 8192
    assert v["decode_kv_context"] == v["avg_context"]


def test_llamacpps_prompt_error_no_longer_grows_with_the_prompt(ruleset):
    # Held out (validation/holdout.yaml, H39; docs/holdout.md): llama-bench of gpt-oss-20b on four GeForce cards.
    # Counting every layer's attention over the whole prompt, the error rose by 23-56 points from a 2,048- to a
    # 32,768-token prompt on every card (RTX 3090 -9.4% -> +45.8%); with the window by -2...+16 (3090 -13.9 -> -0.2%).
    from engine.calc.evidence import load_cases
    from engine.validation import estimate
    from tests.conftest import ROOT
    cases = {c.id: c for c in load_cases(ROOT / "validation" / "holdout.yaml") if c.id.startswith("H39-")}

    def error(card, tokens):
        (case,) = [c for i, c in cases.items() if i.endswith(f"-{card}-pp{tokens}")]
        return estimate(case, ruleset)["ttft_ms"] / case.measured["ttft_ms"] - 1

    for card in ("3090", "4090", "5080", "5090"):
        assert abs(error(card, 32768) - error(card, 2048)) < 0.20, card


def window_notices(ruleset, intake):
    from engine.calc.planner import planned
    results = planned(intake, ruleset)[0]
    return results.values, [n for n in results.warnings if n.code == "sliding_window_cache"]


def test_the_quote_says_what_the_window_keeps_in_three_languages(ruleset):
    # vLLM at 32,768 + 1,024 tokens: 18 of 36 layers keep 128 tokens, 16,960 tokens' cache in all
    values, (notice,) = window_notices(ruleset, {**GPT_OSS, "prompt_tokens": 32768})
    assert values["request_kv_tokens"] == pytest.approx(16960)
    assert "18 of its 36 layers" in notice.message["en"] and "16,960" in notice.message["en"]
    assert "33,792" in notice.message["en"]
    assert "36 層中有 18 層" in notice.message["zh-TW"] and "36 层中有 18 层" in notice.message["zh-CN"]


@pytest.mark.parametrize("change", [
    {"serving_engine": "tensorrt-llm"},                                        # keeps the whole request: nothing to say
    {"model": "gemma-2-9b", "weight_precision": "bf16", "prompt_tokens": 2048, "output_tokens": 512},  # inside 4,096
    {"model": "llama-3.1-8b", "weight_precision": "bf16"},                     # no window at all
])
def test_no_window_notice_where_the_window_keeps_nothing_less(ruleset, change):
    values, notices = window_notices(ruleset, {**GPT_OSS, **change})
    assert values["request_kv_tokens"] == values["seq"] and not notices
