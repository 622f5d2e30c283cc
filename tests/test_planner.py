"""The planner, the alternatives and the sweep on hand-built cases whose answers follow from arithmetic."""

from __future__ import annotations

import math
import subprocess
import sys

import openpyxl
import pytest

from engine.calc.evaluate import evaluate
from engine.calc.planner import SHAPE, layout_candidates, plan_layout
from engine.calc.sweep import sweep
from tests.conftest import ROOT

# Llama-2-70B: 80 layers, 64 attention heads, 8 KV heads, 68.98e9 parameters (its config.json)
LLAMA70 = {"customer": "Test Co.", "workload": "pretraining", "model": "llama-2-70b", "precision": "bf16",
           "training_tokens_billion": 2000, "gpu": "nvidia-h100-sxm5-80gb", "gpu_count": 64}
# The README's example: Llama-2-7B on 2 T tokens on 256 A100-80GB, layout left to the planner
README = {"customer": "Example Co.", "workload": "pretraining", "model": "llama-2-7b",
          "training_tokens_billion": 2000, "precision": "bf16", "gpu": "nvidia-a100-sxm4-80gb",
          "gpu_count": 256}


def _rows(columns):
    n = len(next(iter(columns.values())))
    return [{k: (bool(v[i]) if v.dtype == bool else int(v[i])) for k, v in columns.items()} for i in range(n)]


def test_every_training_candidate_keeps_the_real_constraints(ruleset):
    values = {**LLAMA70, "global_batch_size": 1024}
    shape = evaluate(values, ruleset, only=SHAPE).values
    assert (shape["n_layers"], shape["n_heads"], shape["n_kv_heads"]) == (80, 64, 8)
    rows = _rows(layout_candidates(values, shape, {}, "pretraining"))
    assert len(rows) > 100
    for r in rows:
        tp, pp, cp = r["tensor_parallel"], r["pipeline_parallel"], r["context_parallel"]
        assert tp <= 8 and 64 % tp == 0 and 8 % tp == 0          # inside one 8-GPU server; divides the heads
        assert 80 % pp == 0 or (pp & (pp - 1)) == 0             # even split, or Megatron's uneven power of two
        assert 64 % (tp * pp * cp) == 0                          # data parallel = GPUs ÷ (TP × PP × CP), whole
        dp = 64 // (tp * pp * cp)
        assert 1024 % (dp * r["micro_batch_size"]) == 0          # micro-batch × DP × accumulation = global batch
        assert r["virtual_pipeline_stages"] == 1 or pp > 1


def test_a_head_count_that_eight_does_not_divide_never_gets_tensor_parallel_eight(ruleset):
    # 20 heads: TP may be 1, 2 or 4 (20 = 4 × 5), never 8
    values = {**LLAMA70, "model": "custom", "params_billion": 30, "layers": 48, "hidden_size": 6400,
              "attention_heads": 20, "gpu_count": 64}
    shape = evaluate(values, ruleset, only=SHAPE).values
    assert {r["tensor_parallel"] for r in _rows(layout_candidates(values, shape, {}, "pretraining"))} <= {1, 2, 4}
    assert plan_layout(values, ruleset).chosen["tensor_parallel"] in (1, 2, 4)


def test_the_readme_example_fits_and_lands_near_the_published_gpu_hours(ruleset):
    plan = plan_layout(README, ruleset)
    result = evaluate(README, ruleset, layout=plan.chosen).values
    assert plan.fits and result["fits_in_memory"]
    # Llama 2 paper (Touvron et al. 2023), Table 2: 184,320 A100-80GB GPU-hours for the 7B model
    assert result["gpu_hours"] == pytest.approx(184_320, rel=0.30)
    assert set(plan.by.values()) == {"planner"}


