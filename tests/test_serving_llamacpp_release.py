"""llama.cpp reads the weights of one token's step faster since 2025 than its 2023-2024 builds did; its Python bindings
run the build they bundle."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate
from engine.intake.validate import validate
from tests.test_intake_kit import catalogs, serving_release_intake

# Llama 3 8B in GGUF Q4_0, one sequence on an RTX 4090 (llama-bench's tg128). The reference bandwidth shares are
# given so the arithmetic is by hand.
ONE_STREAM = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3-8b", "gpu": "4090",
              "gpu_count": 1, "precision": "fp16", "weight_precision": "q4_0", "serving_engine": "llama.cpp",
              "concurrency": 1, "prompt_tokens": 1, "output_tokens": 128,
              "bandwidth_share_quantized": 0.6, "bandwidth_share_16bit": 0.7}


def test_todays_llama_cpp_reads_the_weights_at_its_fitted_speed(ruleset):
    # no release given: the current one. 0.6 (reference share for 4-bit weights) x 1.38 = 0.828; the 16-bit
    # output head 0.7 x 1.38 = 0.966
    v = evaluate(ONE_STREAM, ruleset).values
    assert v["serving_release_used"] == "current"
    assert v["stack_weight_read"] == pytest.approx(1.38)
    assert v["weight_read_share"] == pytest.approx(0.828)
    assert v["weight_read_share_16bit"] == pytest.approx(0.966)


def test_a_2024_build_reads_them_slower_and_its_step_takes_longer(ruleset):
    # 0.6 x 1.06 = 0.636 and 0.7 x 1.06 = 0.742: each weight byte takes 1.38 / 1.06 = 1.30 times as long to read
    now = evaluate(ONE_STREAM, ruleset).values
    old = evaluate({**ONE_STREAM, "serving_engine_release": "llama.cpp-2024-or-earlier"}, ruleset).values
    assert old["stack_weight_read"] == pytest.approx(1.06)
    assert old["weight_read_share"] == pytest.approx(0.636)
    assert old["weight_read_share_16bit"] == pytest.approx(0.742)
    assert old["weight_read_s"] == pytest.approx(now["weight_read_s"] * 1.38 / 1.06, rel=1e-9)
    assert old["tpot_ms"] > now["tpot_ms"]


def test_other_stacks_ignore_a_llama_cpp_release(ruleset):
    # vLLM's row (0.89) holds whatever release is named: the release column matches llama.cpp's rows only
    vllm = {**ONE_STREAM, "serving_engine": "vllm", "weight_precision": "awq"}
    assert evaluate(vllm, ruleset).values["stack_weight_read"] == pytest.approx(0.89)


@pytest.mark.parametrize("engine, problems", [("llama-cpp-python", []), ("llama.cpp", []),
                                              ("exllamav2", ["release_stack"])])
def test_the_python_bindings_take_the_release_of_the_llama_cpp_they_bundle(tmp_path, engine, problems):
    intake = serving_release_intake(tmp_path, engine, "llama.cpp 2024", "A100-80GB", "weight_precision: q4_0\n")
    assert [p.code for p in validate(intake, catalogs())] == problems
    if not problems:
        assert intake.values["serving_engine_release"] == "llama.cpp-2024-or-earlier"
