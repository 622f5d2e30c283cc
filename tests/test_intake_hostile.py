"""Hostile and broken files: each gets one clear sentence, never a traceback. Every file is built here."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from openpyxl import Workbook
from test_intake_kit import BASE, blank, filled, rezip

from engine.cli import main
from engine.intake.read import read
from engine.job import run_job
from engine.problems import SizingError

BILLION_LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
                  + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                             for i in range(1, 10))
                  + b"]>")


def empty(tmp: Path) -> Path:
    path = tmp / "empty.xlsx"
    path.write_bytes(b"")
    return path


def csv_renamed(tmp: Path) -> Path:
    path = tmp / "intake.xlsx"
    path.write_text("customer,workload,gpu\nAcme,pretraining,H100\n", encoding="utf-8")
    return path


def pdf_renamed(tmp: Path) -> Path:
    path = tmp / "quote.xlsx"
    path.write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n")
    return path


def old_xls(tmp: Path) -> Path:
    # An OLE compound-file header is how every Excel 97-2003 .xls begins.
    path = tmp / "intake.xls"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 16 + b"\x3e\x00\x03\x00\xfe\xff" + b"\x00" * 998)
    return path


def password_protected(tmp: Path) -> Path:
    from msoffcrypto.format.ooxml import OOXMLFile
    out = io.BytesIO()
    with open(filled(tmp, BASE, name="plain.xlsx"), "rb") as source:
        OOXMLFile(source).encrypt("s3cret", out)
    path = tmp / "locked.xlsx"
    path.write_bytes(out.getvalue())
    return path


def truncated(tmp: Path) -> Path:
    data = filled(tmp, BASE, name="whole.xlsx").read_bytes()
    path = tmp / "cut.xlsx"
    path.write_bytes(data[: len(data) // 2])
    return path


def corrupt(tmp: Path) -> Path:
    data = bytearray(filled(tmp, BASE, name="whole.xlsx").read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("xl/worksheets/sheet1.xml")
    start = info.header_offset + 30 + len(info.filename) + 50      # inside the compressed sheet
    data[start:start + 64] = bytes(64)
    path = tmp / "garbled.xlsx"
    path.write_bytes(bytes(data))
    return path


def with_macros(tmp: Path) -> Path:
    def change(name, body):
        if name == "[Content_Types].xml":
            return body.replace(b"spreadsheetml.sheet.main+xml", b"sheet.macroEnabled.main+xml")
        return body
    path = rezip(filled(tmp, BASE), tmp / "intake.xlsm", change)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("xl/vbaProject.bin", b"\xd0\xcf\x11\xe0 Sub AutoOpen() Shell(...) End Sub")
    return path


def zip_bomb(tmp: Path) -> Path:
    path = rezip(blank(tmp), tmp / "bomb.xlsx", lambda name, body: body)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/media/padding.bin", bytes(60_000_000))      # 60 MB of zeros, ~60 KB packed
    return path


def many_parts(tmp: Path) -> Path:
    path = rezip(blank(tmp), tmp / "parts.xlsx", lambda name, body: body)
    with zipfile.ZipFile(path, "a") as archive:
        for i in range(600):
            archive.writestr(f"xl/extra/part{i}.xml", b"<x/>")
    return path


def xml_bomb(tmp: Path) -> Path:
    def change(name, body):
        if name == "xl/workbook.xml":
            return BILLION_LAUGHS + body.split(b"?>", 1)[-1] if body.startswith(b"<?xml") else \
                BILLION_LAUGHS + body
        return body
    return rezip(filled(tmp, BASE), tmp / "laughs.xlsx", change)


def external_entity(tmp: Path) -> Path:
    def change(name, body):
        if name == "xl/worksheets/sheet1.xml":
            return (b'<?xml version="1.0"?><!DOCTYPE w [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
                    + body.replace(b"Acme Corp", b"&x;"))
        return body
    return rezip(filled(tmp, BASE), tmp / "xxe.xlsx", change)


def not_our_template(tmp: Path) -> Path:
    wb = Workbook()
    wb.active["A1"], wb.active["B1"] = "GPUs", 8
    path = tmp / "budget.xlsx"
    wb.save(path)
    return path


def older_template(tmp: Path) -> Path:
    from openpyxl import load_workbook
    path = filled(tmp, BASE)
    wb = load_workbook(path)
    wb["Lists"]["B1"] = 0            # the hidden version mark a version-0 template carried
    wb.save(path)
    return path


def docx_like_zip(tmp: Path) -> Path:
    path = tmp / "letter.xlsx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:document/>")
    return path


def too_big(tmp: Path) -> Path:
    path = tmp / "huge.xlsx"
    with open(path, "wb") as f:
        f.truncate(11_000_000)
    return path


HOSTILE = [
    (empty, "file.empty", "is empty"),
    (csv_renamed, "file.not_xlsx", "text or CSV"),
    (pdf_renamed, "file.not_xlsx", "PDF"),
    (old_xls, "file.old_xls", "97–2003"),
    (password_protected, "file.encrypted", "password"),
    (truncated, "file.corrupt", "damaged"),
    (corrupt, "file.corrupt", "damaged"),
    (with_macros, "file.macros", "macros"),
    (zip_bomb, "file.bomb", "unpacks to more than"),
    (many_parts, "file.bomb", "parts"),
    (xml_bomb, "file.bomb", "entity"),
    (external_entity, "file.bomb", "entity"),
    (not_our_template, "file.not_template", "not the sizing intake template"),
    (older_template, "file.template_version", "version 0"),
    (docx_like_zip, "file.not_xlsx", "zip archive"),
    (too_big, "file.too_big", "limit"),
]


@pytest.mark.parametrize("build, code, words", HOSTILE, ids=[h[0].__name__ for h in HOSTILE])
def test_hostile_file_gets_one_clear_sentence(tmp_path, build, code, words):
    path = build(tmp_path)
    with pytest.raises(SizingError) as caught:
        read(path)
    (problem,) = caught.value.problems
    assert problem.code == code and problem.where == path.name
    assert words in problem.message and path.name in problem.message
    assert "Traceback" not in problem.message and problem.message.count(". ") <= 2


@pytest.mark.parametrize("build, code, words", HOSTILE[:4], ids=[h[0].__name__ for h in HOSTILE[:4]])
def test_hostile_file_through_the_job_and_the_cli(tmp_path, capsys, build, code, words):
    path = build(tmp_path)
    before = path.read_bytes()
    job = run_job(path, tmp_path / "out")
    assert job.status == "failed" and [p.code for p in job.problems] == [code]
    assert main(["quote", str(path), "-o", str(tmp_path / "out")]) == 2
    assert words in capsys.readouterr().err
    assert path.read_bytes() == before
