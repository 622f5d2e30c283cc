"""Whole quotes through run_job on the shipped samples: real rules, the real planner per count, every output."""

from __future__ import annotations

import json
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
    trail = tmp_path / f"{job.stem}.audit.xlsx"
    assert job.outputs == [xlsx, html, js, trail]
    doc = json.loads(js.read_text(encoding="utf-8"))
    assert doc["results"] == json.loads(json.dumps(job.results.to_json(job.language)["results"]))
    assert doc["ruleset"] == job.ruleset_version and doc["language"] == job.language
    assert doc["headline"] in html.read_text(encoding="utf-8")

    # the scaling table's row at the quoted count is the quote itself
    quoted = next(r for r in doc["scaling"] if r["gpu_count"] == job.results.inputs["gpu_count"])
    for key in ("training_time_hours", "training_time_days", "output_tokens_per_s", "cost_total"):
        if key in quoted:
            assert quoted[key] == pytest.approx(doc["results"][key], rel=1e-9)

    # and the alternatives' requested row is the quote too: one configuration, one answer
    requested = next(a for a in doc["alternatives"] if a.get("requested"))
    for key in ("cost_total", "training_time_days", "output_tokens_per_s", "memory_per_gpu_gb"):
        if key in doc["results"] and key in requested:
            assert requested[key] == pytest.approx(doc["results"][key], rel=1e-9), key

    wb = openpyxl.load_workbook(xlsx)
    customer = {job.quote.m(f"sheets.{k}") for k in ("summary", "memory", "scaling", "alternatives", "facility")}
    assert set(wb.sheetnames) <= customer and wb.active == wb.worksheets[0]      # the customer's sheets alone
    audit = openpyxl.load_workbook(trail)
    assert audit.worksheets[0].max_row == len(job.results.trace) + 1       # every rule, in the trail
    listed = {r[0]: r[4] for r in audit.worksheets[1].iter_rows(min_row=2, values_only=True)}
    assumed = job.quote.m("assumed_source")
    assert listed == {k: assumed if job.intake.where(k) == "default" else job.intake.where(k)
                      for k in job.intake.values}          # the intake as received, each value by its cell


@pytest.mark.parametrize("name", ["llama-8b-pretraining-256xh100.zh-CN.yaml", "rtx4090-lora-7b.zh-TW.yaml",
                                  "llama-70b-online-8xh100.yaml", "mixtral-offline-2xa100.yaml"])
def test_the_scaling_table_gives_what_sweep_gives_at_every_count(tmp_path, name):
    """Issue 22: the sweep and the quote's scaling table gave different figures for the same GPUs (each on
    its own layout, neither saying so). Both now plan each count through engine.calc.sweep.planned_rows;
    the table names each count's layout, and its row at the quoted count is the quote's headline."""
    from engine.calc.ruleset import current_ruleset
    from engine.calc.sweep import sweep, describe_layout
    from engine.job import read_checked
    job = run_job(SAMPLES_DIR / name, tmp_path, formats=("json",))
    assert job.ok, job.problems
    ruleset = current_ruleset()
    intake = read_checked(SAMPLES_DIR / name, ruleset)
    table = {c.key: c.values for c in job.quote.scaling}
    counts = table["gpu_count"]
    swept = sweep(intake, ruleset, {"gpu": [job.results.inputs["gpu"]], "gpu_count": counts,
                                    "precision": [job.results.inputs["precision"]]}).table
    by_count = {int(r["gpu_count"]): r for _, r in swept.iterrows()}
    assert set(by_count) == set(counts)
    key = next(k for k in ("training_time_days", "training_time_hours", "output_tokens_per_s") if k in table)
    for i, count in enumerate(counts):
        row = by_count[count]
        for k in (key, "cost_total"):
            if k in table and k in row:
                if table["fits_in_memory"][i] is False:
                    # a count that cannot hold the model: the sweep ranks it as a memory miss, the table
                    # shows no time or cost for it (nothing quoted as if it ran)
                    assert table[k][i] is None and "memory" in row["misses"], (count, k)
                    continue
                assert table[k][i] == pytest.approx(row[k], rel=1e-6), (count, k)
    quoted = counts.index(job.results.inputs["gpu_count"])
    assert table[key][quoted] == pytest.approx(job.results.values[key], rel=1e-9)
    assert by_count[counts[quoted]]["layout"] == describe_layout(job.results.plan.chosen)   # the quote's layout
    assert all(table["layout"])           # every count says which layout its figures are for
    assert all(by_count[n]["divides"] for n in counts)     # no count the intake's own layout cannot run on


def test_a_layout_the_intake_fixed_is_not_shown_on_fewer_gpus_than_it_spans(tmp_path):
    """The online sample fixes tensor parallel 8: 1, 2 and 4 GPUs cannot run it (the sweep says "the fixed
    layout does not divide the GPUs"), so the table shows 8 and 16, not TP 8 "on" one GPU at 8 GPUs' speed."""
    job = run_job(SAMPLES_DIR / "llama-70b-online-8xh100.yaml", tmp_path, formats=("json",))
    assert job.results.plan.by["tensor_parallel"] == "intake" and job.results.plan.chosen["tensor_parallel"] == 8
    counts = next(c.values for c in job.quote.scaling if c.key == "gpu_count")
    assert counts == [8, 16]
    assert job.quote.scaling_note.startswith("The same workload on 8, 16 GPUs")


def test_scaling_grid_plans_each_count_for_the_quoted_gpu_and_precision(tmp_path, monkeypatch):
    """The contract with the sweep: the intake, and {gpu, gpu_count: 1, 2, 4 … 2×, precision} → planned rows."""
    from test_render_cases import make_job

    from engine.calc import sweep
    calls = []

    def fake_rows(intake, ruleset, grid, outputs=()):
        calls.append((intake, ruleset, grid))
        return [{"gpu_count": n, "training_time_days": 100 / n, "layout_values": {"zero_stage": 1}}
                for n in reversed(grid["gpu_count"])], 0, []
    monkeypatch.setattr(sweep, "planned_rows", fake_rows)
    job = make_job(tmp_path)
    job.ruleset = marker = object()
    grid = render.scaling_grid(job.intake, job.results, job.ruleset)
    assert calls == [(job.intake, marker, {"gpu": ["nvidia-h100-sxm5-80gb"],
                                           "gpu_count": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
                                           "precision": ["bf16"]})]
    assert grid["gpu_count"] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]      # in order of count
    # the quoted count's row is the quote's own figure, not a second evaluation
    assert grid["training_time_days"][9] == job.results.values["training_time_days"] == 19.2
    assert grid["training_time_days"][8] == 100 / 256


def test_a_failing_grid_leaves_the_quote_standing(tmp_path, monkeypatch, caplog):
    from test_render_cases import make_job

    from engine.calc import sweep

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")
    monkeypatch.setattr(sweep, "planned_rows", broken)
    job = make_job(tmp_path)
    job.ruleset = object()
    assert render.scaling_grid(job.intake, job.results, job.ruleset) is None
    assert "scaling table" in caplog.text
