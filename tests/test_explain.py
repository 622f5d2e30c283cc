"""`sizing explain` for people: a figure by its key or its label in any language, the closest on a miss,
a short derivation by default and the whole tree with --full — of the very figures the quote shows."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from engine.calc.explain import show
from engine.cli import main
from engine.job import run_job
from engine.paths import SAMPLES_DIR


def sizing(*args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([str(a) for a in args])
    return code, out.getvalue()


PRETRAINING = SAMPLES_DIR / "llama-8b-pretraining-256xh100.zh-CN.yaml"


@pytest.mark.parametrize("said", ["cost_total", "Total cost", "total COST", "總成本", "总成本"])
def test_a_figure_by_its_key_or_its_label_in_any_language(said):
    code, out = sizing("explain", PRETRAINING, said)
    assert code == 0, out
    assert re.match(r"总成本 \(cost_total\) = [\d,.]+ [A-Z]{3}  \[rules/cost\.yaml:\d+\]", out), out.splitlines()[0]


def test_an_intake_field_by_its_label():
    code, out = sizing("explain", PRETRAINING, "GPU 数量")
    assert code == 0 and out.startswith("gpu_count = 256") or "(gpu_count) = 256" in out, out


def test_short_by_default_and_the_whole_tree_with_full():
    """Issue 22: 625 lines for cost_total. By default: the figure, its formula, the formula with its values,
    what it reads (with catalog lines) and the intake values below — a screenful; --full: every rule."""
    code, short = sizing("explain", PRETRAINING, "cost_total")
    assert code == 0
    lines = short.splitlines()
    assert len(lines) <= 40, len(lines)
    assert lines[1].strip().startswith("= if(workload == \"online-inference\", gpu_count * ")
    # the same formula with the values that flowed in (256 GPUs, the GPU-hours and the price per GPU-hour)
    assert lines[2].strip().startswith("= if(\"pretraining\" == \"online-inference\", 256 * ")
    assert not re.search(r"[a-z]_[a-z]", lines[2]), lines[2]          # every name replaced by its value
    assert "[catalogs/gpus.yaml:" in short                      # the price's catalog line
    # the catalog entries the whole derivation read, one line each: the GPU's, the model's …
    assert "来自目录:" in short
    assert re.search(r"^   gpus nvidia-h100-sxm5-80gb: .*price_usd_per_gpu_hour [\d.]+.*\[catalogs/gpus\.yaml:\d+–\d+\]$",
                     short, re.M), short
    assert re.search(r"^   models llama-3\.1-8b: .*layers 32", short, re.M)
    assert "来自需求表:" in short and "[llama-8b-pretraining-256xh100.zh-CN.yaml:15]" in short   # gpu_count's line
    assert lines[-1].endswith("cost_total --full")
    code, full = sizing("explain", PRETRAINING, "cost_total", "--full")
    assert code == 0 and len(full.splitlines()) > 4 * len(lines)


@pytest.mark.parametrize("name, key", [("seed002-bert-base-8xv100.yaml", "training_time_hours"),
                                       ("seed002-bert-base-8xv100.yaml", "memory_per_gpu_gb"),
                                       ("rtx4090-lora-7b.zh-TW.yaml", "memory_per_gpu_gb"),
                                       ("llama-8b-pretraining-256xh100.zh-CN.yaml", "activations_gb"),
                                       ("llama-70b-online-8xh100.yaml", "output_tokens_per_s")])
def test_explain_derives_the_quotes_own_figure(tmp_path, name, key):
    """Issue 22: explain evaluated without the planner (micro-batch 1, ZeRO 0 where the quote's planner chose
    2 and 1): 3.44 h against the quote's 3.39 h, 38.1 GB against 58.4 GB. Now both take one path."""
    job = run_job(SAMPLES_DIR / name, tmp_path, formats=("json",))
    assert job.ok, job.problems
    step = job.results.step(key)
    code, out = sizing("explain", SAMPLES_DIR / name, key)
    assert code == 0, out
    first = out.splitlines()[0]
    assert f"({key}) = {show(job.results.values[key], step.unit)}" in first, (first, job.results.values[key])
    # and as the quote writes it, where its unit differs: memory in the GPU's GB (5.22 → 4.86 GB)
    figure = job.quote.figure(key)
    if step.unit == "GB":
        assert f"{job.quote.m.value(figure.value, figure.unit)})" in first, (first, figure.text)


@pytest.mark.parametrize("command", [("explain", "{path}", "tpot_ms"), ("sweep", "{path}", "--gpu-count", "2")])
def test_a_missing_intake_is_said_plainly(tmp_path, command):
    """A mistyped path is the user's slip, not a worker that "stopped unexpectedly": the quote's own words."""
    path = tmp_path / "no-such-intake.yaml"
    code, out = sizing(*(a.format(path=path) for a in command))
    assert code == 2
    assert out.strip() == f"{path}: no such file.", out
    code, out = sizing(*(a.format(path=tmp_path) for a in command))       # a folder where the file goes
    assert code == 2 and out.strip() == f"{tmp_path}: a folder, not a file: give the intake file inside it.", out


def test_a_quoted_table_name_stays_a_name_where_a_rule_shares_it(tmp_path):
    """allreduce_latency_s reads the rule stack_allreduce_latency_ms and looks up the table of that name: the line
    with the values puts the rule's value for the bare name and keeps the quoted table name as written."""
    intake = tmp_path / "tp16.yaml"
    intake.write_text("customer: Test Co.\nworkload: online-inference\nmodel: llama-3.1-405b\nprecision: bf16\n"
                      "gpu: H100\ngpu_count: 16\ntensor_parallel: 16\nprompt_tokens: 2000\noutput_tokens: 400\n"
                      "concurrency: 32\n", encoding="utf-8")
    code, out = sizing("explain", intake, "allreduce_latency_s")
    assert code == 0, out
    filled = out.splitlines()[2]
    # TP 16 over two 8-GPU servers: the network row's 0.025 ms for the rule, the table's name left in its quotes
    assert filled.strip().startswith("= max(0.025, ") and 'lookup("stack_allreduce_latency_ms", "vllm"' in filled, filled
