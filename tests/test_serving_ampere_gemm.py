"""Serving iteration multiplies on an A100-class GPU reach a larger share of its peak than on Hopper; a prompt's do not."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Llama 3.1 8B in BF16 on one GPU under TensorRT-LLM (the stacks' reference, stack_gemm 1). The training shares, the
# serving factors and the layer's shape factor are given so the arithmetic is by hand.
SHARES = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-8b", "gpu_count": 1,
          "precision": "bf16", "serving_engine": "tensorrt-llm", "prompt_tokens": 1024, "output_tokens": 128,
          "concurrency": 16, "gemm_share_ampere": 0.7, "gemm_share_hopper": 0.7, "serving_gemm_factor": 0.8,
          "serving_size_factor": 1.0, "prompt_gemm_factor": 1.2}


def test_an_a100_runs_an_iterations_multiplies_at_the_fitted_ampere_gain(ruleset):
    # 0.7 (training share) x 0.8 (serving factor) x 1 (TensorRT-LLM) x 1 (shape) = 0.56, and an iteration's
    # 0.56 x 1.14 (serving_gemm_ampere) = 0.6384
    v = evaluate({**SHARES, "gpu": "A100-80GB"}, ruleset).values
    assert v["serving_gemm_ampere_used"] == pytest.approx(1.14)
    assert v["serving_gemm_share"] == pytest.approx(0.56, abs=1e-4)
    assert v["iteration_gemm_share"] == pytest.approx(0.6384, abs=1e-4)


def test_an_a100_runs_a_whole_prompt_at_the_same_share_as_other_gpus(ruleset):
    # the prompt's share leaves the gain out: 0.56 x 1 (16-bit weights) x 1.2 (prompt_gemm_factor) = 0.672,
    # the same as on an H100 (0.7 x 0.8 x 1.2)
    a100 = evaluate({**SHARES, "gpu": "A100-80GB"}, ruleset).values
    h100 = evaluate({**SHARES, "gpu": "H100"}, ruleset).values
    assert a100["prompt_gemm_share"] == pytest.approx(0.672, abs=1e-4)
    assert h100["prompt_gemm_share"] == pytest.approx(0.672, abs=1e-4)


def test_a_hopper_gpu_keeps_the_serving_factor_alone(ruleset):
    # 0.7 x 0.8 x 1 x 1 = 0.56: the gain is the Ampere family's only
    v = evaluate({**SHARES, "gpu": "H100"}, ruleset).values
    assert v["serving_gemm_ampere_used"] == 1
    assert v["iteration_gemm_share"] == pytest.approx(0.56, abs=1e-4)


def test_a_geforce_ampere_card_is_the_consumer_family(ruleset):
    # An RTX 3090 is an Ampere chip but the consumer family (compute.yaml gpu_family), whose share is the A100's
    # training share x its family factor (1): 0.7 x 0.8 = 0.56, without the data-centre parts' gain.
    v = evaluate({**SHARES, "gpu": "3090"}, ruleset).values
    assert v["gpu_family"] == "consumer"
    assert v["iteration_gemm_share"] == pytest.approx(0.56, abs=1e-4)


def test_an_intake_utilization_replaces_the_gain_with_the_fitted_shares(ruleset):
    # utilization 0.5 is the iteration's share as given, and a prompt's is 0.5 x 1.2 = 0.6, on an A100 as elsewhere
    v = evaluate({**SHARES, "gpu": "A100-80GB", "utilization": 0.5}, ruleset).values
    assert v["serving_gemm_ampere_used"] == 1
    assert v["iteration_gemm_share"] == pytest.approx(0.5)
    assert v["prompt_gemm_share"] == pytest.approx(0.6, abs=1e-4)
