"""Helpers for the intake tests: real templates filled through defined names, and files rewritten
the way other programs save them (Excel's shared strings, LibreOffice's sheet-local names)."""

from __future__ import annotations

import functools
import re
import zipfile
from html import escape, unescape
from pathlib import Path

from openpyxl import load_workbook

from engine.calc.catalogs import load_catalogs
from engine.intake.read import read
from engine.intake.template import write_template
from engine.intake.workbook import named_cells

# A valid English intake: pretraining an 8B model on 8 × H100.
BASE = {"customer": "Acme Corp", "workload": "pretraining", "model": "llama-3.1-8b",
        "training_tokens_billion": 100, "precision": "bf16", "gpu": "H100", "gpu_count": 8}


@functools.lru_cache(maxsize=1)
def catalogs():
    return load_catalogs()


def serving_release_intake(folder: Path, engine: str, release: str, gpu: str, extra: str = ""):
    """A one-GPU serving intake naming a stack and a release, read from a YAML file as the CLI reads it."""
    source = folder / "intake.yaml"
    source.write_text("customer: Test Co.\nworkload: online-inference\nmodel: llama-2-7b\n"
                      f"gpu: {gpu}\ngpu_count: 1\nprecision: fp16\n{extra}prompt_tokens: 100\noutput_tokens: 200\n"
                      f"serving_engine: {engine}\nserving_engine_release: {release}\n", encoding="utf-8")
    return read(source)


@functools.lru_cache(maxsize=8)
def _blank_bytes(lang: str) -> bytes:
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        return write_template(Path(folder) / "blank.xlsx", lang, catalogs()).read_bytes()


def blank(folder: Path, lang: str = "en", name: str = "blank.xlsx") -> Path:
    path = Path(folder) / name
    path.write_bytes(_blank_bytes(lang))
    return path


def filled(folder: Path, values: dict, lang: str = "en", name: str = "intake.xlsx",
           typed: dict | None = None) -> Path:
    """A template in `lang` filled with canonical values shown as the drop-downs show them,
    then `typed` raw entries (text, numbers, None to clear) as a person would type them."""
    from engine.intake.form import current_form
    from engine.intake.model import Intake
    from engine.intake.template import display_value
    from engine.intake.validate import validate
    form = current_form()
    intake = Intake(values=dict(values))
    validate(intake, catalogs())           # normalises; a deliberately incomplete start is fine
    wb = load_workbook(blank(folder, lang, f"blank-{lang}.xlsx"))
    cells = named_cells(wb)
    for key, value in intake.values.items():
        if intake.sources.get(key) != "default":
            sheet, coord = cells[key]
            wb[sheet][coord].value = display_value(form, form.fields[key], value, lang, catalogs())
    for key, value in (typed or {}).items():
        sheet, coord = cells[key]
        wb[sheet][coord].value = value
    wb.save(Path(folder) / name)
    return Path(folder) / name


@functools.lru_cache(maxsize=8)
def _cells(lang: str) -> dict[str, str]:
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        return {k: f"{s}!{c}" for k, (s, c) in named_cells(load_workbook(blank(Path(folder), lang))).items()}


def cell_of(key: str, lang: str = "en") -> str:
    """"Intake!C12": where the blank template of `lang` keeps a key (found by its defined name)."""
    return _cells(lang)[key.lower()]


def type_into(path: Path, **typed) -> Path:
    """Type raw values (text, numbers, None to clear) into named cells, as a person would."""
    wb = load_workbook(path)
    cells = named_cells(wb)
    for key, value in typed.items():
        sheet, coord = cells[key.lower()]
        wb[sheet][coord].value = value
    wb.save(path)
    return path


def rezip(path: Path, out: Path, change) -> Path:
    """Rewrite a workbook part by part: change(name, bytes) → bytes, or None to drop the part."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = change(info.filename, src.read(info.filename))
            if body is not None:
                dst.writestr(info.filename, body)
    return out


def excel_style(path: Path, out: Path) -> Path:
    """Inline strings moved into a shared-strings table, as Excel saves them."""
    strings: list[str] = []

    def to_shared(match):
        strings.append(unescape(re.sub(r"<[^>]+>", "", match.group(2))))
        return f'{match.group(1)}t="s"><v>{len(strings) - 1}</v></c>'

    def change(name, body):
        if name.startswith("xl/worksheets/sheet"):
            return re.sub(r'(<c [^>]*?)t="inlineStr"><is>(.*?)</is></c>', to_shared,
                          body.decode("utf-8"), flags=re.S).encode("utf-8")
        return body

    tmp = rezip(path, out.with_suffix(".tmp.xlsx"), change)
    shared = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
              '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
              f'count="{len(strings)}" uniqueCount="{len(strings)}">'
              + "".join(f"<si><t>{escape(s, quote=False)}</t></si>" for s in strings) + "</sst>")

    def add_table(name, body):
        if name == "[Content_Types].xml":
            return body.replace(b"</Types>", b'<Override PartName="/xl/sharedStrings.xml" ContentType='
                                b'"application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
                                b"</Types>")
        if name == "xl/_rels/workbook.xml.rels":
            return body.replace(b"</Relationships>", b'<Relationship Id="rIdSST" Type="http://schemas.'
                                b'openxmlformats.org/officeDocument/2006/relationships/sharedStrings" '
                                b'Target="sharedStrings.xml"/></Relationships>')
        return body

    rezip(tmp, out, add_table)
    with zipfile.ZipFile(out, "a") as archive:
        archive.writestr("xl/sharedStrings.xml", shared)
    tmp.unlink()
    return out


def libreoffice_style(path: Path, out: Path) -> Path:
    """Input names scoped to the Intake sheet (localSheetId) with unquoted sheet names, as
    LibreOffice Calc may save them; strings stay inline."""
    def change(name, body):
        if name == "xl/workbook.xml":
            return re.sub(rb"<definedName name=\"((?!sizing_|list_)[a-z_]+)\">'Intake'!",
                          rb'<definedName name="\1" localSheetId="0">Intake!', body)
        return body
    return rezip(path, out, change)


def with_cached_formula(path: Path, out: Path, formula: str, cached: str | None) -> Path:
    """A formula cell carrying Excel's saved result (<v>), which openpyxl cannot write itself."""
    def change(name, body):
        if name.startswith("xl/worksheets/sheet"):
            old = f"<f>{escape(formula)}</f><v />".encode()
            new = f"<f>{escape(formula)}</f><v>{cached}</v>".encode() if cached is not None else old
            return body.replace(old, new)
        return body
    return rezip(path, out, change)


def test_kit_builds_a_valid_workbook(tmp_path):
    from engine.intake.validate import validate
    intake = read(filled(tmp_path, BASE))
    assert validate(intake, catalogs()) == []
    assert intake.values["gpu"] == "nvidia-h100-sxm5-80gb"


def test_excel_style_file_uses_shared_strings(tmp_path):
    out = excel_style(filled(tmp_path, BASE), tmp_path / "excel.xlsx")
    with zipfile.ZipFile(out) as archive:
        assert b"inlineStr" not in archive.read("xl/worksheets/sheet1.xml")
        assert b"Acme Corp" in archive.read("xl/sharedStrings.xml")
    assert load_workbook(out)["Intake"]["B6"].value

