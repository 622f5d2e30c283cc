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
from engine.quote.messages import template_dirs

TEMPLATE = "sweep.html.j2"
TRAINING_COLUMNS = ("training_time_days", "cost_total", "memory_per_gpu_gb", "gpu_memory_gb")
SERVING_COLUMNS = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "cost_total", "cost_per_million_tokens",
                   "memory_per_gpu_gb", "gpu_memory_gb")
CRITERIA_WORDS = {"layout": "the fixed layout does not divide the GPUs", "memory": "does not fit in memory with its headroom",
                  "deadline": "misses the deadline", "latency": "misses the latency targets",
                  "throughput": "cannot carry the request rate"}
MAX_ROWS_SHOWN = 500         # the HTML page and workbook list the best; the CSV keeps every configuration
QUALIFIES = PatternFill("solid", fgColor="E2F0D9")


def columns(sweep: Sweep, ruleset, training: bool, currency: str = "USD") -> list[tuple[str, str]]:
    """(key, heading) of the figures shown, headings from the rules' own labels."""
    keys = TRAINING_COLUMNS if training else SERVING_COLUMNS
    out = [("gpu_name", "GPU"), ("gpu_count", "GPUs"), ("precision", "Precision"), ("layout", "Layout")]
    for key in keys:
        if key in sweep.table and sweep.table[key].notna().any():
            rule = ruleset.rules.get(key)
            label = rule.label.get("en", key) if rule else key
            unit = currency if rule and rule.unit == "currency" else (rule.unit if rule else "")
            out.append((key, f"{label} ({unit})" if unit else label))
    out += [("verdict", "Meets everything"), ("short_by", "Short by")]
    return out


def rows(sweep: Sweep, keys: list[str], limit: int = MAX_ROWS_SHOWN) -> list[list]:
    """The table's best rows as display values: numbers rounded, misses in words."""
    out = []
    for _, r in sweep.table.head(limit).iterrows():
        line = []
        for key in keys:
            if key == "verdict":
                line.append("yes" if r["qualifies"] else "no: " + "; ".join(
                    CRITERIA_WORDS[c] for c in str(r["misses"]).split(", ") if c))
            elif key == "short_by":
                line.append("" if r["qualifies"] or not math.isfinite(r["shortfall"]) else f"{r['shortfall']:.2f}×")
            else:
                line.append(_display(r.get(key)))
        out.append(line)
    return out


def write_sweep(sweep: Sweep, ruleset, outdir: Path, stem: str, training: bool,
                currency: str = "USD") -> list[Path]:
    """`<stem>.sweep.csv`, `.xlsx` and `.html` in `outdir`, each written whole or not at all."""
    outdir.mkdir(parents=True, exist_ok=True)
    heads = columns(sweep, ruleset, training, currency)
    keys, labels = [k for k, _ in heads], [h for _, h in heads]
    body = rows(sweep, keys)
    paths = []
    for ext, data in (("csv", csv_bytes(sweep)), ("xlsx", xlsx_bytes(labels, body, sweep)),
                      ("html", html_bytes(labels, body, sweep, stem))):
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


def xlsx_bytes(labels: list[str], body: list[list], sweep: Sweep) -> bytes:
    wb = openpyxl.Workbook(write_only=True)
    ws = wb.create_sheet("Sweep")
    ws.freeze_panes = "A2"
    for i, width in enumerate([24, 8, 10, 40] + [18] * (len(labels) - 6) + [60, 10], 1):
        ws.column_dimensions[openpyxl.utils.get_column_letter(i)].width = width
    ws.append([_cell(ws, text, bold=True) for text in labels])
    for line, qualifies in zip(body, sweep.table["qualifies"].tolist()):
        ws.append([_cell(ws, value, fill=QUALIFIES if qualifies else None) for value in line])
    buffer = io.BytesIO()
    wb.save(buffer)
    return buffer.getvalue()


def html_bytes(labels: list[str], body: list[list], sweep: Sweep, stem: str) -> bytes:
    template = environment(tuple(template_dirs())).get_template(TEMPLATE)
    return template.render(title=f"Sweep: {stem}", labels=labels, body=body,
                           qualifying=sweep.table["qualifies"].tolist()[:len(body)],
                           configurations=len(sweep.table), scenarios=sweep.scenarios,
                           shown=len(body)).encode("utf-8")


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