def test_a_gpu_that_cannot_fit_misses_memory_at_every_layout(ruleset):
    # 68.98e9 parameters × 16 bytes (bf16 weights and gradients, fp32 Adam moments and master copy)
    # = 1,104 GB; spread over all 8 GPUs at best (ZeRO-3) that is ≥ 138 GB per GPU, against 24 GiB
    result = sweep({**LLAMA70, "gpu_count": 8}, ruleset, {"gpu": ["nvidia-rtx-4090"], "gpu_count": [8]})
    row = result.table.iloc[0]
    assert not row["qualifies"] and "memory" in row["misses"]
    assert row["memory_per_gpu_gb"] >= 68.98e9 * 16 / 8 / 1e9
    assert result.failures() == {"memory": 1}


def test_the_deadline_rules_out_too_few_gpus_and_the_cheapest_that_meets_it_is_recommended(ruleset):
    values = {**README, "deadline_days": 40}
    result = sweep(values, ruleset, {"gpu_count": [64, 128, 256, 512]})
    by_count = {int(r["gpu_count"]): r for _, r in result.table.iterrows()}
    # 6 · 6.74e9 params · 2e12 tokens = 8.09e22 FLOP; 64 A100s at their full dense 312 TFLOPS would
    # still need 8.09e22 / (64 · 312e12) s = 46.9 days > 40: no layout can meet the deadline
    assert 6 * 6.74e9 * 2e12 / (64 * 312e12) / 86400 > 40
    assert "deadline" in by_count[64]["misses"]
    # 512 A100s need 5.9 days at the peak: they meet 40 days at any efficiency above 15%
    assert by_count[512]["qualifies"]
    # GPU-hours never fall as GPUs are added (scaling efficiency ≤ 1), so the cheapest configuration
    # that meets the deadline is the smallest count that does
    meeting = sorted(c for c, r in by_count.items() if r["qualifies"])
    best = result.qualifying.iloc[0]
    assert int(best["gpu_count"]) == meeting[0] and meeting[0] in (128, 256)
    assert [by_count[c]["cost_total"] for c in meeting] == sorted(by_count[c]["cost_total"] for c in meeting)


@pytest.mark.parametrize("values, grid", [
    ({**LLAMA70, "deadline_days": 60}, {"gpu": ["nvidia-h100-sxm5-80gb", "nvidia-a100-sxm4-80gb"],
                                        "gpu_count": [64, 256], "precision": ["bf16", "fp8"]}),
    ({"customer": "Test Co.", "workload": "offline-inference", "model": "llama-2-70b", "precision": "bf16",
      "gpu": "nvidia-h100-sxm5-80gb", "gpu_count": 8, "prompt_tokens": 1000, "output_tokens": 200,
      "requests_total": 1_000_000}, {"gpu": ["nvidia-h100-sxm5-80gb", "nvidia-l40s"], "gpu_count": [4, 8]}),
    ({"customer": "Test Co.", "workload": "online-inference", "model": "llama-3-8b", "precision": "bf16",
      "gpu": "nvidia-l40s", "gpu_count": 2, "prompt_tokens": 2000, "output_tokens": 300,
      "requests_per_second": 3}, {"gpu_count": [1, 2, 4]}),
    ({"customer": "Test Co.", "workload": "online-inference", "model": "deepseek-v3", "precision": "fp8",
      "gpu": "nvidia-h100-sxm5-80gb", "gpu_count": 16, "serving_engine": "vllm", "prompt_tokens": 1000,
      "output_tokens": 1000, "concurrency": 16}, {"gpu_count": [8, 16, 32]}),
])
def test_the_sweep_equals_the_planner_and_one_scenario_at_a_time(ruleset, values, grid):
    result = sweep(values, ruleset, grid)
    assert len(result.table) > 0
    for _, row in result.table.iterrows():
        scenario = {**values, "gpu": row["gpu"], "gpu_count": int(row["gpu_count"]), "precision": row["precision"]}
        plan = plan_layout(scenario, ruleset)
        assert row["layout_values"] == plan.chosen
        one = evaluate(scenario, ruleset, layout=plan.chosen).values
        for key in ("memory_per_gpu_gb", "cost_total", "training_time_days", "output_tokens_per_s", "ttft_ms"):
            if key in one and not (isinstance(row[key], float) and math.isnan(row[key])):
                assert row[key] == pytest.approx(one[key], rel=1e-12), key


