"""Reading filled workbooks: by defined names, as Excel and LibreOffice save them, tolerant of typing."""

from __future__ import annotations

import pytest
from openpyxl import load_workbook
from test_intake_kit import (BASE, catalogs, cell_of, excel_style, filled, libreoffice_style,
                             with_cached_formula)

from engine.intake.read import read
from engine.intake.validate import validate
from engine.intake.workbook import named_cells, read_workbook
from engine.problems import SizingError

TYPED = [  # (key, what a person typed, the value after validation), on top of BASE
    ("gpu_count", "8 GPUs", 8),
    ("gpu_count", " 8 ", 8),
    ("gpu_count", "８", 8),
    ("gpu_count", "16.0", 16),
    ("training_tokens_billion", "1,000", 1000.0),
    ("training_tokens_billion", "2T", 2000.0),
    ("training_tokens_billion", "１，５００", 1500.0),
    ("dataset_gb", "1 TB", 1000.0),
    ("sample_kb", "100 KB", 100.0),
    ("utilization", "40%", 0.4),
    ("utilization", "４０％", 0.4),
    ("utilization", 0.4, 0.4),
    ("flash_attention", "是", True),
    ("flash_attention", "否", False),
    ("flash_attention", "No ", False),
    ("activation_checkpointing", True, True),
    ("activation_checkpointing", "yes", True),
    ("workload", "  Pretraining  ", "pretraining"),
    ("workload", "預訓練", "pretraining"),
    ("precision", "fp16 ", "fp16"),
    ("gpu", "RTX 4090", "nvidia-rtx-4090"),
    ("gpu", "GeForce RTX 4090", "nvidia-rtx-4090"),
    ("model", "Llama 3.1 70B", "llama-3.1-70b"),
    ("customer", "  Acme  Corp ", "Acme Corp"),
    ("currency", "twd", "TWD"),
    ("flops_per_sample", "180e9", 180e9),
    ("samples", "1M", 1_000_000),
    ("training_framework", "NeMo", "megatron"),
    ("training_framework", "torchtitan ", "torchtitan"),
    ("training_framework", "HF Accelerate", "hf-transformers"),
    ("training_framework", "LitGPT", "hf-transformers"),
    ("training_framework", "NeMo AutoModel", "fsdp"),
    ("lora_targets", "q,v", "query-value"),
    ("sequence_lengths", "packed", "fixed"),
]


@pytest.mark.parametrize("key, typed, expected", TYPED, ids=[f"{k}={t!r}" for k, t, _ in TYPED])
def test_what_people_type_is_understood(tmp_path, key, typed, expected):
    extra = {"sample_kb": 100} if key == "dataset_gb" else {"dataset_gb": 100} if key == "sample_kb" else {}
    intake = read(filled(tmp_path, {**BASE, **extra}, typed={key: typed}))
    assert intake.raw[key] == typed and intake.sources[key] == cell_of(key)
    assert validate(intake, catalogs()) == []
    assert intake.values[key] == expected and type(intake.values[key]) is type(expected)


def test_reader_records_cells_language_and_kind(tmp_path):
    intake = read_workbook(filled(tmp_path, {**BASE, "language": "zh-CN"}, lang="zh-CN"))
    assert intake.kind == "xlsx" and intake.language == "zh-CN"
    assert intake.sources["gpu_count"] == cell_of("gpu_count", "zh-CN")
    assert intake.values["workload"] == "预训练"             # as typed; the validator makes it canonical
    assert "epochs" not in intake.values and intake.sources["epochs"].startswith("需求表!")


def test_moved_rows_and_added_notes_do_not_matter(tmp_path):
    path = filled(tmp_path, BASE)
    wb = load_workbook(path)
    sheet, coord = named_cells(wb)["gpu_count"]
    wb[sheet][coord].value = "see note"          # the old place now holds a note
    wb[sheet]["G40"] = 16                         # the cell moved, and its name went with it
    wb.defined_names["gpu_count"].attr_text = "'Intake'!$G$40"
    notes = wb.create_sheet("My notes", 0)
    notes["A1"] = "Customer asked for a quote by Friday"
    wb.save(path)
    intake = read(path)
    assert validate(intake, catalogs()) == []
    assert intake.values["gpu_count"] == 16 and intake.sources["gpu_count"] == "Intake!G40"


def test_excel_saved_file_with_shared_strings(tmp_path):
    path = excel_style(filled(tmp_path, BASE, lang="zh-TW"), tmp_path / "excel.xlsx")
    intake = read(path)
    assert validate(intake, catalogs()) == []
    assert intake.values["workload"] == "pretraining" and intake.language == "zh-TW"


def test_libreoffice_style_sheet_local_names(tmp_path):
    path = libreoffice_style(filled(tmp_path, BASE), tmp_path / "calc.xlsx")
    assert b'localSheetId="0"' in __import__("zipfile").ZipFile(path).read("xl/workbook.xml")
    intake = read(path)
    assert validate(intake, catalogs()) == []
    assert intake.values["gpu_count"] == 8 and intake.sources["gpu_count"] == cell_of("gpu_count")


def test_formula_cells_count_by_their_cached_value(tmp_path):
    path = filled(tmp_path, BASE, typed={"gpu_count": "=4*4"})
    intake = read(with_cached_formula(path, tmp_path / "saved.xlsx", "4*4", "16"))
    assert validate(intake, catalogs()) == [] and intake.values["gpu_count"] == 16


def test_formula_without_cached_value_says_how_to_fix_it(tmp_path):
    path = filled(tmp_path, BASE, typed={"gpu_count": "=4*4", "epochs": "=1+1"})
    with pytest.raises(SizingError) as caught:
        read(path)
    assert sorted((p.code, p.where) for p in caught.value.problems) == sorted(
        [("file.formula_no_value", cell_of("epochs")), ("file.formula_no_value", cell_of("gpu_count"))])
    assert "save it" in caught.value.problems[0].message


def test_zh_template_labels_and_yes_no_round_trip(tmp_path):
    values = {**BASE, "language": "zh-TW", "workload": "fine-tuning", "finetune_method": "qlora",
              "activation_checkpointing": True, "flash_attention": False}
    path = filled(tmp_path, values, lang="zh-TW")
    intake = read(path)
    assert intake.values["activation_checkpointing"] == "是" and intake.values["finetune_method"] == "QLoRA"
    assert validate(intake, catalogs()) == []
    assert intake.values["activation_checkpointing"] is True and intake.values["flash_attention"] is False
    assert intake.values["finetune_method"] == "qlora"
