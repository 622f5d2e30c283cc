"""Tensor parallelism splits the KV cache by KV head; an MLA latent (one KV head) is copied to every GPU
(inference.yaml kv_tp_shards; vLLM get_num_kv_heads; docs/accuracy.md, serve19 — tried, not kept)."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

BASE = {"customer": "Test Co.", "workload": "online-inference", "precision": "fp8", "gpu": "H200", "gpu_count": 8,
        "tensor_parallel": 8, "serving_engine": "vllm", "prompt_tokens": 1000, "output_tokens": 1000, "concurrency": 64}


def test_mla_latent_is_read_whole_on_every_gpu(ruleset):
    # DeepSeek R1 caches one latent per token (kv_cache_dim): every GPU of TP 8 keeps and reads all of it, so
    # the cache read takes 8x what a split by 8 would: kv_read_s = decode_kv_bytes x rereads / (1 x bw x share).
    v = evaluate({**BASE, "model": "deepseek-r1"}, ruleset).values
    assert v["kv_tp_shards"] == 1
    bw = v["memory_bandwidth_gb_s"] * 1e9 * v["kv_read_share"]
    assert v["kv_read_s"] == pytest.approx(v["decode_kv_bytes"] * v["decode_kv_rereads"] / bw, rel=1e-6)


def test_gqa_heads_split_up_to_their_count(ruleset):
    # Llama 3.1 70B has 8 KV heads: TP 8 splits them 8 ways (the old rule: tp = 8 for every model).
    v = evaluate({**BASE, "model": "llama-3.1-70b"}, ruleset).values
    assert v["kv_tp_shards"] == 8
