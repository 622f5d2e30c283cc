"""Hostile and broken files: each gets one clear sentence, never a traceback. Every file is built here."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from openpyxl import Workbook
from test_intake_kit import BASE, blank, filled, rezip

from tests.conftest import ROOT

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


def no_content_types(tmp: Path) -> Path:
    return rezip(filled(tmp, BASE), tmp / "parts-missing.xlsx",
                 lambda name, body: None if name == "[Content_Types].xml" else body)


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
# Also for the reader alone (HOSTILE is shared with the watch service's 200-file batch).
READER_ONLY = [(no_content_types, "file.corrupt", "damaged")]


@pytest.mark.parametrize("build, code, words", HOSTILE + READER_ONLY,
                         ids=[h[0].__name__ for h in HOSTILE + READER_ONLY])
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


# -- large workbooks: answered from the zip directory and xl/workbook.xml, before any sheet is parsed --

ANSWER_SECONDS = 2.0      # the issue's bound, for the services' tests that import it
ANSWER_READS = 20         # …here measured instead: as long as 20 reads of a normal workbook, now,
                          # on this machine (≈ 1 s); the slowest answer takes ≈ 2 reads' time


@pytest.fixture
def answer_bound(tmp_path) -> float:
    """Seconds a hostile file may take to be answered: ANSWER_READS times the median of three
    reads of a normal filled workbook, measured in the same test (the machine may be busy)."""
    from engine.authoring.gate import consult
    from engine.paths import CATALOGS_DIR, RULES_DIR
    # The rule set published, as on any machine after its first quote: the first `sizing quote` after a
    # rules edit runs the gate (seconds of validation), and each test process starts with an empty cache —
    # that is not what is timed here (the CLI call below failed whenever it came first in its process).
    consult(RULES_DIR, CATALOGS_DIR)
    path = filled(tmp_path, BASE, name="normal.xlsx")
    read(path)                                   # the form and openpyxl loaded, as for the file under test
    times = []
    for _ in range(3):
        started = time.perf_counter()
        read(path)
        times.append(time.perf_counter() - started)
    return ANSWER_READS * sorted(times)[1]


def fastest_seconds(call, runs: int = 2) -> float:
    """The fastest of a few runs of `call`: other work on a busy machine only ever adds time (the suite runs two
    workers per CPU), so the fastest is the closest to what the code itself takes."""
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


SHEET_TYPE = b"application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"


def export_rows(megabytes: float, first_row: int = 1) -> bytes:
    """Rows of numbers as a data export holds them, about `megabytes` of sheet XML."""
    rows, size, r = [], 0, first_row
    while size < megabytes * 1_000_000:
        row = (f'<row r="{r}">' + "".join(f'<c r="{c}{r}"><v>{r * 7 + i}.0625</v></c>'
                                         for i, c in enumerate("ABCDEFGH")) + "</row>").encode()
        rows.append(row)
        size, r = size + len(row), r + 1
    return b"".join(rows)


def add_export_sheet(source: Path, out: Path, megabytes: float) -> Path:
    """The workbook with one more sheet, "Export", holding `megabytes` of rows."""
    def change(name, body):
        if name == "[Content_Types].xml":
            return body.replace(b"</Types>", b'<Override PartName="/xl/worksheets/export.xml" '
                                b'ContentType="' + SHEET_TYPE + b'"/></Types>')
        if name == "xl/_rels/workbook.xml.rels":
            return body.replace(b"</Relationships>", b'<Relationship Id="rIdExport" Type="http://schemas.'
                                b'openxmlformats.org/officeDocument/2006/relationships/worksheet" '
                                b'Target="worksheets/export.xml"/></Relationships>')
        if name == "xl/workbook.xml":
            return body.replace(b"</sheets>", b'<sheet name="Export" sheetId="99" r:id="rIdExport"/></sheets>')
        return body
    rezip(source, out, change)
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/worksheets/export.xml",
                         b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
                         b"<sheetData>" + export_rows(megabytes) + b"</sheetData></worksheet>")
    return out


def export_sheet_28mb(tmp: Path) -> Path:
    """A filled intake with a data export dropped in as a sheet of its own: ~2 MB packed, 28 MB of XML."""
    return add_export_sheet(filled(tmp, BASE, name="base.xlsx"), tmp / "with-export.xlsx", 28)


def rows_pasted_into_intake_15mb(tmp: Path) -> Path:
    """15 MB of rows pasted below the form on the Intake sheet itself."""
    def change(name, body):
        if name == "xl/worksheets/sheet1.xml":
            return body.replace(b"</sheetData>", export_rows(15, first_row=1000) + b"</sheetData>")
        return body
    return rezip(filled(tmp, BASE, name="base.xlsx"), tmp / "pasted.xlsx", change)


def data_export_28mb(tmp: Path) -> Path:
    """Not an intake at all: a 28 MB data export, sent by mistake."""
    return add_export_sheet(not_our_template(tmp), tmp / "export.xlsx", 28)


LARGE = [
    (export_sheet_28mb, "file.bomb", "unpacks to more than 2 MB"),
    (rows_pasted_into_intake_15mb, "file.bomb", "unpacks to more than 2 MB"),
    (data_export_28mb, "file.not_template", "not the sizing intake template"),
]


@pytest.fixture(scope="module")
def large_files(tmp_path_factory) -> dict[str, Path]:
    """Each large file built once for the module (building 28 MB of XML takes a moment)."""
    folder = tmp_path_factory.mktemp("large")
    out = {}
    for build, _, _ in LARGE:
        (folder / build.__name__).mkdir()
        out[build.__name__] = build(folder / build.__name__)
    return out


def test_the_large_files_are_what_the_issue_describes(large_files):
    for name, path in large_files.items():
        with zipfile.ZipFile(path) as archive:
            biggest = max(i.file_size for i in archive.infolist())
        assert path.stat().st_size < 3_000_000 and biggest > 14_000_000, (name, path.stat().st_size, biggest)


@pytest.mark.parametrize("build, code, words", LARGE, ids=[b.__name__ for b, _, _ in LARGE])
def test_a_large_workbook_is_answered_at_once_by_the_reader_the_job_and_the_cli(
        large_files, tmp_path, capsys, ruleset, build, code, words, answer_bound):
    path = large_files[build.__name__]
    with pytest.raises(SizingError) as caught:
        read(path)
    (problem,) = caught.value.problems
    assert problem.code == code and words in problem.message and path.name in problem.message

    def reader():
        with pytest.raises(SizingError):
            read(path)

    def cli():
        assert main(["quote", str(path), "-o", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.strip() == f"{path.name}: {problem.message}"   # one line, nothing else

    assert fastest_seconds(reader) < answer_bound
    job = run_job(path, tmp_path / "out", ruleset=ruleset)
    assert job.status == "failed" and [p.code for p in job.problems] == [code]
    assert job.seconds < answer_bound and job.outputs == []
    assert fastest_seconds(cli) < answer_bound


def test_a_workbook_just_under_the_bound_is_still_quoted(tmp_path, ruleset):
    path = add_export_sheet(filled(tmp_path, BASE, name="base.xlsx"), tmp_path / "notes.xlsx", 1.5)
    job = run_job(path, tmp_path / "out", ruleset=ruleset)
    assert job.ok, job.problems


def test_a_part_that_inflates_past_its_declared_size_is_never_read_past_it(tmp_path, answer_bound):
    """The zip directory lies: workbook.xml claims 1 KB but holds 40 MB. zipfile stops at the claim."""
    path = filled(tmp_path, BASE)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("xl/workbook.xml")
    lying = rezip(path, tmp_path / "lying.xlsx", lambda name, body: body + b" " * 40_000_000
                  if name == "xl/workbook.xml" else body)
    data = bytearray(lying.read_bytes())
    size = (info.file_size).to_bytes(4, "little")
    with zipfile.ZipFile(lying) as archive:
        entry = archive.getinfo("xl/workbook.xml")
    local = entry.header_offset + 22                     # uncompressed size in the local header
    data[local:local + 4] = size
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(b"xl/workbook.xml") + 1)
    data[central + 24:central + 28] = size               # and in the central directory
    lying.write_bytes(bytes(data))
    started = time.perf_counter()
    with pytest.raises(SizingError) as caught:
        read(lying)
    assert time.perf_counter() - started < answer_bound
    assert [p.code for p in caught.value.problems] == ["file.corrupt"]


# -- text intakes: every malformed or hostile YAML/JSON gets one sentence ------------------------

def text_file(name: str, content: str | bytes):
    def build(tmp: Path) -> Path:
        path = tmp / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return path
    build.__name__ = name.replace(".", "_").replace("-", "_")
    return build


TEXT_HOSTILE = [
    (text_file("deep-list.json", "[" * 100_000 + "]" * 100_000), "file.shape", "nested more than 32 levels"),
    (text_file("deep-object.json", '{"customer": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001),
     "file.shape", "nested more than 32 levels"),
    (text_file("a-bit-deep.json", '{"customer": ' + "[" * 40 + "]" * 40 + "}"), "file.shape", "nested more than"),
    (text_file("deep-flow.yaml", "customer: " + "[" * 100_000 + "]" * 100_000 + "\n"),
     "yaml.too_deep", "nested more than 32 levels"),
    (text_file("deep-dashes.yaml", "- " * 100_000 + "1\n"), "yaml.too_deep", "nested more than 32 levels"),
    (text_file("deep-block.yaml", "".join(" " * i + "a:\n" for i in range(1_000)) + " " * 1_000 + "b: 1\n"),
     "yaml.too_deep", "nested more than 32 levels"),
    (text_file("long-number.json", '{"customer": "x", "gpu_count": ' + "9" * 5_000 + "}"),
     "file.syntax", "5,000 digits"),
    (text_file("long-number.yaml", "customer: x\ngpu_count: " + "9" * 5_000 + "\n"), "yaml.value", "a number"),
    (text_file("not-a-date.yaml", "customer: x\nproject: 2024-13-45\n"), "yaml.value", "looks like a date"),
    (text_file("many-keys.yaml", "".join(f"key_{i}: {i}\n" for i in range(500))), "file.shape", "500 keys"),
    (text_file("many-keys.json", json.dumps({f"key_{i}": i for i in range(500)})), "file.shape", "500 keys"),
    (text_file("flood.yaml", "".join(f"key_{i}: {i}\n" for i in range(60_000))), "yaml.too_big", "2,000 values"),
    (text_file("flood.json", json.dumps({"customer": list(range(100_000))})), "file.too_big", "2,000 values"),
    (text_file("flood-list.yaml", "customer: [" + ",".join(["1"] * 400_000) + "]\n"), "yaml.too_big", "2,000"),
    (text_file("too-big.json", json.dumps({"customer": "x" * 1_100_000})), "file.too_big", "larger than"),
    (text_file("truncated.json", '{"customer": "Acme", "gpu_count": '), "file.syntax", "not valid JSON"),
    (text_file("unclosed.yaml", "customer: [Acme\nworkload: pretraining\n"), "yaml.syntax", "is never closed"),
    (text_file("binary.yaml", bytes(range(256)) * 8), "yaml.syntax", "control characters"),
    (text_file("python-object.yaml", "customer: !!python/object/apply:os.system [id]\n"), "yaml.tag", "not allowed"),
    (text_file("a-list.json", "[1, 2, 3]"), "file.shape", "must be a mapping"),
]


@pytest.mark.parametrize("build, code, words", TEXT_HOSTILE, ids=[b.__name__ for b, _, _ in TEXT_HOSTILE])
def test_hostile_text_intake_gets_one_sentence_at_once(tmp_path, build, code, words, answer_bound):
    path = build(tmp_path)
    started = time.perf_counter()
    with pytest.raises(SizingError) as caught:
        read(path)
    assert time.perf_counter() - started < answer_bound
    (problem,) = caught.value.problems
    assert problem.code == code and words in problem.message, problem
    assert problem.where.split(":")[0] == path.name and problem.fixer == "sales"
    assert "Traceback" not in problem.message and "Error" not in problem.message


def test_hostile_text_intakes_through_one_cli_process(tmp_path):
    """In a process of its own: `- - - …` 100,000 deep used to crash the interpreter (SIGSEGV)."""
    paths = [build(tmp_path) for build, _, _ in TEXT_HOSTILE]
    proc = subprocess.run([sys.executable, "-m", "engine", "quote", *map(str, paths), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    first_lines = [line for line in proc.stderr.splitlines() if line.split(":")[0] in {p.name for p in paths}]
    assert sorted({line.split(":")[0] for line in first_lines}) == sorted(p.name for p in paths)


def test_a_utf16_json_intake_is_read(tmp_path):
    path = tmp_path / "notepad.json"
    path.write_bytes(json.dumps({"customer": "Société Générale", "gpu_count": 8}).encode("utf-16"))
    assert read(path).values == {"customer": "Société Générale", "gpu_count": 8}


def test_a_huge_value_is_quoted_by_its_start_and_its_length(tmp_path, capsys):
    """A 120,000-character model name: one sentence that quotes its first characters and says how
    long it is — not a 120,000-character line — and the file stays as it was."""
    name = "meta-llama/" + "Llama-" * 20_000
    path = tmp_path / "huge-name.yaml"
    path.write_text(f"customer: T\nworkload: online-inference\nmodel: \"{name}\"\nprecision: bf16\n"
                    "gpu: H100\ngpu_count: 8\nprompt_tokens: 100\noutput_tokens: 10\n", encoding="utf-8")
    before = path.read_bytes()
    assert main(["quote", str(path), "-o", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "meta-llama/Llama-Llama" in line and f"({len(name):,} characters)" in line
    assert len(line) < 400
    assert path.read_bytes() == before