def test_a_precision_the_gpu_lacks_is_left_out_not_repeated(ruleset):
    result = sweep(README, ruleset, {"gpu": ["nvidia-a100-sxm4-80gb", "nvidia-h100-sxm5-80gb"],
                                     "precision": ["bf16", "fp8"]})
    assert result.left_out == [("A100 SXM4 80GB", "fp8")]      # the A100 has no FP8 tensor cores
    assert set(zip(result.table["gpu"], result.table["precision"])) == {
        ("nvidia-a100-sxm4-80gb", "bf16"), ("nvidia-h100-sxm5-80gb", "bf16"), ("nvidia-h100-sxm5-80gb", "fp8")}


def test_seventy_b_offline_on_eight_h100_is_split_with_tensor_parallelism_and_the_quote_says_so(tmp_path):
    from engine.job import run_job
    intake = tmp_path / "offline-70b.yaml"
    intake.write_text("customer: Test Co.\nworkload: offline-inference\nmodel: llama-2-70b\nprecision: bf16\n"
                      "gpu: H100\ngpu_count: 8\nprompt_tokens: 1000\noutput_tokens: 200\n"
                      "requests_total: 1000000\n", encoding="utf-8")
    job = run_job(intake, tmp_path)
    assert job.ok, job.problems
    plan = job.results.plan
    # bf16 weights alone are 138 GB: one GPU (80 GB) cannot hold a replica, so TP ≥ 2
    assert plan.chosen["tensor_parallel"] >= 2 and plan.by["tensor_parallel"] == "planner"
    html = (tmp_path / "offline-70b.quote.html").read_text(encoding="utf-8")
    assert "Tensor parallel" in html and job.quote.layout_note in html
    # 8 GPUs ÷ TP: the copies of the model follow, and the quote says how many
    copies = next(line for line in job.quote.layout if line.key == "model_copies")
    assert int(copies.text) == 8 // plan.chosen["tensor_parallel"] and 'data-key="model_copies"' in html


def test_a_quote_that_cannot_meet_its_deadline_leads_with_a_configuration_that_can(tmp_path):
    from engine.job import run_job
    intake = tmp_path / "impossible.yaml"
    # 70B on 8 A100s: 1,104 GB of training state cannot fit in 8 × 80 GB, and the deadline is 30 days
    intake.write_text("customer: Test Co.\nworkload: pretraining\nmodel: llama-2-70b\nprecision: bf16\n"
                      "training_tokens_billion: 2000\ngpu: A100\ngpu_count: 8\ndeadline_days: 30\n",
                      encoding="utf-8")
    job = run_job(intake, tmp_path)
    assert job.ok, job.problems
    rows = job.quote.alternatives
    assert rows[0].meets_targets and not rows[0].requested
    assert any(r.requested and not r.meets_targets for r in rows)
    assert rows[0].data["meets_deadline"] and rows[0].data["fits_in_memory"]
    assert rows[0].configuration in (tmp_path / "impossible.quote.html").read_text(encoding="utf-8")


def _sizing(*args):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=180)


