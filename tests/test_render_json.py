"""The quote JSON for other systems, and the plain-text summary printed by `sizing quote`."""

from __future__ import annotations

import json
from datetime import datetime

from test_render_cases import HOSTILE_CUSTOMER, HOSTILE_PROJECT, grid_for, make_job, quote_of, set_input  # noqa: F401

from engine.job import write_quote
from engine.quote import view as render
from engine.quote.text import summary_text


def test_document_has_inputs_results_warnings_and_ruleset(tmp_path, grid_for):
    grid_for()
    job = make_job(tmp_path)
    path = write_quote(job, ("json",))[0]
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert path.name == "training.quote.json"
    assert {"inputs", "results", "warnings", "trace", "ruleset", "customer", "project",
            "generated_at", "language", "headline", "scaling"} <= set(doc)
    expected = job.results.to_json("en")
    assert {k: doc[k] for k in expected} == json.loads(json.dumps(expected))
    assert doc["customer"] == HOSTILE_CUSTOMER and doc["project"] == HOSTILE_PROJECT
    assert doc["ruleset"] == "rs-test123456"
    assert doc["headline"] == "≈ 19.2 days on 512 × H100 SXM5 80GB"
    assert datetime.fromisoformat(doc["generated_at"]).tzinfo is not None
    assert doc["warnings"][0]["code"] == "utilization.high"
    # 1 GPU cannot hold the model: its row gives no time, speedup or cost (nothing quoted as if it ran)
    assert doc["scaling"][0] == {"gpu_count": 1, "layout": "ZeRO stage 1, Micro-batch size 1",
                                 "training_time_days": None, "speedup": None,
                                 "scaling_efficiency": 1, "gpu_hours": None, "cost_total": None,
                                 "fits_in_memory": False}


def test_json_in_the_intake_language(tmp_path, grid_for):
    grid_for("inference")
    doc = json.loads(write_quote(make_job(tmp_path, "inference", "zh-CN"),
                                          ("json",))[0].read_text(encoding="utf-8"))
    assert doc["language"] == "zh-CN"
    assert doc["headline"].startswith("每秒输出 1,345 tokens")
    assert doc["trace"][0]["label"].startswith("简：")
    assert [r["gpu_count"] for r in doc["scaling"]] == [1, 2, 4, 8]


def test_write_quote_json_alone(tmp_path, grid_for):
    grid_for()
    job = make_job(tmp_path)
    path = write_quote(job, ("json",))[0]
    assert path == job.outdir / "training.quote.json"
    assert json.loads(path.read_text(encoding="utf-8"))["results"]["training_time_days"] == 19.2
    assert [p.name for p in job.outdir.iterdir()] == ["training.quote.json"]


def test_summary_text_is_short_and_complete(tmp_path):
    text = summary_text(quote_of(make_job(tmp_path, "inference")))
    lines = text.splitlines()
    assert lines[0] == "Example Co.: 1,345 output tokens/s, first token in 412.5 ms, on 4 × H100 SXM5 80GB"
    assert "  Ttft ms: 412.5 ms" in lines and "  Cost per million tokens: 2.48 USD" in lines
    assert "Misses the latency targets." in text
    assert "Warnings" in lines and len(lines) < 25


def test_summary_text_strips_terminal_control_characters(tmp_path):
    job = make_job(tmp_path)
    set_input(job, "customer", "Evil\x1b[2J Co.")
    assert summary_text(quote_of(job)).startswith("Evil[2J Co.: ≈ 19.2 days on 512 × H100 SXM5 80GB")


def test_summary_text_in_chinese(tmp_path):
    text = summary_text(quote_of(make_job(tmp_path, "training", "zh-TW")))
    assert "約 19.2 天，使用 512 × H100 SXM5 80GB" in text and "警告" in text
