"""The kernels a serving stack runs quantised weights through: TGI's EETQ against its AWQ, and AWQ's read rate."""

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


# Reading the weights at batch 1 (rules/serving.yaml, stack_weight_read). The reference shares are given so the
# arithmetic is by hand: 4-bit weights at 0.5 of the memory bandwidth, 16-bit ones at 0.8.
SHARES = {"bandwidth_share_quantized": 0.5, "bandwidth_share_16bit": 0.8}


@pytest.mark.parametrize("stack", ["tgi", "transformers"])
def test_awq_weights_through_the_unfused_gemm_kernel_read_at_its_own_rate(ruleset, stack):
    # TGI 1.x's WQLinear and Transformers' AWQ layers (AutoAWQ's WQLinear_GEMM) both call llm-awq's
    # gemm_forward_cuda(..., 8) for every batch: the AWQ row, 0.66 (fitted on three sources):
    # 0.5 x 0.66 = 0.33 of the bandwidth. The checkpoint's 16-bit output head still reads at 0.8 x 1.
    awq = {**TGI, **SHARES, "serving_engine": stack, "precision": "fp16", "weight_precision": "awq"}
    v = evaluate(awq, ruleset).values
    assert v["stack_weight_read"] == pytest.approx(0.66)
    assert v["weight_read_share"] == pytest.approx(0.33)
    assert v["weight_read_share_16bit"] == pytest.approx(0.8)


def test_other_quantised_weights_keep_their_stacks_rate(ruleset):
    # The AWQ row is the kernel's, not the stack's: TGI's EETQ 8-bit weights read at the reference 0.5 x 1, and
    # AutoAWQ's fused modules (fused QKV and gate-up projections) at their own row, 0.5 x 1.76 = 0.88.
    eetq = evaluate({**TGI, **SHARES, "precision": "bf16", "weight_precision": "int8"}, ruleset).values
    fused = evaluate({**TGI, **SHARES, "serving_engine": "autoawq", "precision": "fp16", "weight_precision": "awq"},
                     ruleset).values
    assert eetq["weight_read_share"] == pytest.approx(0.5)
    assert fused["weight_read_share"] == pytest.approx(0.88)


def test_an_awq_precision_keeps_the_checkpoints_16bit_head_at_the_16bit_rate(ruleset):
    # An intake may name AWQ as the precision itself (no separate weight precision): the AWQ row still reads the
    # 4-bit weights at 0.5 x 0.66 = 0.33, and the 16-bit output head, which is not AWQ, at 0.8 x 1.
    v = evaluate({**TGI, **SHARES, "precision": "awq"}, ruleset).values
    assert v["weight_read_share"] == pytest.approx(0.33)
    assert v["weight_read_share_16bit"] == pytest.approx(0.8)