def test_sweep_says_why_nothing_qualifies_and_writes_its_table(tmp_path):
    base = tmp_path / "tight.yaml"
    base.write_text("customer: Test Co.\nworkload: pretraining\nmodel: llama-2-7b\nprecision: bf16\n"
                    "training_tokens_billion: 2000\ngpu: A100\ngpu_count: 8\ndeadline_days: 30\n", encoding="utf-8")
    proc = _sizing("sweep", base, "--gpu", "A100,4090", "--gpu-count", "8,16", "--precision", "bf16,fp8",
                   "-o", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    # A100 × {8, 16} at bf16 (it has no FP8) and the RTX 4090 × {8, 16} × {bf16, fp8}
    assert "6 configurations evaluated" in proc.stdout
    assert "Nothing qualifies: 6 miss the 30-day deadline." in proc.stdout
    assert "Left out: fp8 on A100 SXM4 80GB" in proc.stdout
    nearest = next(line for line in proc.stdout.splitlines() if line.startswith("Nearest: "))
    assert "16 × A100 SXM4 80GB at bf16" in nearest and "days against the 30-day deadline" in nearest
    sheet = openpyxl.load_workbook(tmp_path / "out" / "tight.sweep.xlsx")["Sweep"]
    assert sheet.max_row == 1 + 6 and sheet["A1"].value == "GPU"
    html = (tmp_path / "out" / "tight.sweep.html").read_text(encoding="utf-8")
    assert "A100 SXM4 80GB" in html and "misses the deadline" in html
    csv = (tmp_path / "out" / "tight.sweep.csv").read_text(encoding="utf-8").splitlines()
    assert len(csv) == 1 + 6 and "layout.tensor_parallel" in csv[0]
    assert "\r" not in proc.stderr          # no progress bar when stderr is not a terminal


@pytest.mark.parametrize("counts, words", [
    (",".join(str(n) for n in range(1, 101)), "at most 64 GPU counts at once (100 given)"),
    ("0,8", "GPU counts must be whole numbers from 1 to 10,000,000"),
    ("8,99999999999", "GPU counts must be whole numbers from 1 to 10,000,000"),
    ("eight", "GPU counts must be whole numbers"),
])
def test_a_hostile_or_huge_grid_is_refused_in_one_sentence(counts, words):
    proc = _sizing("sweep", ROOT / "samples" / "seed002-bert-base-8xv100.yaml", "--gpu-count", counts)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


DEEPSEEK_16 = {"customer": "Test Co.", "workload": "online-inference", "model": "deepseek-v3", "precision": "fp8",
               "gpu": "H100", "gpu_count": 16, "serving_engine": "vllm", "prompt_tokens": 1000, "output_tokens": 1000,
               "concurrency": 16}


def test_a_model_bigger_than_a_node_is_pipelined_one_stage_per_node(ruleset):
    # DeepSeek-V3 in FP8 is 673 GB of weights; one node of 8 H100s holds 8 x 80 GB (its weights' share of it, 60%:
    # 410 GB), so no tensor-parallel width within the node fits. Over 16 GPUs vLLM runs one pipeline stage per node,
    # each node's 8 GPUs splitting every layer (TP 8 x PP 2): 673 / 16 = 42 GB of weights a GPU
    plan = plan_layout(DEEPSEEK_16, ruleset)
    assert plan.fits
    assert (plan.chosen["tensor_parallel"], plan.chosen["pipeline_parallel"]) == (8, 2)
    values = evaluate(DEEPSEEK_16, ruleset, layout=plan.chosen).values
    assert values["fits_in_memory"] and values["memory_per_gpu_gb"] < 80


def test_one_node_too_small_says_so_and_a_stack_without_pipelines_is_not_given_one(ruleset):
    # 8 H100s cannot hold it at any layout; TGI shards by tensor parallelism only, so 16 GPUs do not help it either
    assert not plan_layout({**DEEPSEEK_16, "gpu_count": 8}, ruleset).fits
    tgi = plan_layout({**DEEPSEEK_16, "serving_engine": "tgi"}, ruleset)
    assert not tgi.fits and tgi.chosen.get("pipeline_parallel", 1) == 1


def test_a_model_that_fits_a_node_is_never_pipelined(ruleset):
    # Llama 3.1 70B in BF16 (141 GB) fits one node: sixteen H100s serve it as replicas, never as a pipeline
    plan = plan_layout({**DEEPSEEK_16, "model": "llama-3.1-70b", "precision": "bf16"}, ruleset)
    assert plan.fits and plan.chosen.get("pipeline_parallel", 1) == 1


def test_a_layout_the_intake_gives_is_kept_even_when_it_asks_for_more_gpus_than_it_has(ruleset):
    # TP 8 x PP 4 on 8 GPUs: the intake's layout is weighed as given (as before the planner learned to pipeline
    # across servers), never dropped as a layout of the planner's own that does not fit the GPUs
    values = {**DEEPSEEK_16, "model": "llama-3.1-70b", "precision": "bf16", "gpu_count": 8, "tensor_parallel": 8,
              "pipeline_parallel": 4}
    chosen = plan_layout(values, ruleset).chosen
    assert (chosen["tensor_parallel"], chosen["pipeline_parallel"]) == (8, 4)
