"""The results workbook, opened again with openpyxl: sheets, figures, charts, formats, hostile text."""

from __future__ import annotations

import hashlib
import json
import zipfile

import openpyxl
import pytest
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.datavalidation import DataValidation
from test_render_cases import (HOSTILE_CUSTOMER, HOSTILE_PROJECT, HOSTILE_WARNING, TRAINING,
                               TRAINING_INPUTS, grid_for, make_job, set_input)  # noqa: F401 (fixture)

from engine.intake.model import Intake
from engine.job import write_quote
from engine.quote import view as render

HOSTILE = [HOSTILE_CUSTOMER, HOSTILE_PROJECT, "+cmd|' /C calc'!A0", "-1+1", "@SUM(1+1)*cmd|' /C calc'!A0"]


def quote(tmp_path, workload="training", lang="en", intake=None):
    job = make_job(tmp_path, workload, lang, intake)
    paths = write_quote(job)
    xlsx, _, js = paths
    return job, openpyxl.load_workbook(xlsx), json.loads(js.read_text(encoding="utf-8")), xlsx


def rows(ws):
    return [r for r in ws.iter_rows(values_only=True)]


def test_sheets_in_order_and_summary_first(tmp_path, grid_for):
    grid_for()
    _, wb, _, _ = quote(tmp_path)
    assert wb.sheetnames == ["Summary", "Memory", "Scaling", "Alternatives", "Facility & cost", "Audit", "Intake"]
    assert wb.active.title == "Summary"
    assert [bool(ws.sheet_view.tabSelected) for ws in wb.worksheets] == [True] + [False] * 6


def test_summary_figures_equal_the_json(tmp_path, grid_for):
    grid_for()
    _, wb, doc, _ = quote(tmp_path)
    ws = wb["Summary"]
    assert ws["A1"].value == "Compute sizing quote"
    table = {r[0]: (r[1], r[2]) for r in rows(ws) if r[0]}
    assert "≈ 19.2 days on 512 × H100 SXM5 80GB" in table
    results = doc["results"]
    assert table["Training time days"] == (results["training_time_days"], "days")
    assert table["Gpu hours"] == (results["gpu_hours"], "GPU-hours")
    assert table["Cost total"] == (results["cost_total"], "USD")
    assert table["Memory per gpu gb"] == (results["memory_per_gpu_gb"], "GB")
    assert table["Fits in memory"][0] == "Yes" and results["fits_in_memory"] is True
    assert table["Bottleneck"][0] == "compute"
    assert table["GPU"][0] == "512 × H100 SXM5 80GB"
    assert HOSTILE_WARNING in table                       # the warning, word for word
    assert table["Utilization"][0] == 0.4                 # an assumption the intake left out


def test_number_formats_and_units(tmp_path, grid_for):
    grid_for()
    _, wb, _, _ = quote(tmp_path)
    by_label = {r[0].value: r for r in wb["Summary"].iter_rows() if r[0].value}
    assert by_label["Training time days"][1].number_format == "#,##0.00"
    assert by_label["Cost total"][1].number_format == "#,##0"
    assert by_label["Utilization"][1].number_format == "0.0%"
    audit = {r[1].value: r for r in wb["Audit"].iter_rows(min_row=2)}
    assert audit["training_flops"][3].number_format == "0.00E+00"
    assert audit["utilization_used"][3].number_format == "0.0%"
    assert audit["peak_tflops_per_gpu"][3].number_format == "#,##0.0"
    assert audit["training_flops"][4].value == "FLOP"


def test_memory_sheet_and_its_bar_chart(tmp_path, grid_for):
    grid_for()
    _, wb, doc, _ = quote(tmp_path)
    ws = wb["Memory"]
    data = rows(ws)
    assert data[0] == ("Item", "GB", "Share of GPU memory")
    assert data[1:7] == [("Weights gb", 140, 1.75), ("Gradients gb", 140, 1.75),
                         ("Optimizer gb", 840, 10.5), ("Activations gb", 31.5, 31.5 / 80),
                         ("Needed per GPU", 62.5, 62.5 / 80), ("GPU memory", 80, 1)]
    assert ws["C2"].number_format == "0.0%"
    (chart,) = ws._charts
    assert type(chart).__name__ == "BarChart" and chart.type == "bar"
    (series,) = chart.series
    assert series.val.numRef.f == "'Memory'!$B$2:$B$7"
    assert series.cat.strRef.f == "'Memory'!$A$2:$A$7"
    assert chart.x_axis.delete is False and chart.y_axis.delete is False
    assert ws.freeze_panes == "A2"
    assert doc["results"]["optimizer_gb"] == ws["B4"].value


