"""Catalog look-ups for formulas, vectorised over arrays of ids so a sweep costs one pass."""

from __future__ import annotations

import math
import weakref
from contextvars import ContextVar
from typing import Any, Callable

import numpy as np

from engine.calc.formula import FormulaError, is_array
from engine.calc.results import Source

NAN = float("nan")
# Where each looked-up value came from, collected only while one scenario is traced
# (evaluate sets a list here); grids leave it unset, so a sweep pays one check per distinct id.
READS: ContextVar[list | None] = ContextVar("catalog_reads", default=None)


def _dig(entry: dict, path: str) -> Any:
    """entry["a"]["b"] for path "a.b"; None where any step is missing."""
    value: Any = entry
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


# id of an array → (a weak reference to it, its codes, its distinct values): an entry lives exactly as long
# as its array (the reference's callback drops it), so a fit's many live columns all stay factorized
_FACTOR_CACHE: dict[int, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}
# From this many ids pandas' C hash table pays for its import (≈ 0.3 s, most of a fresh quote's
# start-up); a quote's few hundred scenarios are hashed by a dict in microseconds.
PANDAS_FROM = 50_000
# From this many a sort in C beats hashing one Python object at a time (the fits' array passes
# look up thousands of ids each, tens of thousands of times).
SORT_FROM = 64


def _factorize(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values) of an id array; cached because one sweep looks up the same array often."""
    hit = _FACTOR_CACHE.get(id(ids))
    if hit is not None and hit[0]() is ids:
        return hit[1], hit[2]
    codes, uniques = _codes(ids)
    _remember(ids, codes, uniques)
    return codes, uniques


def _remember(ids: np.ndarray, codes: np.ndarray, uniques: np.ndarray) -> None:
    """Keep an array's factorization while the array lives."""
    key = id(ids)

    def forget(_ref, key=key):
        entry = _FACTOR_CACHE.get(key)
        if entry is not None and entry[0] is _ref:
            del _FACTOR_CACHE[key]
    try:
        _FACTOR_CACHE[key] = (weakref.ref(ids, forget), codes, uniques)
    except TypeError:       # a view numpy will not reference weakly: factorized again next time
        pass


def repeat_rows(column: np.ndarray, times: int) -> np.ndarray:
    """The column repeated `times` times end to end (np.tile), and known to the look-ups as the
    original's codes repeated: a fit evaluates its rows at many coefficient values at once, and the
    look-ups over the copies then cost what they cost over the rows once."""
    out = np.tile(column, times)
    if column.ndim == 1 and times > 1:
        codes, uniques = _factorize(column)
        _remember(out, np.tile(codes, times), uniques)
    return out


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values in order of first appearance): hashing, far cheaper than sorting strings."""
    if len(values) >= PANDAS_FROM:
        import pandas as pd
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
        return codes, np.asarray(uniques)
    if len(values) >= SORT_FROM and (values.dtype.kind in "USiub" or
                                     (values.dtype.kind == "f" and not np.isnan(values).any())):
        return _sorted_codes(values)
    first: dict = {}
    codes = np.fromiter((first.setdefault(v, len(first)) for v in values.tolist()), dtype=np.intp,
                        count=len(values))
    uniques = np.empty(len(first), dtype=values.dtype)
    uniques[:] = list(first)
    return codes, uniques


def _sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What the dict in `_codes` gives, by a stable sort in C: np.unique's first index of each
    distinct value puts them back in order of first appearance (and keeps the first-seen one
    of values that compare equal, as the dict does); only where equal means equal (no NaN)."""
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order), dtype=np.intp)
    return rank[inverse.reshape(-1)], distinct[order]


def _spread(values: list, codes: np.ndarray, kind: str) -> np.ndarray:
    """Each code's value; the result keeps the codes as its factorization, so a look-up that reads
    it (the architecture a GPU's id gave, say) needs no new pass over its rows."""
    dtype = float if kind == "number" else (bool if kind == "bool" else object)
    distinct = np.asarray(values, dtype=dtype)
    if kind == "text":
        distinct = distinct.astype(str)
    out = distinct[codes]
    if kind != "number" or not np.isnan(distinct).any():     # NaN ≠ NaN: such values are factorized plainly
        _remember(out, codes, distinct)
    return out


def _per_id(ids: Any, one: Callable[[Any], Any], kind: str):
    """Apply `one` to a scalar id, or to each distinct id of an array (then spread back)."""
    if not is_array(ids):
        return one(ids)
    codes, uniques = _factorize(ids)
    return _spread([one(str(u)) for u in uniques], codes, kind)


