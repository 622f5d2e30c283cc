"""The results workbook: Summary, Memory, Scaling and Audit sheets beside the intake as it was filled."""

from __future__ import annotations

import io
import math
import warnings
from typing import TYPE_CHECKING, Any

import openpyxl
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from openpyxl.chart import BarChart, LineChart, Reference
from openpyxl.chart.data_source import AxDataSource, StrRef
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.worksheet.hyperlink import Hyperlink
from openpyxl.worksheet.worksheet import Worksheet

from engine.calc.results import plain

if TYPE_CHECKING:
    from engine.intake.model import Intake
    from engine.quote.messages import Messages
    from engine.quote.view import Figure, Quote

HEADER_FONT = Font(bold=True, color="FFFFFF")
HEADER_FILL = PatternFill("solid", fgColor="0B5CAD")
SOFT_FILL = PatternFill("solid", fgColor="E8F1FB")
WARN_FILL = PatternFill("solid", fgColor="FFF4E0")
BOLD = Font(bold=True)
WRAP = Alignment(wrap_text=True, vertical="top")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")   # what spreadsheets may take for a formula
MAX_CELL_TEXT = 32767                                 # Excel's limit per cell


def workbook_bytes(quote: Quote) -> bytes:
    """The whole results workbook, saved to memory (render writes it atomically)."""
    wb, intake_sheets = _start(quote.intake)
    if not intake_sheets:      # written first so the Audit can link to its rows; it stays the last tab
        inputs_at = _intake(wb.create_sheet(_unique(wb, quote.m("sheets.intake"))), quote)
    else:
        inputs_at = {key: _location(*where.split("!", 1)) for key, where in quote.intake.sources.items()
                     if "!" in where}
    audit_title = _unique(wb, quote.m("sheets.audit"))
    sheets = (("summary", _summary), ("memory", _memory), ("scaling", _scaling),
              ("alternatives", _alternatives),
              *([("facility", quote.facility.write_sheet)] if quote.facility is not None else []),
              ("audit", lambda ws, q: _audit(ws, q, inputs_at)))
    for index, (name, build) in enumerate(sheets):
        title = audit_title if name == "audit" else _unique(wb, quote.m(f"sheets.{name}"))
        build(wb.create_sheet(title, index), quote)
    for ws in wb.worksheets:
        ws.sheet_view.tabSelected = False     # else Excel opens with the intake tab grouped in
    wb.active = 0
    wb.active.sheet_view.tabSelected = True
    buffer = io.BytesIO()
    wb.save(buffer)
    return buffer.getvalue()


def _start(intake: Intake | None) -> tuple[openpyxl.Workbook, bool]:
    """The salesperson's own workbook when the intake is one, else an empty workbook."""
    if intake is not None and intake.kind == "xlsx" and intake.origin and intake.origin.is_file():
        wb, intake.book = intake.book, None   # the reader's open copy saves a second parse; use it once
        if wb is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # extensions openpyxl cannot keep; the reader said so
                wb = openpyxl.load_workbook(intake.origin, keep_links=False)
        wb.template = False                   # saved as .xlsx whatever it was read from
        return wb, True
    wb = openpyxl.Workbook()
    wb.remove(wb.active)
    return wb, False


def _unique(wb: openpyxl.Workbook, name: str) -> str:
    taken, candidate, n = {s.lower() for s in wb.sheetnames}, name, 2
    while candidate.lower() in taken:
        candidate, n = f"{name} ({n})", n + 1
    return candidate


def put(ws: Worksheet, row: int, col: int, value: Any, number_format: str | None = None):
    """Write one cell. Text always stays text: `=HYPERLINK(..)` typed by a person is not a formula."""
    value = plain(value)
    cell = ws.cell(row=row, column=col)
    if isinstance(value, str):
        value = ILLEGAL_CHARACTERS_RE.sub("", value)[:MAX_CELL_TEXT]
        cell.value = value
        cell.data_type = "s"
        if value.startswith(FORMULA_STARTS):
            cell.quotePrefix = True           # Excel keeps it text even when the cell is edited
    else:
        cell.value = value
        if number_format and isinstance(value, (int, float)) and not isinstance(value, bool):
            cell.number_format = number_format
    return cell


def number_format(value: Any, unit: str = "") -> str:
    """An Excel format matching how the quote writes the number (Messages.number)."""
    if unit == "fraction":
        return "0.0%"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "General"
    size = abs(value)
    if size >= 1e10:
        return "0.00E+00"
    if size >= 1000 or float(value).is_integer():
        return "#,##0"
    return "#,##0.0" if size >= 100 else "#,##0.00" if size >= 1 else "0.000"


