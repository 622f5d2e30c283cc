"""The HTML summary: Jinja templates, overridable by file name, filled from the quote view.

Templates are looked up in the folders named by SIZING_TEMPLATES (separated like PATH)
first, then in the package's templates/ folder: a deployment overrides
`summary.html.j2`, `_summary.css.j2` or `_macros.html.j2` by dropping a file of the
same name there. Autoescaping is on and a missing value is an error, never a blank.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from jinja2 import Environment, FileSystemBytecodeCache, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from engine.calc.rulecache import cache_dir
from engine.quote import charts
from engine.quote.messages import HOURS_IN, finite, template_dirs

if TYPE_CHECKING:
    from engine.quote.view import Quote

TEMPLATE = "summary.html.j2"


class _TemplateCache(FileSystemBytecodeCache):
    """Compiled templates kept between processes, as Python keeps compiled modules (a fresh quote
    otherwise compiles the page's templates, ≈ 20 ms); Jinja checks each entry against its
    template's source. A cache that cannot be read or written only costs that time."""

    def load_bytecode(self, bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 — a damaged entry: compile the template instead
            bucket.reset()

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _template_cache() -> _TemplateCache | None:
    folder = cache_dir()
    if folder is None:
        return None
    try:
        (folder / "templates").mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return _TemplateCache(str(folder / "templates"))


@functools.lru_cache(maxsize=8)
def environment(dirs: tuple[Path, ...]) -> Environment:
    return Environment(loader=FileSystemLoader([str(d) for d in dirs]), autoescape=True,
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                       bytecode_cache=_template_cache())


def render_html(quote: Quote) -> str:
    template = environment(tuple(template_dirs())).get_template(TEMPLATE)
    return template.render(q=quote, m=_namespace(quote.m.table), charts=quote_charts(quote),
                           scaling=scaling_table(quote))


def html_bytes(quote: Quote) -> bytes:
    return render_html(quote).encode("utf-8")


def quote_charts(quote: Quote) -> dict[str, Markup]:
    """Inline SVG per section key; a section without a chart maps to an empty string."""
    m, v = quote.m, quote.values
    out = {key: Markup("") for key in ("model", "capacity", "compute", "bandwidth", "scaling",
                                       "targets")}
    rows = [(f.label, f.value, f.text, False) for f in quote.memory if _positive(f.value)]
    per_gpu, capacity = quote.figure("memory_per_gpu_gb"), quote.figure("gpu_memory_gb")
    if per_gpu and _positive(per_gpu.value):
        rows.append((m("memory.per_gpu"), per_gpu.value, per_gpu.text, True))
    limit = (m("memory.capacity"), capacity.value, capacity.text) \
        if capacity and _positive(capacity.value) else None
    out["capacity"] = charts.memory_bars(rows, limit, m("memory.chart_title"))
    if all(k in v for k in ("peak_tflops_per_gpu", "ridge_point", "arithmetic_intensity",
                            "attainable_tflops_per_gpu")):
        out["bandwidth"] = charts.roofline(
            v["peak_tflops_per_gpu"], v["ridge_point"], v["arithmetic_intensity"],
            v["attainable_tflops_per_gpu"], m.number, m.table["roofline"])
    columns = {c.key: c for c in quote.scaling}
    if "speedup" in columns:
        out["scaling"] = charts.scaling_curve(
            columns["gpu_count"].values, columns["speedup"].values, quote.gpu_count, m.number,
            {"title": m("scaling.chart_title"), "x": m("columns.gpus"), "y": m("columns.speedup"),
             "ideal": m("columns.ideal"), "chosen": m("scaling.chosen")})
    return out


def scaling_table(quote: Quote) -> dict:
    """Header and formatted rows of the scaling table, and which row is the quoted count."""
    if not quote.scaling:
        return {"head": [], "rows": [], "chosen": -1, "caption": ""}
    m, counts = quote.m, quote.scaling[0].values
    # units sit in the header; cells carry bare numbers (percent for efficiency), except times,
    # which each read in the unit their size calls for (45 minutes, 3.2 hours, 12 days)
    head = [c.label if _timed(c) else m.heading(c.label, c.unit) for c in quote.scaling]
    rows = [[m.value(*m.duration(c.values[i], c.unit)) if _timed(c)
             else m.value(c.values[i], c.unit if c.unit == "fraction" else "") for c in quote.scaling]
            for i in range(len(counts))]
    chosen = counts.index(quote.gpu_count) if quote.gpu_count in counts else -1
    return {"head": head, "rows": rows, "chosen": chosen, "caption": quote.scaling_note}


def _timed(column) -> bool:
    return column.unit in HOURS_IN


def _namespace(node):
    """The catalogue with attribute access only, so `m.values` is the entry, not dict.values."""
    if isinstance(node, dict):
        return SimpleNamespace(**{str(k): _namespace(v) for k, v in node.items()})
    return [_namespace(v) for v in node] if isinstance(node, list) else node


def _positive(value) -> bool:
    return finite(value) and value > 0
