"""A tensor-parallel all-reduce at the size of its message: the engine's one-shot kernel, its two-shot kernel, or NCCL."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Llama 3.1 70B (d_model 8,192, 80 layers) in FP8 on 8 H100 at TP 8. One all-reduce carries the layer output of
# every token of the batch: batch x 8,192 x 2 bytes. NVLink 4 moves 900 / 2 = 450 GB/s each way, a ring all-reduce
# reaches 0.8 of it: 360 GB/s of bus bandwidth (tp_allreduce_share). The old rules charged every message
# 10 us + 2(n - 1)/n x bytes / 360 GB/s whatever its size.
H100_TP8 = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-70b", "gpu": "H100",
            "gpu_count": 8, "tensor_parallel": 8, "precision": "fp8", "prompt_tokens": 128, "output_tokens": 128}


def _allreduce_us(engine: str, batch: int, ruleset, **more) -> float:
    v = evaluate({**H100_TP8, "serving_engine": engine, "concurrency": batch, **more}, ruleset).values
    assert v["batch_per_replica"] == batch
    return v["allreduce_decode_s"] * 1e6


def test_a_small_message_is_one_shot_and_reads_every_peer(ruleset):
    # Batch 16: 16 x 8,192 x 2 = 262,144 bytes, under TensorRT-LLM's 500 kB one-shot limit at eight GPUs. Every
    # GPU reads the whole message from its 7 peers: 10 us + 7 x 262,144 / 360e9 s = 10 + 5.097 = 15.097 us
    # (old rules: 10 + 1.75 x 262,144 / 360e9 = 11.274 us).
    assert _allreduce_us("tensorrt-llm", 16, ruleset) == pytest.approx(15.097, abs=0.01)


def test_tensorrt_llm_hands_a_megabyte_to_nccl(ruleset):
    # Batch 64: 1,048,576 bytes, above 500 kB: NCCL, in the protocol its cost model finds fastest (tuning.cc),
    # ring of 8 (14 steps):
    #   LL:     6.6 + 0.6 x 14 = 15.0 us + 1.75 x 1,048,576 / 141e9 (LL's Hopper cap) = 15.0 + 13.014 = 28.014 us
    #   LL128: 14.0 + 1.9 x 14 = 40.6 us + 1.75 x 1,048,576 / (0.92 x 360e9) = 40.6 + 5.540 = 46.140 us
    #   Simple: 8.4 + 3.4 x 14 = 56.0 us + 1.75 x 1,048,576 / 360e9 = 56.0 + 5.097 = 61.097 us
    # -> 28.014 us (old rules: 10 + 5.097 = 15.097 us).
    assert _allreduce_us("tensorrt-llm", 64, ruleset) == pytest.approx(28.014, abs=0.01)


def test_vllm_runs_its_two_shot_kernel_in_the_middle(ruleset):
    # The same megabyte under vLLM: above its one-stage limit at eight GPUs (256 kB), within its 8 MiB buffer, so
    # its two-stage kernel: 15 us + 1.75 x 1,048,576 / 360e9 = 15 + 5.097 = 20.097 us.
    assert _allreduce_us("vllm", 64, ruleset) == pytest.approx(20.097, abs=0.01)


def test_a_large_message_pays_nccls_fixed_time(ruleset):
    # Batch 2,048: 33,554,432 bytes, beyond every engine buffer: NCCL.
    #   LL128: 40.6 + 1.75 x 33,554,432 / (0.92 x 360e9) = 40.6 + 177.296 = 217.896 us
    #   Simple: 56.0 + 1.75 x 33,554,432 / 360e9 = 56.0 + 163.111 = 219.111 us; LL: 15 + 416.45 us
    # -> 217.896 us (old rules: 10 + 163.111 = 173.111 us).
    assert _allreduce_us("tensorrt-llm", 2048, ruleset) == pytest.approx(217.896, abs=0.02)


def test_two_gpus_are_unchanged(ruleset):
    # At TP 2 the one-shot kernel moves (n - 1) = 1 message per GPU, as many bytes as a ring (2(n - 1)/n = 1):
    # 10 + 1,048,576 / 360e9 s = 10 + 2.913 = 12.913 us, as before.
    assert _allreduce_us("tensorrt-llm", 64, ruleset, gpu_count=2, tensor_parallel=2) == pytest.approx(12.913, abs=0.01)


def test_the_iteration_pays_two_all_reduces_per_layer(ruleset):
    v = evaluate({**H100_TP8, "serving_engine": "tensorrt-llm", "concurrency": 64}, ruleset).values
    assert v["tp_sync_s"] == pytest.approx(2 * 80 * v["allreduce_step_s"], rel=1e-9)