def _cell_value(m: Messages, value: Any) -> Any:
    """Numbers stay numbers; yes/no and missing values are words in the quote's language."""
    if isinstance(value, bool) or value is None:
        return m.number(value)
    return value


def _header(ws: Worksheet, row: int, titles: list[str]) -> None:
    for col, title in enumerate(titles, 1):
        cell = put(ws, row, col, title)
        cell.font, cell.fill, cell.alignment = HEADER_FONT, HEADER_FILL, WRAP


def _figure_rows(ws: Worksheet, row: int, figures: list[Figure], m: Messages) -> int:
    """label | value | unit rows; returns the next free row."""
    for f in figures:
        put(ws, row, 1, f.label)
        if isinstance(f.value, str):
            put(ws, row, 2, f.text)   # words such as the bottleneck, in the reader's language
        else:
            put(ws, row, 2, _cell_value(m, f.value), number_format(f.value, f.unit))
        if f.unit and f.unit != "fraction" and not isinstance(f.value, (bool, str)):
            put(ws, row, 3, m.unit(f.unit, m.number(f.value)))     # "1 | GPU", "8 | GPUs"
        if f.band:
            put(ws, row, 4, f.band).font = Font(italic=True, color="5B6B7C")
        row += 1
    return row


def _line(ws: Worksheet, row: int, text: str, last_col: int = 3, **style) -> int:
    """A sentence across the table's width, wrapped, with room for its length."""
    put(ws, row, 1, text)
    ws.merge_cells(start_row=row, start_column=1, end_row=row, end_column=last_col)
    cell = ws.cell(row=row, column=1)
    cell.alignment = WRAP
    for name, value in style.items():
        setattr(cell, name, value)
    width = sum(2 if ord(ch) > 0x2E80 else 1 for ch in text)   # CJK glyphs are double width
    ws.row_dimensions[row].height = 15 * max(1, math.ceil(width / 80)) + 3
    return row + 1


def _print_setup(ws: Worksheet, landscape: bool = False, title_rows: str | None = None) -> None:
    ws.page_setup.orientation = "landscape" if landscape else "portrait"
    ws.page_setup.paperSize = ws.PAPERSIZE_A4
    ws.page_setup.fitToWidth, ws.page_setup.fitToHeight = 1, 0
    ws.sheet_properties.pageSetUpPr.fitToPage = True
    ws.oddFooter.center.text = "&P / &N"
    if title_rows:
        ws.print_title_rows = title_rows


def _sentence_only(ws: Worksheet, text: str) -> None:
    """A sheet with nothing to tabulate says why in its first cell."""
    put(ws, 1, 1, text)
    _print_setup(ws)


def _highlight(ws: Worksheet, row: int, last_col: int) -> None:
    """The row of the configuration the quote is about, shaded across the table."""
    for col in range(1, last_col + 1):
        ws.cell(row=row, column=col).fill = SOFT_FILL


def _widths(ws: Worksheet, widths: list[float]) -> None:
    for col, width in enumerate(widths, 1):
        ws.column_dimensions[openpyxl.utils.get_column_letter(col)].width = width


def _summary(ws: Worksheet, q: Quote) -> None:
    m = q.m
    put(ws, 1, 1, m("title")).font = Font(bold=True, size=16, color="0B5CAD")
    row = 2
    for label, value in ((m("meta.customer"), q.customer), (m("meta.project"), q.project),
                         (m("meta.date"), q.date), (m("meta.ruleset"), q.ruleset)):
        if value:
            put(ws, row, 1, label).font = Font(color="5B6B7C")
            put(ws, row, 2, value).font = BOLD
            row += 1
    row = _line(ws, row + 1, q.headline, font=Font(bold=True, size=14, color="0B5CAD"))
    for verdict in q.verdicts:
        row = _line(ws, row, verdict)
    _header(ws, row + 1, [m("sections.key_figures"), m("columns.value"), m("columns.unit")])
    row = _figure_rows(ws, row + 2, q.key_figures, m)
    _header(ws, row + 1, [m("sections.warnings"), "", ""])
    row += 2
    for warning in q.warnings or [m("no_warnings")]:
        row = _line(ws, row, warning, fill=WARN_FILL if q.warnings else PatternFill())
    if q.layout:
        _header(ws, row + 1, [m("sections.layout"), m("columns.value"), ""])
        row += 2
        for line in q.layout:
            put(ws, row, 1, line.label)
            put(ws, row, 2, line.text)
            put(ws, row, 3, line.note)
            row += 1
        if q.layout_note:
            row = _line(ws, row, q.layout_note, font=Font(italic=True, color="5B6B7C"))
    if q.assumptions:
        _header(ws, row + 1, [m("sections.assumptions"), m("columns.value"), ""])
        row = _figure_rows(ws, row + 2, q.assumptions, m)
    row += 1
    for caveat in [*m.table["caveats"], *q.checked]:
        row = _line(ws, row, caveat, font=Font(italic=True, color="5B6B7C"))
    _widths(ws, [46, 24, 16, 26])
    _print_setup(ws)


