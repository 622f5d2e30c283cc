"""The salesperson's audit workbook, `<stem>.audit.xlsx`: every rule evaluated, the intake as received, the rule set.

Written with XlsxWriter, which streams a sheet's XML about four times faster than openpyxl
(≈ 40 ms against ≈ 175 ms for the online sample's 162 rules in one measured run): the trail is
written for every quote, so its cost counts.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import xlsxwriter

from engine.calc.results import plain
from engine.quote.workbook import FORMULA_STARTS, cell_value, exact, number_format, text_only

if TYPE_CHECKING:
    from engine.quote.view import Quote

WIDE = 28            # characters: longer texts wrap inside their column
# What a reader prints is the ten columns of the derivation (A–J), 200 units wide in all: A4 landscape
# prints them at ≈ 63% (tests/test_render_workbook.py says why); the link columns after J are for clicking.
WIDTHS = [10, 20, 22, 12, 8, WIDE, WIDE, 18, 26, WIDE]
LINK_WIDTH = 20
COLUMNS = ("group", "rule", "label", "value", "unit", "formula", "inputs", "where", "why", "sources", "links")
A4 = 9               # XlsxWriter's paper size code


def audit_bytes(quote: Quote) -> bytes:
    """The whole audit workbook, saved to memory (render writes it atomically)."""
    m = quote.m
    buffer = io.BytesIO()
    book = xlsxwriter.Workbook(buffer, {"in_memory": True, "strings_to_formulas": False,
                                        "strings_to_numbers": False, "strings_to_urls": False})
    styles = _Styles(book)
    audit, intake = m("sheets.audit"), m("sheets.intake")
    about = m("sheets.about") if m("sheets.about") not in (audit, intake) else f"{m('sheets.about')} (2)"
    rows = _intake_rows(quote)
    inputs_at = {key: _location(intake, f"D{row}") for row, (key, *_) in enumerate(rows, 2)}
    _audit(book.add_worksheet(audit), quote, inputs_at, styles)
    _intake(book.add_worksheet(intake), quote, rows, styles)
    _about(book.add_worksheet(about), quote, styles)
    book.close()
    return buffer.getvalue()


class _Styles:
    """The workbook's few cell formats, each made once (XlsxWriter keeps one per combination)."""

    def __init__(self, book):
        self.book = book
        self.header = book.add_format({"bold": True, "font_color": "#FFFFFF", "bg_color": "#0B5CAD",
                                       "text_wrap": True, "valign": "top"})
        self.bold = book.add_format({"bold": True})
        self.link = book.add_format({"font_color": "#0563C1", "underline": 1})
        self._made: dict[tuple, Any] = {}

    def cell(self, *, number: str | None = None, wrap: bool = False, quoted: bool = False):
        key = (number, wrap, quoted)
        if key == (None, False, False):
            return None
        if key not in self._made:
            spec: dict[str, Any] = {}
            if number:
                spec["num_format"] = number
            if wrap:
                spec.update(text_wrap=True, valign="top")
            if quoted:
                spec["quote_prefix"] = True      # Excel keeps the text text even when the cell is edited
            self._made[key] = self.book.add_format(spec)
        return self._made[key]


def _put(ws, row: int, col: int, value: Any, styles: _Styles, number: str | None = None,
         wrap_from: int | None = None, style=None) -> None:
    """One cell (0-based), text always as text: `=HYPERLINK(..)` typed by a person is not a formula."""
    value = plain(value)
    if isinstance(value, str):
        value = text_only(value)
        wrap = wrap_from is not None and len(value) > wrap_from
        ws.write_string(row, col, value, style or styles.cell(wrap=wrap, quoted=value.startswith(FORMULA_STARTS)))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ws.write_number(row, col, value, style or styles.cell(number=number))
    elif value is not None:
        ws.write_string(row, col, text_only(str(value)), style)


def _print_setup(ws, landscape: bool = True, title_row: bool = True) -> None:
    if landscape:
        ws.set_landscape()
    ws.set_paper(A4)
    ws.fit_to_pages(1, 0)          # one page wide, as many tall as it takes
    if title_row:
        ws.repeat_rows(0)          # the header on every printed page
    ws.set_footer("&C&P / &N")


