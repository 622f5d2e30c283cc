"""The blank intake workbook, generated from the form (rules/intake.yaml) and the catalogs."""

from __future__ import annotations

import io
import re
import unicodedata
import zipfile
from datetime import datetime
from pathlib import Path

from openpyxl import Workbook
from openpyxl.formatting.rule import FormulaRule
from openpyxl.styles import Alignment, Border, Font, PatternFill, Protection, Side
from openpyxl.utils import get_column_letter, quote_sheetname
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.worksheet.datavalidation import DataValidation

from engine.files import write_atomic
from engine.intake.form import LANGUAGE_NAME, VERSION_NAME, Field, Form, current_form, localized
from engine.intake.validate import allowed
from engine.intake.workbook import named_cells

VALUE_COLUMN = "C"                 # A: required mark, B: label, C: value, D: unit, E: help
WIDTHS = {"A": 3, "B": 36, "C": 32, "D": 20, "E": 96}
FIRST_ROW = 5                      # rows 1-4: title, subtitle, blank, column headers
# Fixed dates and zip times make the file byte-for-byte reproducible, so the committed
# templates can be compared with freshly generated ones.
FIXED_TIME = datetime(2024, 1, 1)
ZIP_TIME = (2024, 1, 1, 0, 0, 0)

INPUT_FILL = PatternFill("solid", fgColor="FFF2CC")
SECTION_FILL = PatternFill("solid", fgColor="1F4E78")
HEADER_FILL = PatternFill("solid", fgColor="D9D9D9")
IDLE_FILL = PatternFill("solid", bgColor="EDEDED")     # a field the chosen workload ignores
THIN = Side(style="thin", color="A6A6A6")
BOX = Border(left=THIN, right=THIN, top=THIN, bottom=THIN)
WRAP = Alignment(wrap_text=True, vertical="top")
TOP = Alignment(vertical="top")


def template_path(lang: str) -> Path:
    """Where the committed blank template for `lang` lives (templates/intake[.<lang>].xlsx)."""
    from engine.paths import TEMPLATES_DIR
    return TEMPLATES_DIR / ("intake.xlsx" if lang == "en" else f"intake.{lang}.xlsx")


def write_template(path: Path, lang: str = "en", catalogs=None) -> Path:
    """Write a blank intake workbook in `lang`; returns the path."""
    if catalogs is None:
        from engine.calc.catalogs import load_catalogs
        catalogs = load_catalogs()
    path = Path(path)
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, reproducible(_save(build_template(current_form(), lang, catalogs))))
    return path


def build_template(form: Form, lang: str, catalogs) -> Workbook:
    wb = Workbook()
    sheet = wb.active
    sheet.title = form.sheet("intake", lang)
    lists = _lists_sheet(wb, form, lang, catalogs)
    _intake_sheet(wb, sheet, form, lang, lists)
    _how_to_sheet(wb, form, lang)
    wb.move_sheet(form.sheet("lists", lang), offset=1)      # Lists last: Intake, How to fill, Lists
    wb.active = 0
    props = wb.properties
    props.creator = props.lastModifiedBy = "sizing engine"
    props.title = form.text("title", lang)
    props.language = lang
    props.created = props.modified = FIXED_TIME
    return wb


def choice_lists(form: Form, lang: str, catalogs) -> dict[str, list[tuple[str, str]]]:
    """Every drop-down: list name → [(canonical id, text shown in `lang`)]."""
    lists = {name: [(c.id, localized(c.label, lang)) for c in items] for name, items in form.choices.items()}
    lists["yesno"] = [("yes", form.text("yes", lang)), ("no", form.text("no", lang))]
    lists["gpu"] = [(i, form.catalog_name(name, lang)) for i, name in catalogs.gpu_choices()]
    lists["model"] = [("custom", form.text("custom_model", lang)),
                      *((i, form.catalog_name(name, lang)) for i, name in catalogs.model_choices())]
    return lists


def list_name(f: Field) -> str | None:
    """The drop-down a field uses, if any."""
    return {"choice": f.choices, "bool": "yesno", "gpu": "gpu", "model": "model"}.get(f.type)