def _alternatives(ws: Worksheet, q: Quote) -> None:
    """The requested configuration and the others, figures as numbers and the sentence beside them."""
    m = q.m
    if not q.alternatives:
        _sentence_only(ws, m("alternatives.intro"))
        return
    labels = [label for label, _ in q.alternatives[0].figures]
    _header(ws, 1, [m("alternatives.configuration_column"), *labels, m("alternatives.note_column")])
    for row, a in enumerate(q.alternatives, 2):
        put(ws, row, 1, a.configuration).font = BOLD if a.requested else Font()
        for col, (_, text) in enumerate(a.figures, 2):
            put(ws, row, col, text)
        put(ws, row, len(a.figures) + 2, a.note)
        if a.requested:
            _highlight(ws, row, len(a.figures) + 2)
    _line(ws, len(q.alternatives) + 3, m("alternatives.intro"), last_col=len(labels) + 2)
    ws.freeze_panes = "B2"
    _widths(ws, [34] + [18] * len(labels) + [60])
    _print_setup(ws, landscape=True, title_rows="1:1")


def _memory(ws: Worksheet, q: Quote) -> None:
    m = q.m
    _header(ws, 1, [m("columns.item"), m("columns.gb"), m("columns.share")])
    capacity, per_gpu = q.figure("gpu_memory_gb"), q.figure("memory_per_gpu_gb")
    rows = [(f.label, f.value, False) for f in q.memory]
    rows += [(m("memory.per_gpu"), per_gpu.value, True)] if per_gpu else []
    rows += [(m("memory.capacity"), capacity.value, True)] if capacity else []
    if not rows:
        put(ws, 2, 1, m("memory.none"))
    for i, (label, gb, total) in enumerate(rows, 2):
        put(ws, i, 1, label).font = BOLD if total else Font()
        put(ws, i, 2, gb, "#,##0.00")
        if capacity and isinstance(gb, (int, float)) and capacity.value:
            put(ws, i, 3, gb / capacity.value, "0.0%")
    last = len(rows) + 1
    if rows:
        chart = BarChart()
        chart.type, chart.style, chart.legend = "bar", 10, None
        chart.title, chart.y_axis.title = m("memory.chart_title"), m("columns.gb")
        chart.add_data(Reference(ws, min_col=2, min_row=1, max_row=last), titles_from_data=True)
        labels = Reference(ws, min_col=1, min_row=2, max_row=last)
        chart.series[0].cat = AxDataSource(strRef=StrRef(f=str(labels)))   # text categories
        chart.x_axis.scaling.orientation = "maxMin"     # first item on top, as in the table
        chart.width, chart.height = 18, 2 + 1.1 * len(rows)
        _show_axes(chart)
        ws.add_chart(chart, "E2")
    others = [f for s in q.sections if s.key == "capacity" for f in s.figures
              if f.key not in {"memory_per_gpu_gb", "gpu_memory_gb", *(g.key for g in q.memory)}]
    _figure_rows(ws, last + 2, others, m)
    ws.freeze_panes = "A2"
    _widths(ws, [34, 14, 20])
    _print_setup(ws, landscape=True, title_rows="1:1")


def _scaling(ws: Worksheet, q: Quote) -> None:
    m = q.m
    if not q.scaling:
        _sentence_only(ws, m("scaling.none"))
        return
    columns = [(c.key, c.label, c.unit, c.values) for c in q.scaling]
    counts = columns[0][3]
    speedup = next((i for i, c in enumerate(columns) if c[0] == "speedup"), None)
    if speedup is not None:   # the ideal line for the chart, right after the speedup
        columns.insert(speedup + 1, ("ideal", m("columns.ideal"), "", counts))
    _header(ws, 1, [m.heading(label, unit) for _, label, unit, _ in columns])
    formats = {"gpu_count": "#,##0", "speedup": '0.00"×"', "ideal": '0.00"×"'}
    for col, (key, _, unit, values) in enumerate(columns, 1):
        for row, value in enumerate(values, 2):
            put(ws, row, col, _cell_value(m, value), formats.get(key) or number_format(value, unit))
    last = len(counts) + 1
    if q.gpu_count in counts:
        _highlight(ws, counts.index(q.gpu_count) + 2, len(columns))
    _line(ws, last + 2, m("scaling.note"), last_col=len(columns))
    if speedup is not None:
        chart = LineChart()
        chart.title, chart.style = m("scaling.chart_title"), 12
        chart.x_axis.title, chart.y_axis.title = m("columns.gpus"), m("columns.speedup")
        chart.add_data(Reference(ws, min_col=speedup + 1, max_col=speedup + 2, min_row=1,
                                 max_row=last), titles_from_data=True)
        chart.set_categories(Reference(ws, min_col=1, min_row=2, max_row=last))
        chart.width, chart.height = 18, 9
        _show_axes(chart)
        ws.add_chart(chart, f"A{last + 4}")
    ws.freeze_panes = "B2"
    _widths(ws, [10] + [16] * (len(columns) - 1))
    _print_setup(ws, landscape=True, title_rows="1:1")


