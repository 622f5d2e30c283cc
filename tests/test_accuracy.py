"""Estimates against published runs: `sizing validate` holds the accuracy reached, and bands follow it."""

import contextlib
import io
import json

import pytest

from engine.calc.evaluate import evaluate
from engine.calc.evidence import DEFAULT_CASES, load_cases
from engine.cli import main
from engine.validation import band, compare, summarise

# The figures reached when the coefficients were chosen (docs/accuracy.md), slightly rounded up;
# the targets are looser (training 10% / ±35%, inference 20% / ×1.6, memory 5% / ±25%).
REACHED = ["--max-median-error", "training=0.09", "--max-worst-error", "training=0.25",
           "--max-median-error", "inference=0.15", "--max-worst-factor", "inference=1.5",
           "--max-median-error", "memory=0.01", "--max-worst-error", "memory=0.02"]


def validate_cli(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["validate", *args])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def table(ruleset):
    return compare(load_cases(DEFAULT_CASES), ruleset)


def test_accuracy_never_silently_gets_worse():
    code, out = validate_cli(*REACHED)
    assert code == 0, out
    assert "training" in out and "held out" in out


def test_a_tighter_limit_than_reached_fails():
    code, out = validate_cli("--max-median-error", "training=0.01")
    assert code == 1
    assert "FAIL: training median" in out


def test_json_report_lists_every_figure(table):
    code, out = validate_cli("--json")
    assert code == 0
    doc = json.loads(out)
    assert len(doc["cases"]) == len(table)
    assert set(doc["groups"]) == {"training", "inference", "memory"}


def test_every_case_is_expressible_and_estimated(table):
    # FP8, consumer GPUs, H200, MoE-capable rules, ZeRO stages: every figure gets an estimate.
    assert table["estimated"].notna().all(), table[table["estimated"].isna()]
    assert {"fp8", "4090", "H200"} <= {str(v) for c in load_cases(DEFAULT_CASES) for v in c.intake.values()}


def test_held_out_cases_are_reported_separately(table):
    summary = summarise(table)
    for group in ("training", "inference"):
        assert "choose" in summary[group] and "check" in summary[group]
        assert summary[group]["choose"]["cases"] + summary[group]["check"]["cases"] == summary[group]["cases"]


@pytest.mark.parametrize("group, rule", [("training", "training_band"), ("inference", "inference_band"),
                                         ("memory", "memory_band")])
def test_uncertainty_bands_match_the_validation_errors(ruleset, table, group, rule):
    assert evaluate({}, ruleset, only=[rule]).values[rule] == pytest.approx(band(table, group))


def test_explicit_utilization_always_wins(ruleset):
    case = {"workload": "pretraining", "model": "llama-2-7b", "training_tokens_billion": 100,
            "gpu": "A100", "gpu_count": 8, "precision": "bf16"}
    assert evaluate(case, ruleset).values["utilization_used"] != pytest.approx(0.33)
    assert evaluate({**case, "utilization": 0.33}, ruleset).values["utilization_used"] == pytest.approx(0.33)
    served = {"workload": "online-inference", "model": "llama-2-7b", "gpu": "A100", "gpu_count": 1,
              "precision": "fp16", "prompt_tokens": 512, "output_tokens": 128, "utilization": 0.33}
    r = evaluate(served, ruleset).values
    assert r["prefill_utilization"] == pytest.approx(0.33) and r["decode_utilization"] == pytest.approx(0.33)


def test_quotes_show_the_band_and_the_runs_they_were_checked_against(tmp_path):
    from openpyxl import load_workbook

    from engine.job import run_job
    from tests.conftest import ROOT
    job = run_job(ROOT / "samples" / "llama-70b-online-8xh100.yaml", tmp_path)
    assert job.ok, job.problems
    v = job.results.values
    # inference band 0.20: the TTFT band is ttft × 0.8 … ttft × 1.2
    assert v["ttft_ms_low"] == pytest.approx(v["ttft_ms"] * 0.8)
    assert v["ttft_ms_high"] == pytest.approx(v["ttft_ms"] * 1.2)
    html = (tmp_path / "llama-70b-online-8xh100.quote.html").read_text(encoding="utf-8")
    assert "likely" in html and "published runs" in html
    assert "TensorRT-LLM Performance Overview" in html          # one of the inference sources
    book = load_workbook(tmp_path / "llama-70b-online-8xh100.quote.xlsx")
    summary_text = " ".join(str(c.value) for row in book.worksheets[0].iter_rows() for c in row if c.value)
    assert "published runs" in summary_text and "likely" in summary_text
