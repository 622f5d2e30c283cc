"""Reading a filled intake workbook by its defined names; hostile or broken files get one clear sentence."""

from __future__ import annotations

import io
import warnings
import zipfile
from pathlib import Path
from typing import Any

from engine.intake.form import LANGUAGE_NAME, VERSION_NAME, Form, current_form
from engine.intake.lenient import printable
from engine.intake.model import Intake
from engine.paths import LANGUAGES
from engine.problems import Problem, SizingError

MAX_FILE_BYTES = 10_000_000        # a filled template is ~30 KB
MAX_UNPACKED_BYTES = 50_000_000    # sum of the parts' declared sizes; zipfile never inflates past them
# The XML parts openpyxl parses, together (a filled template holds ~70 KB). openpyxl reads
# about 3 MB of sheet XML a second, so this keeps any accepted file to well under 2 s,
# and a data export pasted into the workbook is refused before a single sheet is parsed.
MAX_XML_BYTES = 2_000_000
XML_SUFFIXES = (".xml", ".rels", ".vml")
MAX_PARTS = 500
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"   # legacy .xls, and every password-encrypted workbook
ZIP_MAGIC = b"PK\x03\x04"
FORMULA_TYPES = ("number", "integer")               # the fields whose value may be calculated
FORMULA_STARTS = ("=", "+", "-", "@")               # what a spreadsheet takes for a formula


def read_workbook(path: Path) -> Intake:
    """Values of every named input cell, where they sit (Intake!C12) and what was typed.

    Cells are found by their defined names, so moved rows, added notes or other sheets
    do not matter. Text is kept as typed; the validator reads numbers and choices.
    """
    path = Path(path)
    form = current_form()
    data = _read_bytes(path, form)
    _check_container(data, path.name, form)     # the zip directory and xl/workbook.xml, no sheet
    workbook = _open(data, path.name, form, data_only=False)
    cells = named_cells(workbook)
    lang = _check_template(workbook, cells, path.name, form)
    values, sources, raw, formulas = {}, {}, {}, {}
    for key in form.fields:
        if key.lower() not in cells:
            continue
        sheet, coord = cells[key.lower()]
        sources[key] = f"{sheet}!{coord}"       # also for empty cells: problems point at them
        cell = workbook[sheet][coord]
        if cell.data_type == "f":
            formulas[key] = cell.value
        elif cell.value is not None:
            values[key] = raw[key] = cell.value
    if formulas or has_formulas(workbook):
        _cached_results(data, path.name, form, lang, cells, formulas, values, raw, sources, workbook)
    for key in values:
        _keep_as_text(workbook[cells[key.lower()][0]][cells[key.lower()][1]])
    return Intake(values=values, sources=sources, raw=raw, origin=path, kind="xlsx", language=lang,
                  book=workbook)


def named_cells(workbook) -> dict[str, tuple[str, str]]:
    """Lower-case defined name → (sheet, cell), workbook-wide or sheet-local (as LibreOffice may save)."""
    found: dict[str, tuple[str, str]] = {}
    scopes = [workbook.defined_names.values()] + [ws.defined_names.values() for ws in workbook.worksheets]
    for names in scopes:
        for dn in names:
            try:
                targets = list(dn.destinations)
            except Exception:  # noqa: BLE001 — a constant or formula name is not an input cell
                continue
            if len(targets) == 1 and ":" not in targets[0][1] and targets[0][0] in workbook.sheetnames:
                found.setdefault(dn.name.lower(), (targets[0][0], targets[0][1].replace("$", "")))
    return found


def _fail(code: str, where: str, form: Form, lang: str = "en", **words) -> SizingError:
    return SizingError([Problem(code, where, form.message(code, lang, **words), "sales")])