def _show_axes(chart) -> None:
    # openpyxl 3.1 marks axes deleted unless told otherwise; Excel then draws no scale.
    chart.x_axis.delete = chart.y_axis.delete = False


def _location(sheet: str, cell: str) -> str:
    """An in-workbook link target: 'Sheet name'!C12."""
    return "'" + sheet.replace("'", "''") + "'!" + cell


def _audit(ws: Worksheet, q: Quote, inputs_at: dict[str, str]) -> None:
    """Every rule evaluated; each input it read links to the row (or intake cell) it came from."""
    m = q.m
    _header(ws, 1, [m(f"columns.{k}") for k in ("group", "rule", "label", "value", "unit", "formula",
                                                 "inputs", "where", "why", "sources", "links")])
    wide = 44
    rows = {step.name: row for row, step in enumerate(q.results.trace, 2)}
    targets = {**inputs_at, **{name: _location(ws.title, f"D{row}") for name, row in rows.items()}}
    last_col = 11
    for row, step in enumerate(q.results.trace, 2):
        sources = "; ".join(f"{s.where}: {s.what} = {_exact(s.value)}" for s in step.sources)
        if sources:
            cell = put(ws, row, 10, sources)
            if len(sources) > wide:
                cell.alignment = WRAP
        col = 11
        for name in step.inputs:
            if name in targets:
                cell = put(ws, row, col, name)
                cell.hyperlink = Hyperlink(ref=cell.coordinate, location=targets[name])
                cell.style = "Hyperlink"      # Excel's own link style: cheaper than a font per cell
                col += 1
        last_col = max(last_col, col - 1)
        put(ws, row, 1, step.group)
        put(ws, row, 2, step.name)
        put(ws, row, 3, step.label.get(q.lang) or step.label.get("en") or step.name)
        put(ws, row, 4, _cell_value(m, step.value), number_format(step.value, step.unit))
        put(ws, row, 5, step.unit)
        put(ws, row, 8, step.where)
        inputs = "; ".join(f"{k} = {_exact(v)}" for k, v in step.inputs.items())
        for col, text in ((6, step.formula), (7, inputs), (9, step.why)):
            cell = put(ws, row, col, text)
            if len(text) > wide:      # styling costs time per cell: wrap only what overflows
                cell.alignment = WRAP
    ws.freeze_panes = "D2"
    ws.auto_filter.ref = f"A1:K{max(len(q.results.trace) + 1, 2)}"
    _widths(ws, [12, 26, 30, 16, 10, wide, wide, 24, wide, wide] + [22] * (last_col - 10))
    _print_setup(ws, landscape=True, title_rows="1:1")


def _intake(ws: Worksheet, q: Quote) -> dict[str, str]:
    """For YAML/JSON intakes: the inputs as written, with where each came from; {key: its cell}."""
    m, intake = q.m, q.intake
    _header(ws, 1, [m("columns.key"), m("columns.label"), m("columns.value"), m("columns.source")])
    at = {}
    for row, (key, value) in enumerate((intake.values if intake else {}).items(), 2):
        put(ws, row, 1, key)
        put(ws, row, 2, m.input_label(key))
        put(ws, row, 3, value if isinstance(value, (int, float, str)) else str(value))
        where = intake.where(key)
        put(ws, row, 4, m("assumed_source") if where == "default" else where)
        at[key] = _location(ws.title, f"C{row}")
    ws.freeze_panes = "A2"
    _widths(ws, [24, 34, 30, 22])
    _print_setup(ws, title_rows="1:1")
    return at


def _exact(value: Any) -> str:
    value = plain(value)
    return format(value, ".6g") if isinstance(value, float) else str(value)
