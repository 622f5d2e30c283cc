"""The quote workbooks, opened again with openpyxl: the customer's (sheets, figures, charts, formats, hostile
text) and the salesperson's audit trail (every rule, the intake as received, the rule set)."""

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
from engine.quote.messages import BINARY_GB

HOSTILE = [HOSTILE_CUSTOMER, HOSTILE_PROJECT, "+cmd|' /C calc'!A0", "-1+1", "@SUM(1+1)*cmd|' /C calc'!A0"]


def quote(tmp_path, workload="training", lang="en", intake=None):
    job = make_job(tmp_path, workload, lang, intake)
    paths = write_quote(job)
    xlsx, _, js, _ = paths
    return job, openpyxl.load_workbook(xlsx), json.loads(js.read_text(encoding="utf-8")), xlsx


def trail(tmp_path, workload="training", lang="en", intake=None):
    """The salesperson's <stem>.audit.xlsx of the same hand-built quote, and the job."""
    job = make_job(tmp_path, workload, lang, intake)
    (path,) = write_quote(job, ("audit",))
    assert path.name == f"{job.stem}.audit.xlsx"
    return job, openpyxl.load_workbook(path)


def rows(ws):
    return [r for r in ws.iter_rows(values_only=True)]


def test_sheets_in_order_and_summary_first(tmp_path, grid_for):
    grid_for()
    _, wb, _, _ = quote(tmp_path)
    assert wb.sheetnames == ["Summary", "Memory", "Scaling", "Alternatives", "Facility & cost"]   # the customer's only
    assert wb.active.title == "Summary"
    assert [bool(ws.sheet_view.tabSelected) for ws in wb.worksheets] == [True] + [False] * 4
    _, audit = trail(tmp_path)
    assert audit.sheetnames == ["Audit", "Intake", "About"]


def test_the_audit_trail_names_the_rule_set_and_the_intake_file(tmp_path, grid_for):
    grid_for()
    _, wb = trail(tmp_path)
    about = dict(rows(wb["About"]))
    assert about["Rule set"] == "rs-test123456" and about["Intake file"] == "training.yaml"
    assert about["Customer"] == HOSTILE_CUSTOMER


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
    # GB as the GPU's name counts it (2³⁰ bytes): the JSON's 62.5 GB of 10⁹ bytes are 58.2 of them
    assert table["Memory per gpu gb"] == (pytest.approx(results["memory_per_gpu_gb"] / BINARY_GB), "GB")
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
    _, trail_wb = trail(tmp_path)
    audit = {r[1].value: r for r in trail_wb["Audit"].iter_rows(min_row=2)}
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
    # every figure in the GPU's own GB (÷ 1.0737, 2³⁰/10⁹); shares of the GPU's memory are unchanged
    gb = [140, 140, 840, 31.5, 62.5, 85.89934592]
    assert [r[0] for r in data[1:7]] == ["Weights gb", "Gradients gb", "Optimizer gb", "Activations gb",
                                         "Needed per GPU", "GPU memory"]
    assert [r[1] for r in data[1:7]] == pytest.approx([g / BINARY_GB for g in gb])
    assert [r[2] for r in data[1:7]] == pytest.approx([g / 85.89934592 for g in gb])
    assert data[6][1] == pytest.approx(80)              # the "80 GB" GPU shows 80 GB, not 85.9
    assert ws["C2"].number_format == "0.0%"
    (chart,) = ws._charts
    assert type(chart).__name__ == "BarChart" and chart.type == "bar"
    (series,) = chart.series
    assert series.val.numRef.f == "'Memory'!$B$2:$B$7"
    assert series.cat.strRef.f == "'Memory'!$A$2:$A$7"
    assert chart.x_axis.delete is False and chart.y_axis.delete is False
    assert ws.freeze_panes == "A2"
    assert doc["results"]["optimizer_gb"] == pytest.approx(ws["B4"].value * BINARY_GB)   # the JSON keeps 10⁹ bytes