def _lists_sheet(wb: Workbook, form: Form, lang: str, catalogs) -> dict[str, str]:
    ws = wb.create_sheet(form.sheet("lists", lang))
    ws.sheet_state = "hidden"
    ws.protection.sheet = True
    ws["A1"], ws["B1"] = VERSION_NAME, form.version
    ws["A2"], ws["B2"] = LANGUAGE_NAME, lang
    title = quote_sheetname(ws.title)
    _name(wb, VERSION_NAME, f"{title}!$B$1")
    _name(wb, LANGUAGE_NAME, f"{title}!$B$2")
    names = {}
    for column, (name, items) in enumerate(choice_lists(form, lang, catalogs).items(), start=4):
        letter = get_column_letter(column)
        ws[f"{letter}1"] = name
        for row, (_, text) in enumerate(items, start=2):
            ws[f"{letter}{row}"] = text
        names[name] = f"list_{name}"
        _name(wb, names[name], f"{title}!${letter}$2:${letter}${len(items) + 1}")
    return names


def _intake_sheet(wb: Workbook, ws, form: Form, lang: str, lists: dict[str, str]) -> None:
    for column, width in WIDTHS.items():
        ws.column_dimensions[column].width = width
    ws["A1"] = form.text("title", lang)
    ws["A1"].font = Font(bold=True, size=14)
    ws["A2"] = form.text("subtitle", lang, version=form.version)
    for column, name in zip("BCDE", ("header_field", "header_value", "header_unit", "header_help")):
        cell = ws[f"{column}4"]
        cell.value, cell.font, cell.fill, cell.border = form.text(name, lang), Font(bold=True), HEADER_FILL, BOX
    row = FIRST_ROW
    rows = {}
    for section, label in form.sections.items():
        for column in "ABCDE":
            ws[f"{column}{row}"].fill = SECTION_FILL
        ws[f"B{row}"] = localized(label, lang)
        ws[f"B{row}"].font = Font(bold=True, color="FFFFFF")
        row += 1
        for f in (f for f in form.fields.values() if f.section == section):
            rows[f.key] = row
            _field_row(wb, ws, form, f, lang, row, lists)
            row += 1
        row += 1                                     # a blank line between sections
    _grey_out_idle_fields(ws, form, lang, rows)
    ws.freeze_panes = "A5"
    ws.protection.sheet = True
    ws.protection.formatColumns = ws.protection.formatRows = False   # widening a column is fine
    ws.sheet_properties.pageSetUpPr.fitToPage = True
    ws.page_setup.fitToHeight = 0