def test_scaling_sheet_table_and_line_chart(tmp_path, grid_for):
    grid_for()
    _, wb, doc, _ = quote(tmp_path)
    ws = wb["Scaling"]
    head = [c.value for c in ws[1]]
    assert head == ["GPUs", "Training time days", "Speedup", "Ideal (linear)",
                    "Efficiency", "Gpu hours (GPU-hours)", "Cost total (USD)", "Fits in memory"]
    counts = [ws.cell(row=r, column=1).value for r in range(2, 13)]
    assert counts == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert [row["gpu_count"] for row in doc["scaling"]] == counts
    assert ws["B11"].value == pytest.approx(doc["scaling"][9]["training_time_days"])
    assert ws["C2"].value == pytest.approx(1.0) and ws["C2"].number_format == '0.00"×"'
    assert ws["E6"].value == pytest.approx(0.9) and ws["E6"].number_format == "0.0%"
    assert ws["H2"].value == "No" and ws["H6"].value == "Yes"
    assert ws["A11"].fill.fgColor.rgb.endswith("E8F1FB")          # the quoted row stands out
    (chart,) = ws._charts
    assert type(chart).__name__ == "LineChart"
    assert [s.val.numRef.f for s in chart.series] == ["'Scaling'!$C$2:$C$12", "'Scaling'!$D$2:$D$12"]
    assert [s.tx.strRef.f for s in chart.series] == ["'Scaling'!C1", "'Scaling'!D1"]
    assert chart.series[0].cat.numRef.f == "'Scaling'!$A$2:$A$12"
    assert ws.freeze_panes == "B2"


def test_scaling_sheet_says_so_without_a_grid(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "scaling_grid", lambda *args: None)
    _, wb, doc, _ = quote(tmp_path)
    assert wb["Scaling"]["A1"].value == "The scaling table could not be computed for this quote."
    assert doc["scaling"] == [] and not wb["Scaling"]._charts


def test_audit_lists_every_step(tmp_path, grid_for):
    grid_for()
    job, wb, doc, _ = quote(tmp_path)
    ws = wb["Audit"]
    assert [c.value for c in ws[1]] == ["Group", "Rule", "Label", "Value", "Unit", "Formula",
                                        "Inputs used", "Defined in", "Why", "Catalog and table lines",
                                        "Go to each input"]
    body = rows(ws)[1:]
    assert [r[1] for r in body] == list(TRAINING)
    peak = body[2]
    assert peak[:3] == ("compute", "peak_tflops_per_gpu", "Peak tflops per gpu")
    assert peak[3] == doc["trace"][2]["value"] == 989.4
    assert peak[5] == "peak_tflops_per_gpu_input * 2"
    assert peak[6] == "peak_tflops_per_gpu_input = 494.7"
    assert peak[7] == "rules/compute.yaml:5"
    assert ws.auto_filter.ref == f"A1:K{len(body) + 1}" and ws.freeze_panes == "D2"


def test_print_setup_fits_the_page(tmp_path, grid_for):
    grid_for()
    _, wb, _, _ = quote(tmp_path)
    for ws in wb.worksheets:
        assert ws.page_setup.fitToWidth == 1 and ws.sheet_properties.pageSetUpPr.fitToPage
    assert wb["Audit"].page_setup.orientation == "landscape"
    assert wb["Audit"].print_title_rows == "$1:$1"
    assert wb["Summary"].column_dimensions["A"].width == 46


@pytest.mark.parametrize("text", HOSTILE)
def test_typed_text_never_becomes_a_formula(tmp_path, grid_for, text):
    grid_for()
    job = make_job(tmp_path)
    set_input(job, "customer", text)
    xlsx = write_quote(job, ("xlsx",))[0]
    wb = openpyxl.load_workbook(xlsx)
    cells = [c for ws in wb.worksheets for row in ws.iter_rows() for c in row if c.value == text]
    assert len(cells) >= 2                                 # Summary and the Intake listing
    for cell in cells:
        assert cell.data_type == "s" and cell.quotePrefix
    with zipfile.ZipFile(xlsx) as z:
        sheets = [n for n in z.namelist() if n.startswith("xl/worksheets/sheet")]
        assert sheets and not any(b"<f>" in z.read(n) or b"<f " in z.read(n) for n in sheets)


