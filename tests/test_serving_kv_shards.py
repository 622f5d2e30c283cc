"""Tensor parallelism splits the KV cache by KV head; an MLA latent (one KV head) is copied to every GPU
(inference.yaml kv_tp_shards; vLLM get_num_kv_heads; docs/accuracy.md, serve19 and the eighth stop)."""

from __future__ import annotations

import math

import pytest

from engine.calc.evaluate import evaluate

BASE = {"customer": "Test Co.", "workload": "online-inference", "precision": "fp8", "gpu": "H200", "gpu_count": 8,
        "tensor_parallel": 8, "serving_engine": "vllm", "prompt_tokens": 1000, "output_tokens": 1000, "concurrency": 64}


def test_mla_latent_is_kept_and_read_whole_on_every_gpu(ruleset):
    # DeepSeek R1 caches one latent per token and layer: (512 + 64) values × 61 layers × 2 bytes (vLLM's
    # 16-bit cache) = 70,272 bytes. Every GPU of TP 8 keeps all of it, so a GPU's free memory holds
    # capacity / 70,272 tokens — not 8× that, as a split by 8 would — and reads the whole cache each step.
    v = evaluate({**BASE, "model": "deepseek-r1"}, ruleset).values
    assert v["kv_cache_bytes_per_token"] == 576 * 61 * 2
    assert v["kv_tp_shards"] == 1
    assert v["kv_capacity_tokens"] == math.floor(v["kv_capacity_gb"] * 1e9 / 70272)
    bw = v["memory_bandwidth_gb_s"] * 1e9 * v["kv_read_share"]
    assert v["kv_read_s"] == pytest.approx(v["decode_kv_bytes"] * v["decode_kv_rereads"] / bw, rel=1e-6)


@pytest.mark.parametrize("tp, shards", [(8, 8), (4, 4), (16, 8)])
def test_gqa_heads_split_up_to_their_count(ruleset, tp, shards):
    # Llama 3.1 70B has 8 KV heads: TP 4 and 8 split them 4 and 8 ways; TP 16 keeps each head on two GPUs,
    # max(1, 8 // 16) = 1 head a GPU, so the cache splits 8 ways, not 16 (the old rule divided by tp).
    v = evaluate({**BASE, "model": "llama-3.1-70b", "gpu_count": tp, "tensor_parallel": tp}, ruleset).values
    assert v["kv_tp_shards"] == shards
    assert v["kv_capacity_tokens"] == math.floor(v["kv_capacity_gb"] * 1e9 * shards / v["kv_cache_bytes_per_token"])
