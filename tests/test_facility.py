"""Facility & cost through the real pipeline: hand-derived racks, switches, checkpoints,
interruptions, energy and break-even in the JSON, the workbook sheet and the HTML section."""

from __future__ import annotations

import html as htmllib
import json
import re

import openpyxl
import pytest
from ruamel.yaml import YAML

from engine.calc.functions import _poisson_cdf, _poisson_quantile
from engine.job import run_job

# Llama 3 (Meta 2024, Table 5): 419 unexpected interruptions in 54 days on 16,384 H100
LLAMA3_RATE = 419 / (16384 * 54 * 24)          # = 1.97327e-5 per GPU-hour


def quote(tmp_path, name="intake", **intake):
    """Quote a YAML intake through run_job; (results, JSON document, Facility & cost rows, HTML)."""
    path = tmp_path / f"{name}.yaml"
    YAML().dump({"customer": "Facility Co.", **intake}, path.open("w", encoding="utf-8"))
    job = run_job(path, tmp_path)
    assert job.ok, job.problems
    doc = json.loads((tmp_path / f"{name}.quote.json").read_text(encoding="utf-8"))
    wb = openpyxl.load_workbook(tmp_path / f"{name}.quote.xlsx")
    sheet = wb.worksheets[4]
    rows = {r[0]: r[1] for r in sheet.iter_rows(values_only=True) if r[0] is not None}
    page = (tmp_path / f"{name}.quote.html").read_text(encoding="utf-8")
    return doc["results"], doc, sheet, rows, page


def html_figure(page: str, key: str) -> str:
    """The text of one figure's row in the page's Facility & cost section."""
    section = page.split('id="facility"', 1)[1].split("</section>", 1)[0]
    found = re.search(rf'<tr data-key="{key}"><th scope="row">[^<]*</th><td>([^<]*)</td>', section)
    assert found, f"{key} not in the Facility & cost section"
    return htmllib.unescape(found.group(1))


def sheet_value(sheet, label: str):
    for row in sheet.iter_rows(values_only=True):
        if row[0] == label:
            return row[1]
    raise AssertionError(f"{label!r} not on the sheet {sheet.title}")


PRETRAIN_512 = dict(workload="pretraining", model="llama-3.1-70b", training_tokens_billion=1000,
                    precision="bf16", gpu="H100", gpu_count=512, deadline_days=30)


def test_racks_and_power_of_512_h100(tmp_path):
    results, doc, sheet, _, page = quote(tmp_path, **PRETRAIN_512)
    # 512 ÷ 8 = 64 DGX H100 × 10.2 kW = 652.8 kW; a 40 kW rack takes floor(40 ÷ 10.2) = 3 → ceil(64 ÷ 3) = 22
    # racks; × PUE 1.56 (Uptime Institute 2024) = 1,018.368 kW
    assert results["nodes"] == 64 and results["racks"] == 22
    assert results["it_power_kw"] == pytest.approx(652.8)
    assert results["pue"] == 1.56 and results["facility_power_kw"] == pytest.approx(1018.368)
    assert sheet.title == "Facility & cost"
    assert sheet_value(sheet, "Racks") == 22
    assert sheet_value(sheet, "IT power") == pytest.approx(652.8)
    assert html_figure(page, "racks") == "22"
    assert html_figure(page, "it_power_kw") == "652.8 kW"


def test_switch_count_of_a_non_blocking_two_tier_fabric(tmp_path):
    results, _, sheet, _, page = quote(tmp_path, **{**PRETRAIN_512, "gpu_count": 1024})
    # 1,024 NICs, 64-port switches, 1:1: 32 down a leaf → 32 leaves, each 32 up → 32 × 32 ÷ 64 = 16 spines
    assert results["nics"] == 1024 and results["fabric_tiers"] == 2
    assert results["network_switches"] == 48
    assert results["network_cables"] == 1024 + 32 * 32
    assert sheet_value(sheet, "Network switches") == 48
    assert html_figure(page, "network_switches") == "48"


def test_oversubscription_costs_step_time_through_the_communication_rules(tmp_path):
    intake = {**PRETRAIN_512, "gpu_count": 1024, "tensor_parallel": 8, "pipeline_parallel": 1, "zero_stage": 1}
    blocking, _, _, _, _ = quote(tmp_path, "one", **intake)
    results, doc, _, _, page = quote(tmp_path, "two", **intake, oversubscription=2)
    # floor(64 × 2 ÷ 3) = 42 down a leaf → ceil(1,024 ÷ 42) = 25 leaves; 25 × 22 up ÷ 64 → 9 spines
    assert results["network_switches"] == 34
    assert results["network_gb_s"] == pytest.approx(blocking["network_gb_s"] / 2)
    assert results["step_time_s"] > blocking["step_time_s"]
    assert doc["facility"]["step_time_s"] == pytest.approx(
        {"quoted": results["step_time_s"], "non_blocking": blocking["step_time_s"]})
    assert "At 2:1 oversubscription each optimizer step takes" in htmllib.unescape(page)