def test_control_characters_do_not_break_the_workbook(tmp_path, grid_for):
    grid_for()
    job = make_job(tmp_path)
    set_input(job, "customer", "Bell\x07 Co.\x00")
    wb = openpyxl.load_workbook(write_quote(job, ("xlsx",))[0])
    assert wb["Summary"]["B2"].value == "Bell Co."


def test_yaml_intake_listed_with_sources(tmp_path, grid_for):
    grid_for()
    _, wb, _, _ = quote(tmp_path)
    data = rows(wb["Intake"])
    assert data[0] == ("Key", "Label", "Value", "Entered in")
    assert ("gpu_count", "GPU count", 512, "training.yaml:9") in data
    assert ("customer", "Customer", HOSTILE_CUSTOMER, "training.yaml:1") in data


def _filled_intake(path):
    """A small stand-in for the salesperson's workbook: named input cells and a drop-down."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Intake"
    for row, (key, value) in enumerate(TRAINING_INPUTS.items(), 2):
        ws.cell(row=row, column=1, value=key)
        ws.cell(row=row, column=3, value=value).data_type = "s" if isinstance(value, str) else "n"
        wb.defined_names[key] = DefinedName(key, attr_text=f"Intake!$C${row}")
    dv = DataValidation(type="list", formula1='"H100,A100,V100"')
    ws.add_data_validation(dv)
    dv.add("C9")
    wb.create_sheet("How to fill")["A1"] = "Fill the yellow cells."
    wb.save(path)


def test_workbook_intake_kept_as_filled(tmp_path, grid_for):
    grid_for()
    source = tmp_path / "acme.xlsx"
    _filled_intake(source)
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    intake = Intake(values=dict(TRAINING_INPUTS), origin=source, kind="xlsx", language="en",
                    sources={k: f"Intake!C{i}" for i, k in enumerate(TRAINING_INPUTS, 2)})
    _, wb, _, _ = quote(tmp_path, intake=intake)
    assert wb.sheetnames == ["Summary", "Memory", "Scaling", "Alternatives", "Facility & cost", "Audit", "Intake", "How to fill"]
    ws = wb["Intake"]
    assert [ws.cell(row=r, column=3).value for r in range(2, 2 + len(TRAINING_INPUTS))] == \
        list(TRAINING_INPUTS.values())
    assert ws["C2"].data_type == "s" and ws["C2"].value == HOSTILE_CUSTOMER
    assert wb.defined_names["gpu_count"].attr_text == "Intake!$C$10"
    assert ws.data_validations.dataValidation[0].formula1 == '"H100,A100,V100"'
    assert wb["How to fill"]["A1"].value == "Fill the yellow cells."
    assert wb.active.title == "Summary"
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before   # the original is untouched


@pytest.mark.parametrize("lang, names, headline", [
    ("zh-TW", ["摘要", "記憶體", "擴展性", "替代方案", "機房與成本", "計算明細", "需求"], "約 19.2 天，使用 512 × H100 SXM5 80GB"),
    ("zh-CN", ["摘要", "显存", "扩展性", "替代方案", "机房与成本", "计算明细", "需求"], "约 19.2 天，使用 512 × H100 SXM5 80GB"),
])
def test_workbook_in_the_intake_language(tmp_path, grid_for, lang, names, headline):
    grid_for()
    _, wb, _, _ = quote(tmp_path, lang=lang)
    assert wb.sheetnames == names
    values = [v for r in rows(wb[names[0]]) for v in r if v]
    assert headline in values
    assert wb[names[5]]["C2"].value.startswith("繁：" if lang == "zh-TW" else "简：")


def test_outputs_appear_whole_or_not_at_all(tmp_path, grid_for, monkeypatch):
    grid_for()
    job = make_job(tmp_path)
    paths = write_quote(job)
    assert [p.name for p in paths] == ["training.quote.xlsx", "training.quote.html",
                                       "training.quote.json"]
    assert sorted(p.name for p in job.outdir.iterdir()) == sorted(p.name for p in paths)

    def broken(src, dst):
        raise OSError("disk full")
    from engine import files
    monkeypatch.setattr(files.os, "replace", broken)     # the one atomic writer every output uses
    job.stem = "second"
    with pytest.raises(OSError):
        write_quote(job, ("xlsx",))
    assert sorted(p.name for p in job.outdir.iterdir()) == sorted(p.name for p in paths)


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="pdf"):
        write_quote(make_job(tmp_path), ("xlsx", "pdf"))
