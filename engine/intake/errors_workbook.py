"""The salesperson's own workbook handed back: bad cells marked, a comment on each, and a Problems sheet."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

from openpyxl import load_workbook
from openpyxl.comments import Comment
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.worksheet.hyperlink import Hyperlink

from engine.files import write_atomic
from engine.intake.form import current_form
from engine.intake.validate import show
from engine.intake.workbook import FORMULA_STARTS, has_formulas, without_formulas
from engine.paths import LANGUAGES
from engine.problems import Problem

BAD_FILL = PatternFill("solid", fgColor="FFC7CE")
BAD_FONT = Font(color="9C0006", bold=True)
WIDTHS = {"A": 14, "B": 30, "C": 90, "D": 24}
AUTHOR = "sizing"


def write_errors_workbook(source: Path, problems: list[Problem], out: Path, lang: str) -> Path:
    """Write `out` (an .errors.xlsx) from the workbook `source` and its problems; the source is only read."""
    form = current_form()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wb = load_workbook(source)
        if has_formulas(wb):              # handed back as values: a formula it held never runs
            without_formulas(wb, load_workbook(source, data_only=True))
    _clear_earlier_marks(wb, form, lang)
    by_cell: dict[tuple[str, str], list[str]] = {}
    for p in problems:
        sheet, coord = _split(p.where)
        if sheet in wb.sheetnames:
            by_cell.setdefault((sheet, coord), []).append(p.message)
    for (sheet, coord), messages in by_cell.items():
        cell = wb[sheet][coord]
        cell.fill, cell.font = BAD_FILL, BAD_FONT
        comment = Comment("\n".join(messages), AUTHOR)
        comment.width, comment.height = 320, 40 + 40 * len(messages)
        cell.comment = comment
    _problems_sheet(wb, form, lang, problems)
    out.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    wb.save(buffer)
    write_atomic(out, buffer.getvalue())   # readers of the folder never see a half-written file
    return out


def _clear_earlier_marks(wb, form, lang: str) -> None:
    """A returned errors workbook sent in again: drop our old Problems sheet, comments and red marks."""
    from engine.intake.template import INPUT_FILL
    from engine.intake.workbook import named_cells
    for title in {form.sheet("problems", code) for code in LANGUAGES}:
        if title in wb.sheetnames:
            del wb[title]
    for key, (sheet, coord) in named_cells(wb).items():
        cell = wb[sheet][coord]
        if key in form.fields and cell.comment is not None and cell.comment.author == AUTHOR:
            cell.comment, cell.fill, cell.font = None, INPUT_FILL, Font()


def _text(cell, value):
    """A cell that holds text as text: openpyxl would take any text starting with `=` for a formula."""
    cell.value = value
    if isinstance(value, str):
        cell.data_type = "s"
        cell.quotePrefix = value.startswith(FORMULA_STARTS)
    return cell


def _split(where: str) -> tuple[str, str]:
    sheet, _, coord = (where or "").rpartition("!")
    return sheet.strip("'"), coord


def _problems_sheet(wb, form, lang: str, problems) -> None:
    ws = wb.create_sheet(form.sheet("problems", lang), 0)
    for column, width in WIDTHS.items():
        ws.column_dimensions[column].width = width
    ws["A1"] = form.text("problems_intro", lang)
    ws["A1"].font = Font(bold=True, color="9C0006")
    headers = ("problems_header_cell", "problems_header_field", "problems_header_message", "problems_header_value")
    for column, name in zip("ABCD", headers):
        ws[f"{column}3"] = form.text(name, lang)
        ws[f"{column}3"].font = Font(bold=True)
    for row, p in enumerate(problems, start=4):
        sheet, coord = _split(p.where)
        key = p.context.get("key", "")
        ws[f"A{row}"] = p.where
        if sheet in wb.sheetnames and coord:
            ws[f"A{row}"].hyperlink = Hyperlink(ref=f"A{row}", location=f"'{sheet}'!{coord}")
            ws[f"A{row}"].font = Font(color="0563C1", underline="single")
        ws[f"B{row}"] = form.label(key, lang) if key in form.fields else None
        _text(ws[f"C{row}"], p.message).alignment = Alignment(wrap_text=True, vertical="top")
        _text(ws[f"D{row}"], show(p.value) if p.value is not None else None)   # what was typed: `=…` too
    ws.freeze_panes = "A4"
    wb.active = 0
    for sheet in wb.worksheets[1:]:
        sheet.sheet_view.tabSelected = False   # only one selected tab, or Excel groups the sheets