def _field_row(wb: Workbook, ws, form: Form, f: Field, lang: str, row: int, lists: dict[str, str]) -> None:
    ws[f"A{row}"] = "*" if f.required is True else ("(*)" if f.required else None)
    ws[f"B{row}"] = localized(f.label, lang)
    ws[f"D{row}"] = localized(f.unit, lang) or None
    for column in "ABCD":
        ws[f"{column}{row}"].alignment = TOP
    ws[f"E{row}"] = _help(form, f, lang)
    ws[f"E{row}"].alignment = WRAP
    lines = -(-_width(ws[f"E{row}"].value) // (WIDTHS["E"] - 4))
    if lines > 1:                     # not every spreadsheet program grows wrapped rows by itself
        ws.row_dimensions[row].height = 15 * lines
    cell = ws[f"{VALUE_COLUMN}{row}"]
    cell.fill, cell.border, cell.protection = INPUT_FILL, BOX, Protection(locked=False)
    cell.number_format = {"integer": "#,##0", "number": "0%" if f.measure == "fraction" else "General"}.get(
        f.type, "@" if f.type in ("text", "email") else "General")
    _name(wb, f.key, f"{quote_sheetname(ws.title)}!${VALUE_COLUMN}${row}")
    dv = _validation(form, f, lang, lists)
    if dv is not None:
        ws.add_data_validation(dv)
        dv.add(cell.coordinate)


def _validation(form: Form, f: Field, lang: str, lists: dict[str, str]) -> DataValidation | None:
    """Excel's own check: a drop-down for choices, a range for numbers, a length for text."""
    common = dict(allow_blank=True, showErrorMessage=True, errorTitle=form.text("dv_error_title", lang))
    name = list_name(f)
    if name:
        # GPU and model lists warn instead of refusing: short names such as "H100" are fine too.
        free = f.type in ("gpu", "model")
        return DataValidation(type="list", formula1=lists[name], errorStyle="warning" if free else "stop",
                              error=_short(localized(f.help, lang) if free else allowed(form, f, lang)), **common)
    if f.type in ("number", "integer") and f.min is not None and f.max is not None:
        return DataValidation(type="whole" if f.type == "integer" else "decimal", operator="between",
                              formula1=_excel_number(f.min), formula2=_excel_number(f.max),
                              error=_short(allowed(form, f, lang)), **common)
    if f.max_length:
        return DataValidation(type="textLength", operator="lessThanOrEqual", formula1=str(f.max_length),
                              error=_short(form.message("too_long", lang, label=localized(f.label, lang),
                                                        max=f.max_length)), **common)
    return None


def _grey_out_idle_fields(ws, form: Form, lang: str, rows: dict[str, int]) -> None:
    """Shade the fields the chosen workload does not use, so the salesperson sees what matters."""
    workload_cell = f"${VALUE_COLUMN}${rows['workload']}"
    for f in form.fields.values():
        if not f.applies_when:
            continue
        words = []
        for c in form.choices["workload"]:
            if c.id in f.applies_when:
                words += dict.fromkeys([c.id, localized(c.label, lang)])
        array = ",".join('"' + w.replace('"', '""') + '"' for w in words)
        formula = f"AND({workload_cell}<>\"\",ISNA(MATCH({workload_cell},{{{array}}},0)))"
        ws.conditional_formatting.add(f"A{rows[f.key]}:E{rows[f.key]}", FormulaRule(formula=[formula], fill=IDLE_FILL))


def _help(form: Form, f: Field, lang: str) -> str:
    parts = [localized(f.help, lang)]
    if f.applies_when:
        names = [form.choice_label("workload", w, lang) for w in f.applies_when]
        parts.append(form.text("applies_to", lang, workloads=form.text("list_separator", lang).join(names)))
    if f.default is not None:
        parts.append(form.text("default_is", lang, value=display_value(form, f, f.default, lang)))
    return " ".join(parts)


def display_value(form: Form, f: Field, value, lang: str, catalogs=None):
    """A canonical value as the template's drop-down (or cell) shows it in `lang`."""
    if f.type == "bool":
        return form.text("yes" if value else "no", lang)
    if f.type == "choice":
        return form.choice_label(f.choices, value, lang)
    if f.type == "model" and value == "custom":
        return form.text("custom_model", lang)
    if f.type in ("gpu", "model") and catalogs is not None:
        table = catalogs.gpus if f.type == "gpu" else catalogs.models
        return form.catalog_name(table.get(value, {}).get("name", value), lang)
    return value


def _width(text: str) -> int:
    """Columns a text needs: CJK characters are twice as wide as Latin ones."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _excel_number(value: float) -> str:
    return f"{value:.15g}".upper()


def _short(text: str) -> str:
    return text if len(text) <= 255 else text[:254] + "…"      # Excel's limit for messages


def _name(wb: Workbook, name: str, ref: str) -> None:
    wb.defined_names[name] = DefinedName(name, attr_text=ref)


def _how_to_sheet(wb: Workbook, form: Form, lang: str) -> None:
    ws = wb.create_sheet(form.sheet("how_to", lang))
    ws.column_dimensions["A"].width = 120
    for row, line in enumerate(localized_list(form.texts["how_to"], lang), start=1):
        ws[f"A{row}"] = line
        ws[f"A{row}"].alignment = Alignment(wrap_text=True)
    ws["A1"].font = Font(bold=True, size=14)
    ws.protection.sheet = True


def localized_list(value, lang: str) -> list[str]:
    return list(value.get(lang) or value.get("en") or []) if isinstance(value, dict) else list(value)


def _save(wb: Workbook) -> bytes:
    buffer = io.BytesIO()
    wb.save(buffer)
    return buffer.getvalue()


def reproducible(data: bytes) -> bytes:
    """The same workbook with fixed zip times and document dates (openpyxl stamps 'now')."""
    stamp = FIXED_TIME.strftime("%Y-%m-%dT%H:%M:%SZ")
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                body = re.sub(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*", rb"\g<1>" + stamp.encode(), body)
            dst.writestr(zipfile.ZipInfo(info.filename, date_time=ZIP_TIME), body, zipfile.ZIP_DEFLATED)
    return out.getvalue()


def fill_template(template: Path, values: dict, out: Path, catalogs) -> Path:
    """Fill a blank template through its defined names, as a salesperson would (drop-down texts)."""
    from openpyxl import load_workbook
    form = current_form()
    wb = load_workbook(template)
    cells = named_cells(wb)
    lang = str(wb[cells[LANGUAGE_NAME][0]][cells[LANGUAGE_NAME][1]].value)
    for key, value in values.items():
        sheet, coord = cells[key.lower()]
        f = form.fields[key]
        wb[sheet][coord].value = display_value(form, f, value, lang, catalogs)
    out = Path(out)
    write_atomic(out, reproducible(_save(wb)))
    return out