def test_scaling_sheet_table_and_line_chart(tmp_path, grid_for):
    grid_for()
    _, wb, doc, _ = quote(tmp_path)
    ws = wb["Scaling"]
    head = [c.value for c in ws[1]]
    assert head == ["GPUs", "Layout", "Training time days", "Speedup", "Ideal (linear)",
                    "Scaling efficiency", "Gpu hours (GPU-hours)", "Cost total (USD)", "Fits in memory"]
    counts = [ws.cell(row=r, column=1).value for r in range(2, 13)]
    assert counts == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert [row["gpu_count"] for row in doc["scaling"]] == counts
    assert ws["B6"].value == "Tensor parallel 8, ZeRO stage 1, Micro-batch size 1"   # each count names its layout
    assert ws["C11"].value == pytest.approx(doc["scaling"][9]["training_time_days"])
    # 1 GPU cannot hold the model: no time or speedup on its row (nothing quoted as if it ran)
    assert ws["C2"].value == "—" and ws["D2"].value == "—" and ws["D6"].number_format == '0.00"×"'
    assert ws["F6"].value == pytest.approx(0.9) and ws["F6"].number_format == "0.0%"
    assert ws["I2"].value == "No" and ws["I6"].value == "Yes"
    assert ws["A11"].fill.fgColor.rgb.endswith("E8F1FB")          # the quoted row stands out
    (chart,) = ws._charts
    assert type(chart).__name__ == "LineChart"
    assert [s.val.numRef.f for s in chart.series] == ["'Scaling'!$D$2:$D$12", "'Scaling'!$E$2:$E$12"]
    assert [s.tx.strRef.f for s in chart.series] == ["'Scaling'!D1", "'Scaling'!E1"]
    assert chart.series[0].cat.numRef.f == "'Scaling'!$A$2:$A$12"
    assert ws.freeze_panes == "B2"


def test_scaling_sheet_says_so_without_a_grid(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "scaling_grid", lambda *args: None)
    _, wb, doc, _ = quote(tmp_path)
    assert wb["Scaling"]["A1"].value == "The scaling table could not be computed for this quote."
    assert doc["scaling"] == [] and not wb["Scaling"]._charts


def test_audit_lists_every_step(tmp_path, grid_for):
    grid_for()
    job, _, doc, _ = quote(tmp_path)
    _, wb = trail(tmp_path)
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
    _, audit = trail(tmp_path)
    for ws in wb.worksheets + audit.worksheets:
        # one page wide (1 is also OOXML's default, which XlsxWriter leaves unwritten)
        assert ws.page_setup.fitToWidth in (1, None) and ws.sheet_properties.pageSetUpPr.fitToPage
    assert audit["Audit"].page_setup.orientation == "landscape"
    assert audit["Audit"].print_title_rows == "$1:$1"
    assert wb["Summary"].column_dimensions["A"].width == 46


def test_the_audit_prints_its_ten_derivation_columns_legibly(tmp_path, grid_for):
    """Issue 22: the Audit printed as one unreadable page, 26 columns (one per input link) squeezed onto it.
    Printed now: columns A–J only (the link columns are for clicking), landscape, fit to width and as
    many pages tall as it needs, the header repeated on each. Legible: A4 landscape holds ≈ 241 mm
    (297 − 2 × 28 mm margins); one unit of Excel column width is ≈ 1.9 mm at 100%, so ≈ 127 units
    print at full size. At 200 units a page scales to ≈ 63% — 11-point text prints at ≈ 7 points."""
    grid_for()
    _, wb = trail(tmp_path)
    ws = wb["Audit"]
    assert ws.print_area == "'Audit'!$A$1:$J$" + str(ws.max_row)
    assert ws.page_setup.orientation == "landscape"
    assert ws.sheet_properties.pageSetUpPr.fitToPage and ws.page_setup.fitToWidth in (1, None)   # 1: the default
    assert ws.page_setup.fitToHeight == 0 and ws.print_title_rows == "$1:$1"
    printed = [ws.column_dimensions[c].width for c in "ABCDEFGHIJ"]
    assert sum(printed) <= 200, printed
    assert ws.max_column > 10          # the links are still there, beside the printed area


