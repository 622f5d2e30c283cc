"""Whole quotes through run_job on the shipped samples: real rules, real evaluate_grid, all three outputs."""

from __future__ import annotations

import json
import sys
import types

import openpyxl
import pytest

from engine.paths import SAMPLES_DIR
from engine.quote import view as render

pytest.importorskip("engine.calc.evaluate")
from engine.job import run_job  # noqa: E402

SAMPLES = sorted(p.name for p in SAMPLES_DIR.glob("*.yaml")) + \
    sorted(p.name for p in SAMPLES_DIR.glob("*.xlsx"))


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_quotes(tmp_path, name):
    job = run_job(SAMPLES_DIR / name, tmp_path)
    assert job.ok, job.problems
    xlsx, html, js = (tmp_path / f"{job.stem}.quote.{ext}" for ext in ("xlsx", "html", "json"))
    assert job.outputs == [xlsx, html, js]
    doc = json.loads(js.read_text(encoding="utf-8"))
    assert doc["results"] == json.loads(json.dumps(job.results.to_json(job.language)["results"]))
    assert doc["ruleset"] == job.ruleset_version and doc["language"] == job.language
    assert doc["headline"] in html.read_text(encoding="utf-8")

    # the scaling table comes from the real evaluate_grid, and agrees with the quote itself
    quoted = next(r for r in doc["scaling"] if r["gpu_count"] == job.results.inputs["gpu_count"])
    for key in ("training_time_hours", "training_time_days", "output_tokens_per_s", "cost_total"):
        if key in quoted:
            assert quoted[key] == pytest.approx(doc["results"][key], rel=1e-9)

    wb = openpyxl.load_workbook(xlsx)
    assert len(wb.sheetnames) >= 6 and wb.active == wb.worksheets[0]
    audit = wb.worksheets[5]          # after Summary, Memory, Scaling, Alternatives, Facility & cost
    assert audit.max_row == len(job.results.trace) + 1
    if job.intake.kind == "xlsx":   # the salesperson's own sheets, after ours
        original = openpyxl.load_workbook(SAMPLES_DIR / name)
        assert wb.sheetnames[6:] == original.sheetnames
        first = original.worksheets[0]
        kept = wb[first.title]
        assert [[c.value for c in r] for r in kept.iter_rows()] == \
            [[c.value for c in r] for r in first.iter_rows()]


def test_scaling_grid_asks_evaluate_grid_for_gpu_counts(tmp_path, monkeypatch):
    """The contract with engine.evaluate: (intake, ruleset, {"gpu_count": [...]}) → result columns."""
    from test_render_cases import make_grid, make_job
    calls = []

    def fake_grid(intake, ruleset, grid):
        calls.append((intake, ruleset, grid))
        return make_grid()

    monkeypatch.setitem(sys.modules, "engine.calc.evaluate", types.SimpleNamespace(evaluate_grid=fake_grid))
    job = make_job(tmp_path)
    job.ruleset = marker = object()
    frame = render.scaling_grid(job.intake, job.results, job.ruleset)
    # the intake's values as given (the results repeat them), at the counts the layout allows
    assert calls == [({**job.intake.values, **job.results.inputs}, marker,
                      {"gpu_count": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]})]
    assert list(frame["gpu_count"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def test_scaling_respects_parallel_degrees(tmp_path, monkeypatch):
    from test_render_cases import make_grid, make_job
    seen = {}
    monkeypatch.setitem(sys.modules, "engine.calc.evaluate", types.SimpleNamespace(
        evaluate_grid=lambda intake, ruleset, grid: seen.update(grid) or make_grid()))
    job = make_job(tmp_path)
    job.ruleset = object()
    job.intake.values.update(tensor_parallel=8, pipeline_parallel=2)
    render.scaling_grid(job.intake, job.results, job.ruleset)
    assert seen["gpu_count"] == [16, 32, 64, 128, 256, 512, 1024]


def test_a_failing_grid_leaves_the_quote_standing(tmp_path, monkeypatch, caplog):
    from test_render_cases import make_job

    def broken(intake, ruleset, grid):
        raise ZeroDivisionError("boom")
    monkeypatch.setitem(sys.modules, "engine.calc.evaluate", types.SimpleNamespace(evaluate_grid=broken))
    job = make_job(tmp_path)
    job.ruleset = object()
    assert render.scaling_grid(job.intake, job.results, job.ruleset) is None
    assert "scaling table" in caplog.text
