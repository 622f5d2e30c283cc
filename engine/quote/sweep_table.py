"""A sweep's ranked table as CSV (every figure, by key), an xlsx workbook and an HTML page (labelled, in plain units)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import openpyxl
from openpyxl.styles import Font, PatternFill

from engine.calc.sweep import Sweep
from engine.files import write_atomic
from engine.quote.html_page import environment
from engine.intake.form import current_form
from engine.quote.messages import Messages, template_dirs
from engine.quote.options import LAYOUT_ORDER

TEMPLATE = "sweep.html.j2"
TRAINING_COLUMNS = ("training_time_days", "cost_total", "memory_per_gpu_gb", "gpu_memory_gb")
SERVING_COLUMNS = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "cost_total", "cost_per_million_tokens",
                   "memory_per_gpu_gb", "gpu_memory_gb")
ONE_UNSAID = ("tensor_parallel", "pipeline_parallel", "virtual_pipeline_stages", "context_parallel",
              "expert_parallel")
MAX_ROWS_SHOWN = 500         # the HTML page and workbook list the best; the CSV keeps every configuration
QUALIFIES = PatternFill("solid", fgColor="E2F0D9")


def columns(sweep: Sweep, ruleset, training: bool, m: Messages, currency: str = "USD") -> list[tuple[str, str]]:
    """(key, heading) of the figures shown, headings from the rules' own labels in the reader's language."""
    keys = TRAINING_COLUMNS if training else SERVING_COLUMNS
    out = [("gpu_name", m("sweep.columns.gpu")), ("gpu_count", m("sweep.columns.count")),
           ("precision", m("sweep.columns.precision")), ("layout", m("sweep.columns.layout"))]
    for key in keys:
        if key in sweep.table and sweep.table[key].notna().any():
            rule = ruleset.rules.get(key)
            label = (rule.label.get(m.lang) or rule.label.get("en", key)) if rule else key
            unit = currency if rule and rule.unit == "currency" else (m.unit(rule.unit) if rule else "")
            out.append((key, m("sweep.heading", label=label, unit=unit) if unit else label))
    out += [("verdict", m("sweep.columns.verdict")), ("short_by", m("sweep.columns.short_by"))]
    return out


def rows(sweep: Sweep, keys: list[str], m: Messages, limit: int = MAX_ROWS_SHOWN) -> list[list]:
    """The table's best rows as display values: numbers rounded, names and misses in words."""
    out = []
    for _, r in sweep.table.head(limit).iterrows():
        line = []
        for key in keys:
            if key == "verdict":
                line.append(m("sweep.yes") if r["qualifies"] else m("sweep.verdict_no", misses=m(
                    "sweep.joiner").join(m(f"sweep.criteria.{c}") for c in str(r["misses"]).split(", ") if c)))
            elif key == "short_by":
                line.append("" if r["qualifies"] or not math.isfinite(r["shortfall"])
                            else m("sweep.times", times=f"{r['shortfall']:.2f}"))
            elif key == "gpu_name":
                line.append(gpu_name(r, m))
            elif key == "layout":
                line.append(layout_text(r, m))
            else:
                line.append(_display(r.get(key)))
        out.append(line)
    return out


def gpu_name(row, m: Messages) -> str:
    """The GPU as the intake template's drop-down names it in the reader's language."""
    return current_form().catalog_name(str(row.get("gpu_name", row["gpu"])), m.lang)


def layout_text(row, m: Messages) -> str:
    """The layout in engineers' short words (English), or by the form's field names."""
    values = row.get("layout_values")
    if m.lang == "en" or not isinstance(values, dict):
        return str(row["layout"])
    parts = []
    for key in LAYOUT_ORDER:      # as engine.calc.sweep.describe_layout: a degree of 1 goes unsaid
        value = values.get(key)
        if value is None or value is False or (value == 1 and key in ONE_UNSAID):
            continue
        parts.append(m.input_label(key) if value is True else f"{m.input_label(key)} {m.number(value)}")
    return " · ".join(parts) or str(row["layout"])


def write_sweep(sweep: Sweep, ruleset, outdir: Path, stem: str, training: bool, m: Messages,
                currency: str = "USD") -> list[Path]:
    """`<stem>.sweep.csv`, `.xlsx` and `.html` in `outdir`, each written whole or not at all."""
    outdir.mkdir(parents=True, exist_ok=True)
    heads = columns(sweep, ruleset, training, m, currency)
    keys, labels = [k for k, _ in heads], [h for _, h in heads]
    body = rows(sweep, keys, m)
    paths = []
    for ext, data in (("csv", csv_bytes(sweep)), ("xlsx", xlsx_bytes(labels, body, sweep, m)),
                      ("html", html_bytes(labels, body, sweep, stem, m))):
        path = outdir / f"{stem}.sweep.{ext}"
        write_atomic(path, data)
        paths.append(path)
    return paths


def csv_bytes(sweep: Sweep) -> bytes:
    """Every configuration, every figure, by key; the layout as one column per layout key."""
    table = sweep.table.drop(columns=["layout_values"], errors="ignore").copy()
    if "layout_values" in sweep.table:
        layouts = sweep.table["layout_values"].tolist()
        for key in dict.fromkeys(k for layout in layouts for k in layout):
            table[f"layout.{key}"] = [layout.get(key) for layout in layouts]
    return table.to_csv(index=False).encode("utf-8")


def xlsx_bytes(labels: list[str], body: list[list], sweep: Sweep, m: Messages) -> bytes:
    wb = openpyxl.Workbook(write_only=True)
    ws = wb.create_sheet(m("sweep.sheet"))
    ws.freeze_panes = "A2"
    for i, width in enumerate([24, 8, 10, 40] + [18] * (len(labels) - 6) + [60, 10], 1):
        ws.column_dimensions[openpyxl.utils.get_column_letter(i)].width = width
    ws.append([_cell(ws, text, bold=True) for text in labels])
    for line, qualifies in zip(body, sweep.table["qualifies"].tolist()):
        ws.append([_cell(ws, value, fill=QUALIFIES if qualifies else None) for value in line])
    buffer = io.BytesIO()
    wb.save(buffer)
    return buffer.getvalue()


def html_bytes(labels: list[str], body: list[list], sweep: Sweep, stem: str, m: Messages) -> bytes:
    template = environment(tuple(template_dirs())).get_template(TEMPLATE)
    configurations, shown = len(sweep.table), len(body)
    intro = m("sweep.intro", configurations=f"{configurations:,}", layouts=f"{sweep.scenarios:,}")
    if shown < configurations:
        intro += (" " if m.lang == "en" else "") + m("sweep.shown", shown=f"{shown:,}")
    return template.render(lang=m.lang, title=m("sweep.title", name=stem), intro=intro, labels=labels,
                           body=body, qualifying=sweep.table["qualifies"].tolist()[:shown]).encode("utf-8")


def _cell(ws, value, bold: bool = False, fill=None):
    from openpyxl.cell import WriteOnlyCell
    cell = WriteOnlyCell(ws, value=value)
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        cell.data_type = "s"            # text stays text, never a formula
    if bold:
        cell.font = Font(bold=True)
    if fill is not None:
        cell.fill = fill
    return cell


def _display(value):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return int(value)
        return float(f"{value:.4g}")
    return value

