"""Meta's FP8 checkpoints (precision fp8-ffn) quantise only the feed-forward weights: a real intake through
the real pipeline weighs, reads and multiplies them as stored, and the intake takes the names people type."""

from __future__ import annotations

import json

import pytest

from engine.job import run_job

INTAKE = """\
customer: Test
workload: offline-inference
serving_engine: vllm
model: llama-3.1-405b
gpu: H100
gpu_count: 8
tensor_parallel: 8
precision: {precision}
concurrency: 64
prompt_tokens: 128
output_tokens: 2048
requests_total: 64
"""


def quote(tmp_path, name: str, precision: str, ruleset) -> dict:
    source = tmp_path / f"{name}.yaml"
    source.write_text(INTAKE.format(precision=precision), encoding="utf-8")
    job = run_job(source, tmp_path / "out", ruleset=ruleset, formats=("json",))
    assert job.ok, job.problems
    return json.loads((tmp_path / "out" / f"{name}.quote.json").read_text(encoding="utf-8"))


def test_meta_fp8_weighs_what_dstack_measured(tmp_path, ruleset):
    # Llama 3.1 405B (405.85e9 parameters, 126 layers, h 16,384, 8 KV heads of 128, vocabulary 128,256):
    # BF16: embedding + head 2 · 128,256 · 16,384 = 4.20269e9, attention 126 · 16,384 · 2 · (16,384 + 1,024)
    # = 71.87359e9, first and last layers' feed-forward 2/126 · (405.85e9 − 4.20269e9 − 71.87359e9) = 5.23450e9
    # → 81.31079e9 at 2 bytes; the other 324.53921e9 at 1 byte → 487.16 GB (dstack's vLLM log: 487.63 GB).
    # Every linear layer in FP8 instead: (405.85e9 − 4.20269e9) + 2 · 4.20269e9 = 410.05 GB.
    meta = quote(tmp_path, "meta", "fp8-ffn", ruleset)["results"]
    every = quote(tmp_path, "every", "fp8", ruleset)["results"]
    assert meta["weights_total_gb"] == pytest.approx(487.1608, rel=1e-5)
    assert every["weights_total_gb"] == pytest.approx(410.0527, rel=1e-5)
    assert meta["weights_gb"] == pytest.approx(487.1608 / 8, rel=1e-5)
    # the extra weights leave less for the KV cache: (487.16 − 410.05) / 8 = 9.64 GB less per GPU
    assert every["kv_capacity_gb"] - meta["kv_capacity_gb"] == pytest.approx((487.1608 - 410.0527) / 8, rel=1e-4)
    # both multiply at the FP8 rate; Meta's layout keeps 79.21e9 of its 403.75e9 multiply parameters at the
    # 16-bit rate (half of FP8's on an H100), so its multiplies take 1 + 0.19619 of FP8's time, not 1 + 0.0052
    assert meta["peak_basis"] == every["peak_basis"] == "fp8"
    assert meta["serving_16bit_extra"] == pytest.approx(0.19619, rel=1e-4)
    assert every["serving_16bit_extra"] == pytest.approx(2.10135 / 403.74865, rel=1e-4)
    # more bytes per step and more 16-bit arithmetic: slower than the every-layer FP8 checkpoint
    assert meta["output_tokens_per_s"] < every["output_tokens_per_s"]


@pytest.mark.parametrize("typed", ["fp8-ffn", "FBGEMM-FP8", "fp8_mixed", "meta-fp8"])
def test_the_intake_takes_the_names_people_type(tmp_path, ruleset, typed):
    doc = quote(tmp_path, "alias", typed, ruleset)
    assert doc["inputs"]["precision"] == "fp8-ffn"
