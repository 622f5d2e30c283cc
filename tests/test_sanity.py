"""Physical limits (rules/sanity.yaml): no impossible figure reaches a quote unremarked, and `rules test` fails one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.calc.evaluate import evaluate
from engine.calc.ruleset import load_ruleset
from engine.intake.read import read
from engine.paths import SAMPLES_DIR
from tests.conftest import ROOT

BERT = {"customer": "Test Co.", "workload": "pretraining", "gpu": "V100", "precision": "fp16", "gpu_count": 8,
        "utilization": 1.0, "scaling_efficiency": 1.0, "flops_per_sample": 180e9, "dataset_gb": 100,
        "sample_kb": 100, "epochs": 10, "model": "custom", "params_billion": 0.11}
LLAMA_DECODE = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-2-7b", "gpu": "H100",
                "gpu_count": 1, "precision": "bf16", "prompt_tokens": 512, "output_tokens": 128, "concurrency": 1}

MINIMAX = {"customer": "Test Co.", "workload": "online-inference", "model": "custom", "params_billion": 228.69,
           "active_params_billion": 11.03, "layers": 62, "hidden_size": 3072, "attention_heads": 48, "kv_heads": 8,
           "vocab_size": 200064, "gpu": "MI300X", "gpu_count": 2, "precision": "fp8", "prompt_tokens": 1000,
           "output_tokens": 1000, "concurrency": 1}


def _impossible(results) -> set[str]:
    return {w.code for w in results.warnings if w.code.startswith("impossible_")}


def test_tokens_follow_the_stated_flops_per_sample_not_a_default_length(ruleset):
    values = evaluate(BERT, ruleset).values
    # 180e9 FLOP per sample ÷ (6 × 0.11e9 FLOP per token) = 272.7 tokens per sample;
    # 100 GB ÷ 100 KB = 1e6 samples, × 10 epochs → 2.727e9 tokens (not 4,096 × 1e7 = 4.1e10)
    assert values["tokens_per_sample_used"] == pytest.approx(180e9 / (6 * 0.11e9))
    assert values["training_tokens"] == pytest.approx(1e6 * 10 * 180e9 / (6 * 0.11e9))
    # at 100% of the V100's 125 TFLOPS the rate is the ceiling itself, 125e12 ÷ 6.6e8 = 189,394 tokens/s
    assert values["tokens_per_s_per_gpu"] == pytest.approx(125e12 / (6 * 0.11e9), rel=1e-6)
    assert not _impossible(evaluate(BERT, ruleset))


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES_DIR.glob("*.yaml")))
def test_no_shipped_sample_crosses_a_physical_limit(ruleset, name):
    assert not _impossible(evaluate(read(SAMPLES_DIR / name), ruleset))


def _broken(home, file: str, old: str, new: str):
    path = home / "rules" / file
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return load_ruleset(home / "rules", home / "catalogs")


@pytest.mark.parametrize("file, old, new, intake, code", [
    # a slip that makes training ten times faster than the GPU's peak allows
    ("compute.yaml", "formula: training_tokens / (training_time_hours * goodput_used * 3600) / gpu_count",
     "formula: 10 * training_tokens / (training_time_hours * goodput_used * 3600) / gpu_count",
     BERT, "impossible_training_rate"),
    # decode ten times faster than reading 13.5 GB of weights at 3,350 GB/s (4.0 ms) allows
    ("inference.yaml", "formula: if(repeat_waves, (1 - first_wave_share) * later_wave_tpot_s",
     "formula: 0.1 * if(repeat_waves, (1 - first_wave_share) * later_wave_tpot_s", LLAMA_DECODE,
     "impossible_decode_speed"),
    # a first token a thousand times sooner: its pass reads the 13.5 GB of weights at least once, 4.0 ms at 3,350
    # GB/s (the prompt's 2 x 6.7 G x 512 = 6.9 TFLOP would take 3.5 ms even at the H100's 1,979 dense FP8 TFLOPS)
    ("inference.yaml", "formula: ((1 - first_wave_share) * (later_ttft_s + batch_queue_s) + first_wave_share * (wave_request_ttft_s + batch_queue_s / 2)) * 1000",
     "formula: ((1 - first_wave_share) * (later_ttft_s + batch_queue_s) + first_wave_share * (wave_request_ttft_s + batch_queue_s / 2)) * 1000 / 1000",
     LLAMA_DECODE, "impossible_first_token"),
    # the slip this guard was written after: a custom mixture of experts without expert counts had its experts counted
    # twice over, 2 x (228.69 - 11.03) = 435.3 B, and a step of 256 requests, which touches every expert, read them
    # all: nearly twice the model
    ("model.yaml", "formula: if(is_moe, min((params - active_params) / max(1 - moe_routed_share, 0.01), params), 0)",
     "formula: if(is_moe, 2 * (params - active_params), 0)", {**MINIMAX, "concurrency": 256}, "impossible_weight_read"),
])
def test_a_rule_slip_past_a_limit_is_warned_in_the_quote_and_fails_rules_test(home_copy, file, old, new,
                                                                              intake, code):
    ruleset = _broken(home_copy, file, old, new)
    assert code in _impossible(evaluate(intake, ruleset))
    proc = subprocess.run([sys.executable, "-m", "engine", "rules", "test", str(home_copy)], capture_output=True,
                          text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "past a physical limit" in proc.stdout + proc.stderr


def test_a_first_token_range_never_reaches_below_the_prompts_arithmetic(ruleset):
    # Llama 3.1 70B in FP8 at TP 8 on H100 under TensorRT-LLM, one request: its first-token band is several-fold (4.7:
    # TensorRT-LLM's held-out FP8 first tokens under load on several Hopper GPUs). The prompt alone is prefill_flops =
    # 2 x 69.5 G multiplying parameters x 2,000 tokens + attention ≈ 2.83e14 FLOPs; shared by 8 GPUs at the H100's
    # fastest dense rate (FP8, 1,979 TFLOPS) that is 17.9 ms — no first token comes sooner, so the range stops there
    values = {**LLAMA_DECODE, "model": "llama-3.1-70b", "precision": "fp8", "gpu_count": 8, "tensor_parallel": 8,
              "serving_engine": "tensorrt-llm", "prompt_tokens": 2000, "output_tokens": 400, "concurrency": 1}
    v = evaluate(values, ruleset, only=["ttft_ms", "ttft_ms_low", "floor_ttft_ms", "first_token_band",
                                        "prefill_flops"]).values
    floor = v["prefill_flops"] / (8 * 1979e12) * 1000
    assert 2.82e14 < v["prefill_flops"] < 2.86e14 and v["floor_ttft_ms"] == pytest.approx(floor)
    assert v["ttft_ms"] / (1 + v["first_token_band"]) < floor          # the band alone would go past it
    assert v["ttft_ms_low"] == pytest.approx(floor) and floor < v["ttft_ms"]