def _read_bytes(path: Path, form: Form) -> bytes:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise _fail("file.too_big", path.name, form, name=path.name, size=round(size / 1e6, 1),
                    limit=MAX_FILE_BYTES // 1_000_000)
    return path.read_bytes()


def _check_container(data: bytes, name: str, form: Form) -> None:
    """Everything that can be known before any sheet is parsed: the zip directory and the
    workbook's defined names (a few KB in xl/workbook.xml)."""
    if not data:
        raise _fail("file.empty", name, form, name=name)
    if data.startswith(OLE_MAGIC):
        raise _fail("file.encrypted" if _encrypted(data) else "file.old_xls", name, form, name=name)
    if not data.startswith(ZIP_MAGIC):
        raise _fail("file.not_xlsx", name, form, name=name, kind=form.text(_kind(data), "en"))
    too_big = _too_big(name, form, MAX_XML_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts = archive.infolist()
            names = {p.filename.lower() for p in parts}
            types = _part(archive, "[content_types].xml", too_big) or b""
            book = _part(archive, "xl/workbook.xml", too_big)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, RuntimeError,
            NotImplementedError):      # RuntimeError: an encrypted entry; NotImplementedError: odd compression
        raise _fail("file.corrupt", name, form, name=name) from None
    if len(parts) > MAX_PARTS:
        raise _fail("file.bomb", name, form, name=name, why=form.text("bomb_parts", "en", limit=MAX_PARTS))
    if sum(p.file_size for p in parts) > MAX_UNPACKED_BYTES:
        raise _too_big(name, form, MAX_UNPACKED_BYTES)
    if any(n.endswith("vbaproject.bin") for n in names) or b"macroEnabled" in types:
        raise _fail("file.macros", name, form, name=name)
    if book is None:
        raise _fail("file.not_xlsx", name, form, name=name, kind=form.text("kind_zip", "en"))
    if VERSION_NAME not in _defined_names(book, name, form):
        raise _fail("file.not_template", name, form, name=name)
    if sum(p.file_size for p in parts if p.filename.lower().endswith(XML_SUFFIXES)) > MAX_XML_BYTES:
        raise too_big


def _too_big(name: str, form: Form, limit: int) -> SizingError:
    return _fail("file.bomb", name, form, name=name, why=form.text("bomb_size", "en", limit=limit // 1_000_000))


def _part(archive: zipfile.ZipFile, lower_name: str, too_big: SizingError) -> bytes | None:
    """One part's bytes, inflated no further than MAX_XML_BYTES whatever its entry claims; None if absent."""
    entry = next((i for i in archive.infolist() if i.filename.lower() == lower_name), None)
    if entry is None:
        return None
    with archive.open(entry) as part:
        body = part.read(MAX_XML_BYTES + 1)
    if len(body) > MAX_XML_BYTES:
        raise too_big
    return body


def _defined_names(book: bytes, name: str, form: Form) -> set[str]:
    """The lower-case defined names of xl/workbook.xml, workbook-wide or sheet-local."""
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import ParseError, fromstring
    try:
        root = fromstring(book)
    except DefusedXmlException:
        raise _fail("file.bomb", name, form, name=name, why=form.text("bomb_xml", "en")) from None
    except (ParseError, ValueError):
        raise _fail("file.corrupt", name, form, name=name) from None
    return {str(e.get("name") or "").lower() for e in root.iter()
            if isinstance(e.tag, str) and e.tag.rpartition("}")[2] == "definedName"}


def _encrypted(data: bytes) -> bool:
    import msoffcrypto
    try:
        return bool(msoffcrypto.OfficeFile(io.BytesIO(data)).is_encrypted())
    except Exception:  # noqa: BLE001 — an OLE file msoffcrypto cannot parse is an old .xls (or not Excel)
        return False


def _kind(data: bytes) -> str:
    if data.startswith(b"%PDF"):
        return "kind_pdf"
    try:
        data[:4096].decode("utf-8")
        return "kind_text"
    except UnicodeDecodeError:
        return "kind_text" if b"\x00" not in data[:4096] else "kind_unknown"


def _open(data: bytes, name: str, form: Form, data_only: bool):
    from defusedxml import DefusedXmlException
    from openpyxl import load_workbook
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # openpyxl warns about extensions it drops; not our concern
            return load_workbook(io.BytesIO(data), data_only=data_only, keep_links=False)
    except Exception as error:  # noqa: BLE001 — any parser failure is said in one sentence
        if _caused_by(error, DefusedXmlException):     # openpyxl wraps it in a ValueError
            raise _fail("file.bomb", name, form, name=name, why=form.text("bomb_xml", "en")) from None
        raise _fail("file.corrupt", name, form, name=name) from None


def _caused_by(error: BaseException | None, kind: type) -> bool:
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, kind):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def _check_template(workbook, cells: dict, name: str, form: Form) -> str:
    """The template's language; refuses other workbooks and other template versions."""
    if VERSION_NAME not in cells:
        raise _fail("file.not_template", name, form, name=name)
    lang = str(_cell(workbook, cells.get(LANGUAGE_NAME)) or "en").strip()
    lang = lang if lang in LANGUAGES else "en"
    found = _cell(workbook, cells[VERSION_NAME])
    try:
        same = int(float(found)) == form.version
    except (TypeError, ValueError):
        same = False
    if not same:
        raise _fail("file.template_version", name, form, lang, name=name, found=found, expected=form.version)
    return lang


def _cell(workbook, location: tuple[str, str] | None) -> Any:
    return workbook[location[0]][location[1]].value if location else None


def _cached_results(data, name, form, lang, cells, formulas, values, raw, sources, workbook) -> None:
    """Formula cells count by the result Excel saved, in number fields only (a formula in a name
    is how a link or a DDE call gets into a quote); checked then like typed values. Every formula
    of the workbook, input or not, becomes its saved result in the copy the quote is built on."""
    cached = _open(data, name, form, data_only=True)
    problems = []
    for key, formula in formulas.items():
        value = _cell(cached, cells[key.lower()])
        label = form.label(key, lang)
        if form.fields[key].type not in FORMULA_TYPES:
            problems.append(Problem("file.formula_not_allowed", sources[key],
                                    form.message("file.formula_not_allowed", lang, label=label,
                                                 formula=formula), "sales", formula, {"key": key}))
        elif value is None:
            problems.append(Problem("file.formula_no_value", sources[key],
                                    form.message("file.formula_no_value", lang, label=label,
                                                 formula=formula), "sales", formula, {"key": key}))
        else:
            values[key], raw[key] = value, value
    without_formulas(workbook, cached)
    if problems:
        raise SizingError(problems)


def without_formulas(workbook, cached) -> None:
    """Values, never formulas, in anything written from `workbook`: each formula cell becomes
    the result its file saved (`cached`: the same file opened with data_only), or, without one,
    its formula as plain text."""
    for sheet in workbook.worksheets:
        for cell in _formula_cells(sheet):
            value = cached[sheet.title][cell.coordinate].value
            cell.value = value if value is not None else str(getattr(cell.value, "text", cell.value))
            _keep_as_text(cell)


def has_formulas(workbook) -> bool:
    return any(True for sheet in workbook.worksheets for _ in _formula_cells(sheet))


def _formula_cells(sheet):
    # _cells holds only the cells the file has; iter_rows would make every empty one in the range.
    return [cell for cell in sheet._cells.values() if cell.data_type == "f"]


def _keep_as_text(cell) -> None:
    """Text without control characters, and text, not a formula (openpyxl takes any text that
    starts with `=` for one); marked so that it stays text when someone edits the cell."""
    if isinstance(cell.value, str):
        cell.value = printable(cell.value)
        cell.data_type = "s"
        cell.quotePrefix = cell.value.startswith(FORMULA_STARTS)
