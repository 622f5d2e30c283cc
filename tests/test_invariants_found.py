"""The failures the invariant suite (tests/test_invariants.py) found, kept as regular tests.

Each intake below is the minimal one Hypothesis shrank a failure to, on the code before issue 22's
fixes; the invariant it broke is named beside it. They run the same checks as the generated ones.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import test_invariants as invariants

FOUND = [
    # Gaudi 2 has no FP16 rate: training time, peak and effective rate came out None ("None TFLOPS")
    ("test_every_figure_a_customer_reads_is_a_real_number_or_withheld",
     {"customer": "Invariant Co.", "workload": "pretraining", "model": "qwen2.5-0.5b", "gpu": "intel-gaudi2",
      "precision": "fp16", "gpu_count": 1, "training_tokens_billion": 0.1}),
    ("test_physics_a_feasible_quote_stays_within_the_gpus_peak_and_bandwidth",
     {"customer": "Invariant Co.", "workload": "offline-inference", "model": "llama-2-7b", "gpu": "intel-gaudi2",
      "precision": "fp16", "gpu_count": 2, "prompt_tokens": 200, "output_tokens": 500, "requests_total": 1000}),
    # no quote said whether it could run at all
    ("test_a_configuration_that_cannot_run_says_so_and_quotes_nothing_as_if_it_ran",
     {"customer": "Invariant Co.", "workload": "pretraining", "model": "qwen2.5-0.5b",
      "gpu": "nvidia-v100-sxm2-32gb", "precision": "bf16", "gpu_count": 1, "training_tokens_billion": 0.1}),
    # a 405B full fine-tune on four V100s quoted days and dollars while needing hundreds of GPUs
    ("test_a_configuration_that_cannot_run_says_so_and_quotes_nothing_as_if_it_ran",
     {"customer": "Invariant Co.", "workload": "fine-tuning", "model": "llama-3.1-405b",
      "gpu": "nvidia-v100-sxm2-32gb", "precision": "fp8", "gpu_count": 4, "finetune_method": "full",
      "samples": 1_000_000, "tokens_per_sample": 256}),
    # every other GPU among the alternatives was charged the typed 9 USD per GPU-hour
    ("test_alternatives_charge_each_gpu_its_own_price",
     {"customer": "Invariant Co.", "workload": "pretraining", "model": "qwen2.5-0.5b",
      "gpu": "nvidia-v100-sxm2-32gb", "precision": "bf16", "gpu_count": 1, "training_tokens_billion": 0.1}),
    # the scaling table kept the quoted layout at every count; the sweep planned each count afresh
    ("test_every_row_of_the_scaling_table_is_what_the_sweep_says_for_that_count",
     {"customer": "Invariant Co.", "workload": "offline-inference", "model": "llama-2-7b",
      "gpu": "nvidia-rtx-4090", "precision": "bf16", "gpu_count": 4, "prompt_tokens": 3000,
      "output_tokens": 1, "requests_total": 1000}),
    ("test_every_row_of_the_scaling_table_is_what_the_sweep_says_for_that_count",
     {"customer": "Invariant Co.", "workload": "fine-tuning", "model": "llama-3.1-8b", "gpu": "nvidia-l40s",
      "precision": "fp32", "gpu_count": 64, "finetune_method": "qlora", "samples": 1000,
      "tokens_per_sample": 256}),
]


@pytest.mark.parametrize(("invariant", "intake"), FOUND, ids=[f"{n[5:45]}-{i}" for i, (n, _) in enumerate(FOUND)])
def test_a_failure_the_invariants_found_stays_fixed(invariant, intake):
    # run inside Hypothesis (on just this intake), where the invariant's assume() belongs: a found case that
    # no longer meets an assumption fails as Unsatisfiable instead of passing unchecked
    check = getattr(invariants, invariant).hypothesis.inner_test
    settings(max_examples=1, database=None, deadline=None)(given(intake=st.just(intake))(check))()