class Lookups:
    """The catalog functions bound to one set of catalogs."""

    def __init__(self, catalogs, tables: dict | None = None):
        self.catalogs, self.tables = catalogs, tables or {}
        self._sources: dict[tuple, Source] = {}

    def _id(self, catalog: str, key: Any) -> str | None:
        table = self.catalogs.table(catalog)
        return key if key in table else self.catalogs.resolve(catalog, key)

    def _entry(self, catalog: str, key: Any) -> dict | None:
        eid = self._id(catalog, key)
        return self.catalogs.table(catalog).get(eid) if eid else None

    def _field(self, catalog: str, key: Any, path: str) -> Any:
        eid = self._id(catalog, key)
        value = _dig(self.catalogs.table(catalog)[eid], path) if eid else None
        reads = READS.get()
        if reads is not None and eid:
            reads.append(self._source(catalog, eid, path, value))
        return value

    def _source(self, catalog: str, eid: str, path: str, value: Any) -> Source:
        """The record of one catalog read; made once per field (the catalogs do not change under it)."""
        key = (catalog, eid, path)
        source = self._sources.get(key)
        if source is None:
            shown = value if value is None or isinstance(value, (str, int, float)) else str(value)
            source = self._sources[key] = Source(f"{catalog} {eid} {path}", shown,
                                                 self.catalogs.field_where(catalog, eid, path))
        return source

    def _number(self, catalog: str, key: Any, path: str) -> float:
        value = self._field(catalog, key, path)
        if value is None or isinstance(value, bool):
            return NAN
        if not isinstance(value, (int, float)):
            raise FormulaError("lookup.type", f"{catalog} field `{path}` of `{key}` is not a number.")
        return float(value)

    def _text(self, catalog: str, key: Any, path: str) -> str:
        value = self._field(catalog, key, path)
        return "" if value is None else str(value)

    def gpu_spec(self, gpu, field):
        """gpu_spec(gpu, "field"): a number from catalogs/gpus.yaml, e.g. gpu_spec(gpu, "memory_gb") or gpu_spec(gpu, "scale_up.gb_s"); blank when the catalog has none."""
        return _per_id(gpu, lambda g: self._number("gpus", g, field), "number")

    def gpu_info(self, gpu, field):
        """gpu_info(gpu, "field"): a text field from catalogs/gpus.yaml, e.g. gpu_info(gpu, "architecture")."""
        return _per_id(gpu, lambda g: self._text("gpus", g, field), "text")

    def model_spec(self, model, field):
        """model_spec(model, "field"): a number from catalogs/models.yaml, e.g. model_spec(model, "layers"); blank for a custom model."""
        return _per_id(model, lambda m: self._number("models", m, field), "number")

    def model_info(self, model, field):
        """model_info(model, "field"): a text field from catalogs/models.yaml, e.g. model_info(model, "kind")."""
        return _per_id(model, lambda m: self._text("models", m, field), "text")

    def model_flag(self, model, field):
        """model_flag(model, "field"): true when the catalogs/models.yaml field is true, e.g. model_flag(model, "tied_embeddings"); false when absent."""
        return _per_id(model, lambda m: _dig(self._entry("models", m) or {}, field) is True, "bool")

    def optimizer_spec(self, optimizer, field):
        """optimizer_spec(optimizer, "field"): bytes per trainable parameter from catalogs/optimizers.yaml ("state_bytes", "master_bytes")."""
        return _per_id(optimizer, lambda o: self._number("optimizers", o, field), "number")

    def _peak(self, gpu: Any, precision: Any) -> tuple[float, str]:
        """Dense peak for a precision: its own, else along the precision's fallback chain, else the
        nearest the GPU has (same width first, then wider, then narrower: Gaudi 2 FP16 → BF16)."""
        entry = self._entry("gpus", gpu)
        if entry is None:
            return NAN, ""
        peaks = entry.get("dense_tflops") or {}
        rate = self._rate(precision)
        for current in self._nearest(rate):
            value = peaks.get(current)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                if current != rate:
                    self._field("precisions", precision, "fallback")     # recorded: why another precision
                return self._number("gpus", gpu, f"dense_tflops.{current}"), str(current)
        return NAN, ""

    def _nearest(self, precision: Any):
        """The precision, its fallback chain, then every other precision by closeness in width
        (sorted only when the chain has no rate the GPU lists)."""
        table = self.catalogs.precisions
        order, current = [], precision
        while current and current not in order:
            order.append(current)
            yield current
            current = (table.get(current) or {}).get("fallback")
        width = (table.get(precision) or {}).get("bytes")
        if not isinstance(width, (int, float)):
            return

        def distance(other: str) -> tuple:
            size = (table.get(other) or {}).get("bytes") or 0
            return (size != width, size < width, abs(size - width))
        yield from sorted((p for p in table if p not in order), key=distance)

    def _rate(self, precision: Any) -> Any:
        """The tensor rate a format computes at: its own, or the one it names (NVFP4 and MXFP4 run at FP4's)."""
        return (self.catalogs.precisions.get(precision) or {}).get("rate") or precision

    def dense_peak(self, gpu, precision):
        """dense_peak(gpu, precision): the GPU's dense peak TFLOPS (TOPS for int8/int4) at that precision; when the GPU lacks it, the peak of the precision's fallback (catalogs/precisions.yaml)."""
        return self._pairwise(gpu, precision, lambda g, p: self._peak(g, p)[0], "number")

    def peak_precision(self, gpu, precision):
        """peak_precision(gpu, precision): which precision dense_peak actually used (differs when the GPU lacks the one asked for)."""
        return self._pairwise(gpu, precision, lambda g, p: self._peak(g, p)[1], "text")

    def has_precision(self, gpu, precision):
        """has_precision(gpu, precision): true when the GPU has its own figure for that precision."""
        return self._pairwise(gpu, precision, lambda g, p: self._peak(g, p)[1] == self._rate(p), "bool")

    def precision_spec(self, precision, field):
        """precision_spec(precision, "field"): a number from catalogs/precisions.yaml, e.g. precision_spec(weight_format, "scale_bits"); blank when the format has none."""
        return _per_id(precision, lambda p: self._number("precisions", p, field), "number")

    def precision_flag(self, precision, field):
        """precision_flag(precision, "field"): true when the catalogs/precisions.yaml field is true, e.g. precision_flag(weight_format, "linear_only"); false when absent."""
        return _per_id(precision, lambda p: _dig(self._entry("precisions", p) or {}, field) is True, "bool")

    def bytes_per(self, precision):
        """bytes_per(precision): bytes per element (fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5)."""
        return _per_id(precision, lambda p: self._number("precisions", p, "bytes"), "number")

    def speedup(self, table, gpus):
        """speedup("table", gpus): multi-GPU speedup from catalogs/scaling.yaml, linear between points, keeping the last point's efficiency beyond it."""
        spec = self.catalogs.speedup_tables.get(table)
        if spec is None:
            raise FormulaError("lookup.unknown", f"there is no speedup table `{table}` in catalogs/scaling.yaml.")
        reads = READS.get()
        if reads is not None:
            points = ", ".join(f"{n} GPU{'' if n == 1 else 's'} {s:g}×" for n, s in spec["points"].items())
            reads.append(Source(f"speedup table {table}", points,
                                self.catalogs.where.get(("speedup_tables", table), "catalogs/scaling.yaml")))
        xs = np.array(list(spec["points"]), dtype=float)
        ys = np.array(list(spec["points"].values()), dtype=float)
        n = np.asarray(gpus, dtype=float)
        inside = np.interp(n, xs, ys)
        beyond = n * (ys[-1] / xs[-1])
        out = np.where(n > xs[-1], beyond, inside)
        return out if out.ndim else np.float64(out)

    def lookup(self, table, *values):
        """lookup("table", value, ...): the number in a rule file's `tables:` whose row matches the values, one per column in the table's order; rows are tried top to bottom and the first that matches wins (a column a row leaves out matches anything); blank when no row matches."""
        spec = self.tables.get(table)
        if spec is None:
            raise FormulaError("lookup.unknown", f"there is no table `{table}` in the rule files.")

        def one(*key):
            row = spec.find(key)
            reads = READS.get()
            if reads is not None and row is not None:
                reads.append(Source(f"table {table}: {row.case()}", row.value, row.where, row.evidence))
            return NAN if row is None else row.value
        return _combinations(values, one, "number")

    def _pairwise(self, a, b, one, kind):
        if not is_array(a) and not is_array(b):
            return one(a, b)
        return _combinations((a, b), one, kind)