def test_checkpoint_size_of_a_70b_model_with_adamw(tmp_path):
    results, _, sheet, _, page = quote(
        tmp_path, workload="pretraining", model="custom", params_billion=70, layers=80, hidden_size=8192,
        attention_heads=64, training_tokens_billion=100, precision="bf16", gpu="H100", gpu_count=64)
    # BF16 weights 2 + AdamW's FP32 master copy 4 and two moments 8 = 14 bytes × 70e9 = 980 GB
    assert results["checkpoint_size_gb"] == pytest.approx(980)
    # written in the 2-minute target: 980 ÷ 120 s = 8.17 GB/s
    assert results["checkpoint_write_gb_s"] == pytest.approx(980 / 120)
    # Young: √(2 × 2 min × MTBF), MTBF = 1 ÷ (rate × 64) hours
    mtbf_minutes = 60 / (LLAMA3_RATE * 64)
    assert results["checkpoint_interval_minutes"] == pytest.approx((2 * 2 * mtbf_minutes) ** 0.5)
    assert sheet_value(sheet, "Checkpoint size") == pytest.approx(980)
    assert html_figure(page, "checkpoint_size_gb") == "980 GB"


def test_interruptions_at_llama_3s_rate(tmp_path):
    results, _, sheet, _, page = quote(tmp_path, **PRETRAIN_512)
    # expected interruptions = 1.97327e-5 per GPU-hour × the GPU-hours of training steps, which are
    # the run's GPU-hours × its productive share: for a run this long (more than one interruption expected)
    # the whole long-run share, compute.yaml's goodput_share (fitted: 0.81 now)
    assert LLAMA3_RATE == pytest.approx(1.97327e-5, rel=1e-5)
    share = results["goodput_share"]
    assert 0.5 < share < 1 and results["goodput_used"] == pytest.approx(share)
    assert results["expected_interruptions"] == pytest.approx(LLAMA3_RATE * results["gpu_hours"] * share)
    # the finish is a Poisson spread around the quoted time: p90 ≥ p50, both near it
    assert results["completion_days_p50"] <= results["completion_days_p90"]
    assert results["completion_days_p90"] == pytest.approx(results["training_time_days"], rel=0.05)
    assert sheet_value(sheet, "Expected interruptions") == pytest.approx(results["expected_interruptions"])
    # the quote's ≈ 26 days against its 30-day deadline: the sentence the customer reads
    assert "Meets the 30-day deadline with 99% probability." in htmllib.unescape(page)


def test_the_run_that_set_the_rate_gives_back_its_interruptions(tmp_path):
    # 16,384 GPUs for 54 days = 21,233,664 GPU-hours × 419 ÷ 21,233,664 = 419 interruptions:
    # so 419 per 54 days (1,296 hours) of training steps on 16,384 GPUs
    results, _, _, _, _ = quote(tmp_path, **{**PRETRAIN_512, "gpu_count": 16384})
    steps_hours = results["training_time_hours"] * results["goodput_used"]
    assert results["expected_interruptions"] == pytest.approx(419 * steps_hours / (54 * 24))
    assert results["interruptions_per_day"] == pytest.approx(419 / 54)


def test_poisson_quantiles_by_hand():
    # Poisson(7.4): P(N ≤ 10) = 0.8707 < 0.9 ≤ P(N ≤ 11) = 0.9265, so the 90% count is 11;
    # P(N ≤ 6) = 0.4140 < 0.5 ≤ P(N ≤ 7) = 0.5473, so the median is 7
    assert _poisson_cdf(10, 7.4) == pytest.approx(0.8707, abs=1e-4)
    assert _poisson_cdf(11, 7.4) == pytest.approx(0.9265, abs=1e-4)
    assert _poisson_quantile(7.4, 0.9) == 11 and _poisson_quantile(7.4, 0.5) == 7
    assert _poisson_quantile(0.0, 0.9) == 0


def test_energy_cost_of_a_month_of_serving(tmp_path):
    results, _, sheet, _, page = quote(
        tmp_path, workload="online-inference", model="llama-3.1-8b", precision="bf16", gpu="H100", gpu_count=8,
        prompt_tokens=500, output_tokens=200, concurrency=32, pue=1.2, energy_price_per_kwh=0.10)
    # one DGX H100 10.2 kW × PUE 1.2 = 12.24 kW; at 75% of its rating for 30 days × 24 h = 6,609.6 kWh;
    # × 0.10 = 660.96
    assert results["facility_power_kw"] == pytest.approx(12.24)
    assert results["energy_mwh"] == pytest.approx(6.6096)
    assert results["energy_cost"] == pytest.approx(660.96)
    # kWh per million output tokens = 12.24 × 0.75 ÷ (tokens/s × 3,600) × 1e6
    assert results["energy_kwh_per_million_tokens"] == pytest.approx(
        12.24 * 0.75 / (results["output_tokens_per_s"] * 3600) * 1e6)
    assert results["nics"] == 0 and results["network_switches"] == 0    # one server needs no fabric
    assert sheet_value(sheet, "Electricity cost") == pytest.approx(660.96)
    assert html_figure(page, "energy_cost") == "661 USD"          # money above 100 in whole units