@pytest.mark.parametrize("text", HOSTILE)
def test_typed_text_never_becomes_a_formula(tmp_path, grid_for, text):
    grid_for()
    job = make_job(tmp_path)
    set_input(job, "customer", text)
    xlsx, audit = write_quote(job, ("xlsx", "audit"))
    for path, least in ((xlsx, 1), (audit, 2)):     # the Summary; the Intake (value used) and About
        wb = openpyxl.load_workbook(path)
        cells = [c for ws in wb.worksheets for row in ws.iter_rows() for c in row if c.value == text]
        assert len(cells) >= least, path.name
        for cell in cells:
            assert cell.data_type == "s" and cell.quotePrefix
        with zipfile.ZipFile(path) as z:
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
    _, wb = trail(tmp_path)
    data = rows(wb["Intake"])
    assert data[0] == ("Key", "Label", "As typed", "Value used", "Entered in")
    assert ("gpu_count", "GPU count", 512, 512, "training.yaml:9") in data
    assert ("customer", "Customer", HOSTILE_CUSTOMER, HOSTILE_CUSTOMER, "training.yaml:1") in data


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


def test_a_workbook_intake_stays_out_of_the_customers_workbook_and_is_listed_in_the_trail(tmp_path, grid_for):
    """Issue 22: the customer's workbook carried the intake's own sheets ("How to fill": "e-mail it to the
    quotes mailbox"). Now it holds the quote alone; the audit trail lists every value as received, by cell."""
    grid_for()
    source = tmp_path / "acme.xlsx"
    _filled_intake(source)
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    intake = Intake(values=dict(TRAINING_INPUTS), origin=source, kind="xlsx", language="en",
                    sources={k: f"Intake!C{i}" for i, k in enumerate(TRAINING_INPUTS, 2)},
                    raw={"gpu": "h100 "})
    _, wb, _, _ = quote(tmp_path, intake=intake)
    assert wb.sheetnames == ["Summary", "Memory", "Scaling", "Alternatives", "Facility & cost"]
    assert "How to fill" not in wb.sheetnames and not wb.defined_names
    assert wb.active.title == "Summary"
    _, audit = trail(tmp_path, intake=intake)
    listed = {r[0]: r[1:] for r in rows(audit["Intake"])[1:]}
    assert set(listed) == set(TRAINING_INPUTS)
    assert listed["gpu_count"] == ("GPU count", 512, 512, "Intake!C10")
    assert listed["gpu"] == ("GPU", "h100 ", "H100", "Intake!C9")         # as typed, and as used
    assert listed["customer"][1] == HOSTILE_CUSTOMER
    assert dict(rows(audit["About"]))["Intake file"] == "acme.xlsx"
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before   # the original is untouched


@pytest.mark.parametrize("lang, names, headline", [
    ("zh-TW", ["摘要", "記憶體", "擴展性", "替代方案", "機房與成本", "計算明細", "需求", "關於"], "約 19.2 天，使用 512 × H100 SXM5 80GB"),
    ("zh-CN", ["摘要", "显存", "扩展性", "替代方案", "机房与成本", "计算明细", "需求", "关于"], "约 19.2 天，使用 512 × H100 SXM5 80GB"),
])
def test_workbook_in_the_intake_language(tmp_path, grid_for, lang, names, headline):
    grid_for()
    _, wb, _, _ = quote(tmp_path, lang=lang)
    assert wb.sheetnames == names[:5]
    values = [v for r in rows(wb[names[0]]) for v in r if v]
    assert headline in values
    _, audit = trail(tmp_path, lang=lang)
    assert audit.sheetnames == names[5:]
    assert audit[names[5]]["C2"].value.startswith("繁：" if lang == "zh-TW" else "简：")


def test_outputs_appear_whole_or_not_at_all(tmp_path, grid_for, monkeypatch):
    grid_for()
    job = make_job(tmp_path)
    paths = write_quote(job)
    assert [p.name for p in paths] == ["training.quote.xlsx", "training.quote.html",
                                       "training.quote.json", "training.audit.xlsx"]
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
