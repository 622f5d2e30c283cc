"""Serving multiplies on an A100-class GPU reach a larger share of its peak than on Hopper (serving_gemm_ampere)."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Llama 3.1 8B in BF16 on one GPU under TensorRT-LLM (the stacks' reference, stack_gemm 1). The training shares and
# the serving factor are given so the arithmetic is by hand; the layer's shape factor is given as 1.
SHARES = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-8b", "gpu_count": 1,
          "precision": "bf16", "serving_engine": "tensorrt-llm", "prompt_tokens": 1024, "output_tokens": 128,
          "concurrency": 16, "gemm_share_ampere": 0.7, "gemm_share_hopper": 0.7, "serving_gemm_factor": 0.8,
          "serving_size_factor": 1.0}


def test_an_a100_multiplies_at_the_fitted_ampere_factor(ruleset):
    # 0.7 (training share) x 0.8 (serving factor) x 1 (TensorRT-LLM) x 1 (shape) x 1.16 (serving_gemm_ampere) = 0.6496
    v = evaluate({**SHARES, "gpu": "A100-80GB"}, ruleset).values
    assert v["serving_gemm_ampere"] == pytest.approx(1.16)
    assert v["serving_gemm_share"] == pytest.approx(0.6496, abs=1e-4)


def test_a_hopper_gpu_keeps_the_serving_factor_alone(ruleset):
    # 0.7 x 0.8 x 1 x 1 = 0.56: the Ampere factor applies to the Ampere family only
    v = evaluate({**SHARES, "gpu": "H100"}, ruleset).values
    assert v["serving_gemm_share"] == pytest.approx(0.56, abs=1e-4)


def test_a_geforce_ampere_card_is_the_consumer_family(ruleset):
    # An RTX 3090 is an Ampere chip but the consumer family (compute.yaml gpu_family), whose share is the A100's
    # training share x its family factor (1): 0.7 x 0.8 = 0.56, no serving factor of the data-centre parts.
    v = evaluate({**SHARES, "gpu": "3090"}, ruleset).values
    assert v["gpu_family"] == "consumer"
    assert v["serving_gemm_share"] == pytest.approx(0.56, abs=1e-4)
