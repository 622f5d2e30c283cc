"""`sizing quote` and `sizing sweep` as a user runs them: contract keys, exit codes, messages."""

import json
import subprocess
import sys

import pytest

from engine.contract import INPUT_TYPES, RESULT_KEYS
from tests.conftest import ROOT

TRAINING_ONLY = {"training_flops", "training_tokens", "steps", "training_time_hours", "training_time_days",
                 "tokens_per_s_per_gpu", "gradients_gb", "optimizer_gb", "activations_gb",
                 "utilization_used", "effective_tflops_total", "gpus_for_deadline"}
INFERENCE_ONLY = {"kv_cache_gb", "kv_cache_bytes_per_token", "ttft_ms", "tpot_ms", "output_tokens_per_s",
                  "max_concurrency", "meets_latency_targets"}


def sizing(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=180)


def test_every_contract_result_key_is_a_rule_and_every_input_key_is_on_the_form(ruleset):
    from engine.intake.form import current_form
    assert set(RESULT_KEYS) <= set(ruleset.rules)
    assert set(INPUT_TYPES) <= set(current_form().fields)


def test_json_document_for_a_training_intake(tmp_path):
    proc = sizing("quote", ROOT / "samples" / "seed002-bert-base-8xv100.yaml", "-o", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # DESIGN.md §4: the five keys, the defaults assumed for what the intake left out, and what
    # the planner chose beside the alternatives it weighed
    assert set(doc) == {"inputs", "assumptions", "results", "warnings", "trace", "ruleset", "plan",
                        "alternatives"}
    assert doc["assumptions"]["optimizer"] == "adamw" and "optimizer" not in doc["inputs"]
    assert set(doc["plan"]) >= {"chosen", "by", "runner_up"}
    assert set(doc["plan"]["by"].values()) <= {"intake", "planner"}
    assert "zero_stage" in doc["plan"]["chosen"] and "zero_stage" not in doc["inputs"]
    for option in doc["alternatives"]:
        assert {"gpu", "gpu_count", "precision", "fits_in_memory", "cost_total", "training_time_days"} <= set(option)
    assert doc["alternatives"][0]["requested"] and doc["alternatives"][0]["gpu"] == "nvidia-v100-sxm2-32gb"
    assert doc["results"]["training_time_hours"] == pytest.approx(0.5)       # seed 002: 30 minutes
    assert doc["inputs"]["gpu"] == "nvidia-v100-sxm2-32gb"                    # the alias V100, resolved
    assert set(RESULT_KEYS) - INFERENCE_ONLY - {"gpus_for_deadline"} <= set(doc["results"])
    step = next(s for s in doc["trace"] if s["rule"] == "training_flops")
    assert step["where"].startswith("rules/compute.yaml:") and "flops_per_sample" in step["inputs"]
    assert (tmp_path / "seed002-bert-base-8xv100.quote.json").is_file()


def test_json_document_for_an_inference_intake(tmp_path):
    proc = sizing("quote", ROOT / "samples" / "llama-70b-online-8xh100.yaml", "-o", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    results = doc["results"]
    assert INFERENCE_ONLY <= set(results)
    assert not (TRAINING_ONLY & set(results))
    for option in doc["alternatives"]:
        assert {"gpu", "gpu_count", "precision", "fits_in_memory", "cost_total", "output_tokens_per_s"} <= set(option)


def test_invalid_yaml_intake_exits_2_with_every_problem_by_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("customer: X\nworkload: pretraning\ngpu: H10O\ngpu_count: eight\nprecison: bf16\n",
                   encoding="utf-8")
    proc = sizing("quote", bad, "-o", tmp_path)
    assert proc.returncode == 2
    for expected in ("bad.yaml:2:", "bad.yaml:3:", "bad.yaml:4:", "bad.yaml:5:", "Did you mean “precision”",
                     "closest: H100"):
        assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert bad.read_text(encoding="utf-8").startswith("customer: X")        # the original is kept


def test_sweep_recommends_the_cheapest_setup_that_fits(tmp_path):
    proc = sizing("sweep", ROOT / "samples" / "rtx4090-lora-7b.zh-TW.yaml", "--gpu", "4090,A100,H100",
                  "--gpu-count", "1,2,4", "--precision", "bf16", "--csv", tmp_path / "grid.csv")
    assert proc.returncode == 0, proc.stderr
    assert "共評估 9 種配置" in proc.stdout and "推薦：" in proc.stdout      # a zh-TW intake: its language
    import pandas as pd
    grid = pd.read_csv(tmp_path / "grid.csv")
    fits = grid[grid["fits_in_memory"]]
    best = fits.sort_values(["cost_total", "gpu_count"]).iloc[0]
    assert f"{int(best['gpu_count'])} × {best['gpu_name']}" in proc.stdout


def test_sweep_names_an_unknown_gpu():
    proc = sizing("sweep", ROOT / "samples" / "seed002-bert-base-8xv100.yaml", "--gpu", "H10O",
                  "--gpu-count", "8")
    assert proc.returncode == 2
    assert "--gpu: unknown GPU `H10O`" in proc.stderr
