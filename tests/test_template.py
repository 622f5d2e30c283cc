"""The intake template: generated from the form, committed as generated, fillable without training."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from openpyxl import load_workbook
from test_intake_kit import catalogs

from engine.cli import main
from engine.contract import EXTRA_INPUT_TYPES, INPUT_TYPES
from engine.intake.form import current_form, load_form, localized
from engine.intake.template import list_name, template_path, write_template
from engine.intake.workbook import named_cells
from engine.paths import LANGUAGES, RULES_DIR
from engine.problems import SizingError

FORM = current_form()


def parts(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.fixture(scope="module", params=LANGUAGES)
def generated(request, tmp_path_factory):
    lang = request.param
    path = write_template(tmp_path_factory.mktemp(lang) / "intake.xlsx", lang, catalogs())
    return lang, path, load_workbook(path)


def test_committed_template_is_what_the_generator_writes(generated):
    lang, path, _ = generated
    committed = template_path(lang)
    assert committed.is_file(), f"run `sizing template --lang {lang} -o {committed}`"
    assert parts(committed) == parts(path), (
        f"{committed} is out of date with rules/intake.yaml or the catalogs; regenerate it with "
        f"`sizing template --lang {lang} -o {committed}`")


def test_generation_is_byte_for_byte_reproducible(generated, tmp_path):
    lang, path, _ = generated
    assert write_template(tmp_path / "again.xlsx", lang, catalogs()).read_bytes() == path.read_bytes()


def test_every_field_has_a_named_unlocked_input_cell(generated):
    lang, _, wb = generated
    cells = named_cells(wb)
    ws = wb[FORM.sheet("intake", lang)]
    assert ws.protection.sheet
    for key, field in FORM.fields.items():
        sheet, coord = cells[key]
        assert sheet == ws.title and coord.startswith("C")
        assert ws[coord].protection.locked is False, key
        row = ws[coord].row
        assert ws[f"B{row}"].value == localized(field.label, lang)
        assert ws[f"B{row}"].protection.locked                       # labels cannot be overtyped
    assert {"sizing_template_version", "sizing_template_language"} <= set(cells)


def test_choices_have_drop_downs_and_numbers_have_ranges(generated):
    lang, _, wb = generated
    cells = named_cells(wb)
    ws = wb[FORM.sheet("intake", lang)]
    rules = {str(dv.sqref): dv for dv in ws.data_validations.dataValidation}
    for key, field in FORM.fields.items():
        coord = cells[key][1]
        if list_name(field):
            assert rules[coord].type == "list" and rules[coord].formula1 == f"list_{list_name(field)}", key
        elif field.type in ("number", "integer"):
            dv = rules[coord]
            assert dv.type == ("whole" if field.type == "integer" else "decimal") and dv.operator == "between"
            assert float(dv.formula1) == field.min and float(dv.formula2) == field.max, key
            assert dv.errorStyle in (None, "stop") and dv.error


def test_lists_hold_catalog_gpus_and_models_in_a_hidden_sheet(generated):
    lang, _, wb = generated
    lists = wb[FORM.sheet("lists", lang)]
    assert lists.sheet_state == "hidden"
    column = {lists.cell(1, c).value: [lists.cell(r, c).value for r in range(2, lists.max_row + 1)]
              for c in range(4, lists.max_column + 1)}
    assert [g for g in column["gpu"] if g] == [FORM.catalog_name(name, lang) for _, name in catalogs().gpu_choices()]
    assert column["model"][0] == FORM.text("custom_model", lang)
    if lang != "en":                 # whole in the language: no English words, no half-width brackets
        shown = [v for values in column.values() for v in values if isinstance(v, str)]
        assert "H100 NVL（每張 GPU）" in shown or "H100 NVL（每张 GPU）" in shown
        assert [v for v in shown if re.search(r"[()]|per GPU|edge module|generation|cased", v)] == []
        assert wb.sheetnames[0] == FORM.sheet("intake", lang) == "需求表"
    assert [w for w in column["workload"] if w] == [localized(c.label, lang) for c in FORM.choices["workload"]]


def test_how_to_sheet_in_the_template_language(generated):
    lang, _, wb = generated
    how = wb[FORM.sheet("how_to", lang)]
    assert how["A1"].value == FORM.texts["how_to"][lang][0]
    assert wb.sheetnames == [FORM.sheet(n, lang) for n in ("intake", "how_to", "lists")]


def test_cli_writes_a_template(tmp_path, capsys):
    out = tmp_path / "blank.zh-CN.xlsx"
    assert main(["template", "--lang", "zh-CN", "-o", str(out)]) == 0
    assert parts(out) == parts(template_path("zh-CN"))


def test_form_declares_every_contract_key():
    assert set(INPUT_TYPES) | set(EXTRA_INPUT_TYPES) <= set(FORM.fields)


def test_form_mistakes_point_at_file_and_line(tmp_path):
    text = (RULES_DIR / "intake.yaml").read_text(encoding="utf-8")
    broken = text.replace("    type: integer\n    default: 1\n    unit: {en: GPUs",
                          "    type: integr\n    default: 1\n    unit: {en: GPUs", 1)
    broken = broken.replace("  - key: gpus_per_node\n", "  - key: gpus_per_node\n    lable: oops\n", 1)
    path = tmp_path / "intake.yaml"
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(SizingError) as caught:
        load_form(path)
    found = {p.where: p.message for p in caught.value.problems}
    type_line = broken[: broken.index("type: integr")].count("\n") + 1
    lable_line = broken[: broken.index("lable: oops")].count("\n") + 1
    assert "type must be one of" in found[f"rules/intake.yaml:{type_line}"]
    assert "did you mean `label`" in found[f"rules/intake.yaml:{lable_line}"]


def test_form_yaml_syntax_error_shows_the_line(tmp_path):
    path = tmp_path / "intake.yaml"
    path.write_text("version: 1\nfields:\n  - key: [oops\n", encoding="utf-8")
    with pytest.raises(SizingError) as caught:
        load_form(path)
    assert caught.value.problems[0].where.startswith("rules/intake.yaml:")


def test_chinese_wording_uses_one_punctuation_style():
    """Full-width ，；：（） next to Chinese in every zh text of the form, the folder service's notes
    and the sweep's words; half-width ones there are a slip (a test fails on each)."""
    from ruamel.yaml import YAML

    from engine.services.watch.reasons import NOTES
    cjk = r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]"
    slip = re.compile(rf"(?<={cjk})[,;:?!()]|[,;:?!()](?={cjk})")
    found = []

    def walk(node, path, lang=None):
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}", key if key in ("zh-TW", "zh-CN") else lang)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]", lang)
        elif isinstance(node, str) and lang and slip.search(node):
            found.append(f"{path}: {node}")

    walk(YAML(typ="safe").load((RULES_DIR / "intake.yaml").read_text(encoding="utf-8")), "rules/intake.yaml")
    walk({lang: NOTES[lang] for lang in ("zh-TW", "zh-CN")}, "watch notes")
    for lang in ("zh-TW", "zh-CN"):
        table = YAML(typ="safe").load((RULES_DIR.parent / "templates" / "messages" / f"{lang}.yaml")
                                      .read_text(encoding="utf-8"))
        walk({lang: table["sweep"]}, f"templates/messages/{lang}.yaml sweep")
    assert found == []