def _combinations(args: tuple, one: Callable, kind: str):
    """`one(*args)` over arrays: evaluated once per distinct combination of values, then spread back."""
    if not any(is_array(a) for a in args):
        return one(*args)
    size = next(len(a) for a in args if is_array(a))
    codes, uniques = [], []
    for a in args:
        c, u = _factorize(a) if is_array(a) else (np.zeros(size, dtype=np.intp), np.array([a]))
        codes.append(c)
        uniques.append(u)
    combined = np.zeros(size, dtype=np.int64)
    for c, u in zip(codes, uniques):
        combined = combined * len(u) + c
    combo_codes, combos = _combination_codes(combined, math.prod(len(u) for u in uniques))
    values = []
    for combo in combos:
        picked, rest = [], int(combo)
        for u in reversed(uniques):
            rest, index = divmod(rest, len(u))
            picked.append(_scalar(u[index]))
        values.append(one(*reversed(picked)))
    return _spread(values, combo_codes, kind)


def _combination_codes(combined: np.ndarray, possible: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct combinations) of numbered combinations below `possible`: counted in one pass
    where there are few enough to count (the usual case: a handful of GPUs × precisions), instead of
    sorted; the distinct ones come in numeric order."""
    if possible > max(4 * len(combined), 1 << 16):
        return _codes(combined)
    present = np.flatnonzero(np.bincount(combined, minlength=possible))
    number = np.empty(possible, dtype=np.intp)
    number[present] = np.arange(len(present), dtype=np.intp)
    return number[combined], present


def _scalar(value: Any) -> Any:
    """A numpy element as the plain value a catalog or table compares with."""
    return value.item() if isinstance(value, np.generic) else value
