"""The kernel a serving stack multiplies quantised weights with: TGI's 8-bit weights (EETQ) against its 4-bit AWQ."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Yi 6B on one RTX 4090 under TGI, a 512-token prompt (ninehills' runs, validation/published.yaml S14-I16/I18).
# The multiply shares are given so the arithmetic is by hand: a decode iteration's share 0.6, a whole prompt's
# plain multiplies 1.15 times that (prompt_gemm_factor).
TGI = {"customer": "Test Co.", "workload": "online-inference", "model": "yi-6b", "gpu": "4090", "gpu_count": 1,
       "serving_engine": "tgi", "prompt_tokens": 512, "output_tokens": 1, "concurrency": 1,
       "serving_gemm_share": 0.6, "prompt_gemm_factor": 1.15}


def test_eetq_8bit_weights_multiply_a_prompt_at_the_16bit_rate(ruleset):
    # EETQ's w8_a16_gemm is FasterTransformer's CUTLASS fpA_intB kernel: the int8 tile is converted to FP16 in
    # registers inside a tensor-core main loop, so a prompt runs as a 16-bit one: stack_dequant_gemm 1 and
    # prompt_gemm_share = 0.6 x 1 x 1.15 = 0.69 (below the 0.95 cap). The old rules took it at the unpacking
    # kernels' 0.61 without the large-GEMM factor: 0.6 x 0.61 = 0.366.
    v = evaluate({**TGI, "precision": "bf16", "weight_precision": "int8"}, ruleset).values
    assert v["gemm_weights"] == "dequantised"
    assert v["stack_dequant_gemm"] == pytest.approx(1.0)
    assert v["prompt_gemm_share"] == pytest.approx(0.69, abs=1e-4)


def test_tgi_awq_4bit_weights_still_unpack_inside_the_multiply(ruleset):
    # TGI 1.3's AWQLinear calls llm-awq's gemm_forward_cuda (split_k_iters 8), which unpacks the 4-bit weights in
    # the multiply: the unpacking row, 0.61 (fitted), and no large-GEMM factor: 0.6 x 0.61 = 0.366.
    v = evaluate({**TGI, "precision": "fp16", "weight_precision": "awq"}, ruleset).values
    assert v["stack_dequant_gemm"] == pytest.approx(0.61)
    assert v["prompt_gemm_share"] == pytest.approx(0.366, abs=1e-4)


def test_the_16bit_model_is_unchanged(ruleset):
    # BF16 weights: native, 0.6 x 1 x 1.15 = 0.69, as before.
    v = evaluate({**TGI, "precision": "bf16"}, ruleset).values
    assert v["gemm_weights"] == "native" and v["prompt_gemm_share"] == pytest.approx(0.69, abs=1e-4)
