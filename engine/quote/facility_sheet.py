"""The results workbook's Facility & cost sheet: one table per part, its sentences, and the sources."""

from __future__ import annotations

from typing import TYPE_CHECKING

from openpyxl.styles import Font
from openpyxl.worksheet.worksheet import Worksheet

from engine.quote.workbook import _figure_rows, _header, _line, _print_setup, _sentence_only, _widths, put

if TYPE_CHECKING:
    from engine.quote.view import Quote

NOTE = Font(italic=True, color="5B6B7C")


def facility_sheet(ws: Worksheet, q: Quote) -> None:
    """label | value | unit per figure under each part's heading, numbers kept as numbers."""
    m, facility = q.m, getattr(q, "facility", None)
    if facility is None or not facility.parts:
        _sentence_only(ws, m("facility.intro"))
        return
    put(ws, 1, 1, m("facility.title")).font = Font(bold=True, size=14, color="0B5CAD")
    row = _line(ws, 2, m("facility.intro"), font=NOTE)
    for part in facility.parts:
        _header(ws, row + 1, [part.title, m("columns.value"), m("columns.unit")])
        row = _figure_rows(ws, row + 2, part.figures, m)
        for sentence in part.sentences:
            row = _line(ws, row, sentence)
    if facility.sources:
        _header(ws, row + 1, [m("facility.sources"), "", ""])
        row += 2
        for source in facility.sources:
            row = _line(ws, row, source, font=NOTE)
    _widths(ws, [46, 20, 22])
    _print_setup(ws)
