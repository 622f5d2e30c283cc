"""Invalid workbooks come back annotated: bad cells red with a comment, a Problems sheet, original untouched."""

from __future__ import annotations

import hashlib

from openpyxl import load_workbook
from test_intake_kit import BASE, cell_of, filled

from engine.cli import main
from engine.job import run_job

TYPED = {"gpu_count": "eight", "utilization": 40, "gpu": "H1000"}


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_invalid_workbook_gets_an_annotated_copy(tmp_path):
    source = filled(tmp_path, BASE, typed=TYPED)
    before = digest(source)
    job = run_job(source, tmp_path / "out")
    assert job.status == "invalid" and len(job.problems) == 3
    (out,) = job.outputs
    assert out == tmp_path / "out" / "intake.errors.xlsx"
    assert digest(source) == before                         # the salesperson's file is never changed
    assert not list((tmp_path / "out").glob(".*tmp"))       # written under a temp name, then renamed
    wb = load_workbook(out)
    assert wb.sheetnames[0] == "Problems" and wb.active.title == "Problems"
    for key in TYPED:
        sheet, coord = cell_of(key).split("!")
        cell = wb[sheet][coord]
        assert cell.comment is not None and cell.fill.fgColor.rgb.endswith("FFC7CE"), key
        assert cell.value == TYPED[key]                     # what they typed stays, to be corrected
    rows = list(wb["Problems"].iter_rows(min_row=4, values_only=True))
    assert sorted(r[0] for r in rows) == sorted(cell_of(k) for k in TYPED)
    assert all(r[2] for r in rows)
    assert wb["Intake"]["C6"].value == "Acme Corp"          # everything else is kept


def test_errors_workbook_speaks_the_template_language(tmp_path):
    source = filled(tmp_path, {**BASE, "language": "zh-TW"}, lang="zh-TW", typed={"gpu_count": "eight"})
    (out,) = run_job(source, tmp_path / "out").outputs
    wb = load_workbook(out)
    assert wb.sheetnames[0] == "問題"
    assert "GPU 數量" in wb["問題"]["C4"].value


def test_cross_field_problem_marks_the_cell_to_fill(tmp_path):
    source = filled(tmp_path, {**BASE, "workload": "online-inference", "output_tokens": 100})
    job = run_job(source, tmp_path / "out")
    assert [(p.code, p.where) for p in job.problems] == [("needs_inference_tokens", cell_of("prompt_tokens"))]
    sheet, coord = cell_of("prompt_tokens").split("!")
    assert load_workbook(job.outputs[0])[sheet][coord].comment is not None


def test_cli_exits_2_and_prints_every_problem(tmp_path, capsys):
    source = filled(tmp_path, BASE, typed=TYPED)
    assert main(["quote", str(source), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    for key in TYPED:
        assert f"{cell_of(key)}: " in err
    assert "intake.errors.xlsx" in err


def test_valid_workbook_is_quoted(tmp_path):
    job = run_job(filled(tmp_path, BASE), tmp_path / "out")
    assert job.ok, job.problems
    assert job.results.values["training_time_hours"] > 0


def test_corrected_errors_workbook_can_be_sent_again(tmp_path):
    from test_intake_kit import type_into
    (annotated,) = run_job(filled(tmp_path, BASE, typed=TYPED), tmp_path / "out").outputs
    type_into(annotated, gpu_count=8, utilization="40%", gpu="H100")
    job = run_job(annotated, tmp_path / "again")
    assert job.ok, job.problems
    assert job.intake.values["utilization"] == 0.4


def test_errors_workbook_sent_again_with_a_remaining_problem_is_marked_afresh(tmp_path):
    from test_intake_kit import type_into
    (annotated,) = run_job(filled(tmp_path, BASE, typed=TYPED), tmp_path / "out").outputs
    type_into(annotated, gpu_count=8, gpu="H100")              # utilization still wrong
    job = run_job(annotated, tmp_path / "again")
    assert [p.code for p in job.problems] == ["max"]
    wb = load_workbook(job.outputs[0])
    assert wb.sheetnames.count("Problems") == 1 and len(list(wb["Problems"].iter_rows(min_row=4))) == 1
    sheet, coord = cell_of("gpu_count").split("!")
    assert wb[sheet][coord].comment is None and not wb[sheet][coord].fill.fgColor.rgb.endswith("FFC7CE")
    sheet, coord = cell_of("utilization").split("!")
    assert wb[sheet][coord].comment is not None