def _audit(ws, q: Quote, inputs_at: dict[str, str], styles: _Styles) -> None:
    """Every rule evaluated; each input it read links to the row (or intake value) it came from."""
    m, trace = q.m, q.results.trace
    rows = {step.name: row for row, step in enumerate(trace, 2)}
    targets = {**inputs_at, **{name: _location(ws.name, f"D{row}") for name, row in rows.items()}}
    for col, key in enumerate(COLUMNS):
        ws.write_string(0, col, m(f"columns.{key}"), styles.header)
    last_col = len(COLUMNS) - 1
    for row, step in enumerate(trace, 1):
        inputs = "; ".join(f"{k} = {exact(v)}" for k, v in step.inputs.items())
        sources = "; ".join(f"{s.where}: {s.what} = {exact(s.value)}" for s in step.sources)
        _put(ws, row, 0, step.group, styles)
        _put(ws, row, 1, step.name, styles)
        _put(ws, row, 2, step.label.get(q.lang) or step.label.get("en") or step.name, styles)
        _put(ws, row, 3, cell_value(m, step.value), styles, number_format(step.value, step.unit))
        _put(ws, row, 4, step.unit, styles)
        for col, text in ((5, step.formula), (6, inputs), (8, step.why), (9, sources)):
            _put(ws, row, col, text, styles, wrap_from=WIDE)
        _put(ws, row, 7, step.where, styles)
        col = 10
        for name in step.inputs:
            if name in targets:
                ws.write_url(row, col, f"internal:{targets[name]}", styles.link, string=name)
                col += 1
        last_col = max(last_col, col - 1)
    ws.freeze_panes(1, 3)
    ws.autofilter(0, 0, max(len(trace), 1), len(COLUMNS) - 1)
    for col, width in enumerate(WIDTHS):
        ws.set_column(col, col, width)
    if last_col >= 10:
        ws.set_column(10, last_col, LINK_WIDTH)
    _print_setup(ws)
    ws.print_area(0, 0, len(trace), 9)


def _intake_rows(q: Quote) -> list[tuple[str, str, Any, Any, str]]:
    """(key, label, as typed, value used, where it was entered) for each intake value."""
    m, intake = q.m, q.intake
    if intake is None:
        return []
    out = []
    for key, value in intake.values.items():
        where = intake.where(key)
        out.append((key, m.input_label(key), _as_cell(intake.raw.get(key, value)), _as_cell(value),
                    m("assumed_source") if where == "default" else where))
    return out


def _intake(ws, q: Quote, rows: list[tuple], styles: _Styles) -> None:
    """The intake as received: each value as typed, as used, and the cell or line it came from."""
    for col, key in enumerate(("key", "label", "typed", "used", "source")):
        ws.write_string(0, col, q.m(f"columns.{key}"), styles.header)
    for row, values in enumerate(rows, 1):
        for col, value in enumerate(values):
            _put(ws, row, col, value, styles)
    ws.freeze_panes(1, 0)
    for col, width in enumerate((24, 34, 30, 30, 22)):
        ws.set_column(col, col, width)
    _print_setup(ws)


def _about(ws, q: Quote, styles: _Styles) -> None:
    """Which quote this trail belongs to: customer, project, date, the rule set and the intake file."""
    m = q.m
    origin = q.intake.origin.name if q.intake is not None and q.intake.origin else ""
    row = 0
    for label, value in ((m("meta.customer"), q.customer), (m("meta.project"), q.project),
                         (m("meta.date"), q.date), (m("meta.ruleset"), q.ruleset),
                         (m("meta.intake_file"), origin)):
        if value:
            _put(ws, row, 0, label, styles, style=styles.bold)
            _put(ws, row, 1, value, styles)
            row += 1
    ws.set_column(0, 0, 24)
    ws.set_column(1, 1, 60)
    _print_setup(ws, landscape=False, title_row=False)


def _location(sheet: str, cell: str) -> str:
    """An in-workbook link target: 'Sheet name'!C12."""
    return "'" + sheet.replace("'", "''") + "'!" + cell


def _as_cell(value: Any) -> Any:
    return value if isinstance(value, (int, float, str)) or value is None else str(value)
