"""TensorRT-LLM's prompts in an offline job: in-flight batching packs the joining prompts' tokens into the running
batch's multiplies, which then run at a whole prompt's share (inference.yaml gemm_step_s, serving.yaml
stack_packed_prompt_gemm; docs/accuracy.md, serve17)."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Llama 3.1 8B in BF16 on one H100, 100 requests decoding, 2,048-token prompts and 128-token answers: in steady
# state 100 x 2,048 / 128 = 1,600 prompt tokens join each iteration
PACKED = {"customer": "Test Co.", "workload": "offline-inference", "model": "llama-3.1-8b", "precision": "bf16",
          "gpu": "H100", "gpu_count": 1, "tensor_parallel": 1, "prompt_tokens": 2048, "output_tokens": 128,
          "requests_total": 3000, "batch_per_replica": 100, "serving_gemm_share": 0.6, "prompt_gemm_factor": 1.2}


def test_tensorrt_llm_multiplies_the_joining_prompts_at_a_whole_prompts_share(ruleset):
    # 7.505e9 multiply parameters (8.03 B less the 0.525 B token embedding, looked up not read), 2 FLOPs each a
    # token, at 0.6 of 989.5 TFLOPS = 593.7 TFLOP/s. TensorRT-LLM packs the 1,600 prompt tokens into the same
    # multiplies, at the whole-prompt share 0.6 x 1.2 = 0.72: 2 x 7.505e9 x (100 + 1,600 x 0.6 / 0.72) / 593.7e12
    # = 2 x 7.505e9 x 1,433.333 / 593.7e12 = 36.237 ms of arithmetic. The old rule (and vLLM's): all 1,700 tokens
    # at 0.6, 2 x 7.505e9 x 1,700 / 593.7e12 = 42.979 ms.
    trt = evaluate({**PACKED, "serving_engine": "tensorrt-llm"}, ruleset).values
    vllm = evaluate({**PACKED, "serving_engine": "vllm", "stack_gemm": 1}, ruleset).values
    assert trt["stack_packed_prompt_gemm"] is True and vllm["stack_packed_prompt_gemm"] is False
    assert trt["prefill_tokens_per_iteration"] == pytest.approx(1600)
    assert trt["gemm_step_s"] - trt["weight_read_s"] == pytest.approx(0.036237, rel=2e-3)
    assert vllm["gemm_step_s"] - vllm["weight_read_s"] == pytest.approx(0.042979, rel=2e-3)
