"""vLLM's and SGLang's expert layers on AMD Instinct: a fixed time per layer and the expert multiplies' extra time.
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

BASE = {"customer": "Test Co.", "workload": "online-inference", "model": "deepseek-v3", "gpu_count": 8,
        "tensor_parallel": 8, "precision": "fp8", "concurrency": 32, "prompt_tokens": 128, "output_tokens": 32}
KEYS = ["serving_moe_factor", "moe_expert_share", "stack_moe_gemm", "moe_fused_layers_ms", "n_layers", "gemm_step_s"]


def serve(ruleset, **intake):
    return evaluate({**BASE, **intake}, ruleset, only=KEYS).values


def test_vllm_on_mi300x_pays_its_expert_layers_fixed_time_and_slower_expert_multiplies(ruleset):
    # DeepSeek-V3: 61 layers x 0.055 ms = 3.355 ms of fixed expert-layer time an iteration with a current build
    # (fitted on AMD34, serving.yaml), 61 x 0.38 = 23.18 ms with an early-2025 one (NVIDIA: x 0.027 = 1.647 ms).
    # Its experts hold 55.3% of a token's compute; the expert multiplies take moe_overhead 0.66 more than the dense
    # rate everywhere, and on ROCm 2.0 more (8.1 in early-2025 builds): 1 + 0.553 x (0.66 + 2.0) = 2.47, against
    # 1 + 0.553 x 0.66 = 1.365 on NVIDIA
    amd = serve(ruleset, gpu="MI300X", serving_engine="vllm")
    early = serve(ruleset, gpu="MI300X", serving_engine="vllm", serving_engine_release="vllm-0.7-or-earlier")
    nvidia = serve(ruleset, gpu="H200", serving_engine="vllm")
    assert amd["n_layers"] == 61 and amd["moe_expert_share"] == pytest.approx(0.5527, abs=1e-4)
    assert amd["moe_fused_layers_ms"] == pytest.approx(61 * 0.055)
    assert early["moe_fused_layers_ms"] == pytest.approx(61 * 0.38)
    assert nvidia["moe_fused_layers_ms"] == pytest.approx(61 * 0.027)
    assert amd["serving_moe_factor"] == pytest.approx(1 + amd["moe_expert_share"] * (0.66 + 2.0))
    assert early["serving_moe_factor"] == pytest.approx(1 + amd["moe_expert_share"] * (0.66 + 8.1))
    assert nvidia["serving_moe_factor"] == pytest.approx(1 + nvidia["moe_expert_share"] * 0.66)
    # SGLang runs the same Triton kernels on ROCm; TensorRT-LLM does not run on AMD, LMDeploy's kernels have no
    # published AMD timing: the dense rate's 0 extra
    assert serve(ruleset, gpu="MI300X", serving_engine="sglang")["stack_moe_gemm"] == 2.0
    assert serve(ruleset, gpu="MI300X", serving_engine="lmdeploy")["stack_moe_gemm"] == 0


def test_a_dense_model_on_amd_is_untouched(ruleset):
    # Llama 3.1 70B has no experts: no expert layer's fixed time and a factor of exactly 1, on any vendor
    dense = serve(ruleset, gpu="MI300X", serving_engine="vllm", model="llama-3.1-70b")
    assert dense["serving_moe_factor"] == 1 and dense["moe_fused_layers_ms"] == 0