def test_buying_breaks_even_against_renting(tmp_path):
    results, _, sheet, _, page = quote(tmp_path, workload="pretraining", model="llama-3.1-8b",
                                       training_tokens_billion=10, precision="bf16", gpu="H100", gpu_count=8)
    # rent 8 × 2.49 × 730 h = 14,541.6 a month; owned: 10.2 kW × 1.56 × 0.75 × 730 h × 0.08 = 696.95 of power;
    # a DGX H100 at 270,000 ÷ (14,541.6 − 696.95) = 19.50 months
    assert results["rent_per_month"] == pytest.approx(14541.6)
    assert results["power_cost_per_month"] == pytest.approx(696.9456)
    assert results["buy_breakeven_months"] == pytest.approx(19.5021, rel=1e-4)
    # the catalog's reserved and spot H100 prices (1.79 and 1.49 against 2.49 on demand), with their source
    assert results["cost_reserved_1y"] == pytest.approx(results["gpu_hours"] * 1.79)
    assert results["cost_spot"] == pytest.approx(results["gpu_hours"] * 1.49)
    assert results["cost_reserved_3y"] == pytest.approx(results["cost_total"] * 0.55)
    assert sheet_value(sheet, "Buying pays for itself after") == pytest.approx(19.5021, rel=1e-4)
    assert html_figure(page, "buy_breakeven_months") == "19.5 months"
    assert "within the write-off period (4 years)" in htmllib.unescape(page)
    assert "SemiAnalysis" in page and "gridstackhub.ai" in page      # the prices' sources are shown


def test_a_site_that_cannot_take_the_servers_is_told_so(tmp_path):
    results, doc, _, _, page = quote(tmp_path, **PRETRAIN_512, rack_power_kw=8)
    # 10.2 kW servers in 8 kW racks: still one a rack, and a sentence says the site needs more
    assert results["racks"] == 64
    codes = {w["code"] for w in doc["warnings"]}
    assert "rack_too_dense" in codes
    assert "more than the 8 kW a rack at this site can take" in htmllib.unescape(page)


def test_a_liquid_cooled_rack_scale_system(tmp_path):
    results, doc, _, _, _ = quote(tmp_path, **{**PRETRAIN_512, "gpu": "GB200", "gpu_count": 144})
    # two GB200 NVL72 racks of about 120 kW each, liquid-cooled by design
    assert results["racks"] == 2 and results["it_power_kw"] == pytest.approx(240)
    assert "liquid_cooling" in {w["code"] for w in doc["warnings"]}


@pytest.mark.parametrize("lang, title, part", [("zh-TW", "機房與成本", "中斷與完成時間"),
                                               ("zh-CN", "机房与成本", "中断与完成时间")])
def test_the_section_in_chinese(tmp_path, lang, title, part):
    _, _, sheet, _, page = quote(tmp_path, **PRETRAIN_512, language=lang)
    assert sheet.title == title
    section = page.split('id="facility"', 1)[1].split("</section>", 1)[0]
    assert f"<h2>{title}</h2>" in section and part in section
    assert "天期限內完成" in section or "天期限内完成" in section


def test_a_bad_oversubscription_is_a_clear_problem(tmp_path):
    path = tmp_path / "bad.yaml"
    YAML().dump({"customer": "x", **PRETRAIN_512, "oversubscription": 0.5}, path.open("w", encoding="utf-8"))
    job = run_job(path, tmp_path)
    assert job.status == "invalid"
    # where (file:line), what and how to fix, in the salesperson's words
    assert [(p.where, p.message) for p in job.problems] == [
        ("bad.yaml:9", "Network oversubscription: 0.5 is too small; enter a number from 1 to 16.")]


def test_the_site_fields_of_a_filled_workbook(tmp_path):
    from test_intake_kit import filled
    path = filled(tmp_path, {**PRETRAIN_512, "customer": "Site Co."},
                  typed={"pue": 1.2, "switch_ports": 32, "rack_power_kw": "25 kW", "depreciation_years": 5})
    job = run_job(path, tmp_path)
    assert job.ok, job.problems
    results = job.results.values
    # 32-port switches, 1:1: 16 down a leaf → 512 ÷ 16 = 32 leaves; 32 × 16 up ÷ 32 = 16 spines → 48;
    # 25 kW racks take two 10.2 kW servers → 64 ÷ 2 = 32 racks; 652.8 kW × 1.2 = 783.36 kW
    assert results["network_switches"] == 48 and results["racks"] == 32
    assert results["facility_power_kw"] == pytest.approx(783.36)
    assert results["depreciation_years"] == 5
    sheet = openpyxl.load_workbook(tmp_path / f"{job.stem}.quote.xlsx")["Facility & cost"]
    assert sheet_value(sheet, "Power usage effectiveness (PUE)") == 1.2
