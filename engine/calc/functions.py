"""The formula functions rule authors may call; each docstring is also their reference page."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from engine.calc.formula import FormulaError, is_array


@dataclass(frozen=True)
class FunctionSpec:
    """A callable formula function: arity, argument types (for `rules check`) and its doc."""

    name: str
    fn: Callable
    args: tuple[str, ...]            # "number" | "text" | "bool" | "any"; last repeats if variadic
    returns: str                     # a type, or "same" (the type of the value arguments)
    doc: str
    variadic: bool = False
    lazy: bool = False               # receives (scope, *thunks): evaluates only what it needs
    constant_args: frozenset[int] = field(default_factory=frozenset)   # positions that must be quoted text
    catalog: str = ""                # the catalog whose field the quoted second argument names (gpu_spec: gpus)

    def check_arity(self, count: int) -> None:
        low = len(self.args) - (1 if self.variadic else 0)
        ok = count >= max(low, 1) if self.variadic else count == len(self.args)
        if not ok:
            want = f"at least {max(low, 1)}" if self.variadic else str(len(self.args))
            raise FormulaError("formula.arity", f"{self.name}() takes {want} argument(s), not {count}.")

    def arg_type(self, index: int) -> str:
        return self.args[min(index, len(self.args) - 1)]


def _if(scope, condition, then, otherwise):
    """if(condition, then, else): `then` where the condition holds, otherwise `else`."""
    c = condition(scope)
    if is_array(c):
        return np.where(c, then(scope), otherwise(scope))
    return then(scope) if c else otherwise(scope)


def _first(scope, *options):
    """first(a, b, ...): the first value that was given (not blank), e.g. first(layers, model_spec(model, "layers"))."""
    result = None
    for option in options:
        value = option(scope)
        if not is_array(value) and not is_array(result):
            if is_given(value):
                return value
            result = value
            continue
        mask = _missing(result) if result is not None else None
        result = value if result is None else np.where(mask, value, result)
        if not np.any(_missing(result)):
            return result
    return result


def missing(value):
    """Where a value (or each value of an array) is blank: NaN, empty text or None."""
    return _missing(value)


def _missing(value):
    if is_array(value):
        if value.dtype.kind == "f":
            return np.isnan(value)
        if value.dtype.kind in "US":
            return value == ""
        return np.zeros(value.shape, dtype=bool)
    return not is_given(value)


def is_given(value: Any) -> bool:
    """A scalar value counts as given unless it is None, NaN or blank text."""
    if value is None:
        return False
    if isinstance(value, str):
        return value.strip() != ""
    if isinstance(value, (float, np.floating)):
        return not math.isnan(value)
    return True


def _given(value):
    """given(x): true when x has a value (a number that is not blank, non-empty text)."""
    m = _missing(value)
    return np.logical_not(m) if is_array(m) else not m


def _min(*values):
    """min(a, b, ...): the smallest value."""
    out = values[0]
    for v in values[1:]:
        out = np.minimum(out, v)
    return out


def _max(*values):
    """max(a, b, ...): the largest value."""
    out = values[0]
    for v in values[1:]:
        out = np.maximum(out, v)
    return out


def _clamp(x, low, high):
    """clamp(x, low, high): x kept between low and high."""
    return np.minimum(np.maximum(x, low), high)


def _round(x, digits):
    """round(x, digits): x rounded to `digits` decimals (0 for whole numbers)."""
    return np.round(x, int(digits))


def _next_pow2(x):
    """next_pow2(x): the smallest power of two ≥ x (1, 2, 4, 8, …); x ≤ 1 gives 1."""
    x = np.maximum(np.asarray(x, dtype=float), 1.0)
    out = np.power(2.0, np.ceil(np.log2(x)))
    return out if out.ndim else np.float64(out)


def _switch(value, *pairs):
    """switch(x, "a", result_a, "b", result_b, ..., otherwise): the result for the first case equal to x, else `otherwise` — like a spreadsheet's SWITCH."""
    *cases, otherwise = pairs
    if len(pairs) % 2 == 0:
        raise FormulaError("formula.arity", "switch(x, case, result, ..., otherwise) needs an `otherwise` value "
                                            "after its case/result pairs.")
    if not is_array(value) and not any(is_array(c) for c in cases[1::2]):
        for case, result in zip(cases[0::2], cases[1::2]):
            if value == case:
                return result
        return otherwise
    conditions = [np.equal(value, case) for case in cases[0::2]]
    return np.select(conditions, list(cases[1::2]), otherwise)


EXACT_POISSON_UP_TO = 10.0     # above this mean, a normal approximation with skew correction: at most a count off


def _poisson_inputs(*args):
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in args))
    return [a.astype(float, copy=True) for a in arrays]


def _poisson_terms(mean: np.ndarray):
    """(k, P(N = k)) for k = 0, 1, … far enough into the tail of every mean (all ≤ EXACT_POISSON_UP_TO,
    so e^-mean cannot underflow and each term is the last × mean ÷ k)."""
    top = float(np.max(mean)) if mean.size else 0.0
    term = np.exp(-mean)
    for k in range(int(top + 12 * math.sqrt(top) + 13)):
        yield k, term
        term = term * mean / (k + 1)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Φ(x) by Abramowitz & Stegun 7.1.26 (error below 1.5e-7), on whole arrays at once."""
    t = 1 / (1 + 0.3275911 * np.abs(x) / math.sqrt(2))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1 - poly * np.exp(-x * x / 2)
    return 0.5 * (1 + np.sign(x) * erf)


def _scalar_out(result: np.ndarray, *args):
    return result if any(is_array(a) for a in args) else np.float64(result.reshape(-1)[0])


def _poisson_cdf(k, mean):
    """poisson_cdf(k, mean): the chance that a count of random events with this mean (interruptions of a run, say) is k or fewer."""
    k_arr, m = _poisson_inputs(np.floor(np.asarray(k, dtype=float)), mean)
    valid = np.isfinite(k_arr) & np.isfinite(m) & (m >= 0)
    exact = valid & (m <= EXACT_POISSON_UP_TO)
    out = np.full(m.shape, np.nan)
    ks, total = k_arr[exact], np.zeros(int(exact.sum()))
    last = float(np.max(ks)) if ks.size else -1.0
    for count, term in _poisson_terms(m[exact]):
        if count > last:
            break
        total += term * (count <= ks)
    out[exact] = np.minimum(total, 1.0)
    wide = valid & ~exact
    out[wide] = _normal_cdf((k_arr[wide] + 0.5 - m[wide]) / np.sqrt(m[wide]))
    out[valid & (k_arr < 0)] = 0.0
    return _scalar_out(out, k, mean)


def _poisson_quantile(mean, p):
    """poisson_quantile(mean, p): the smallest count k with a chance of at least p that the events number k or fewer — poisson_quantile(7.4, 0.9) = 11."""
    m, prob = _poisson_inputs(mean, p)
    valid = np.isfinite(m) & np.isfinite(prob) & (m >= 0) & (prob >= 0) & (prob < 1)
    exact = valid & (m <= EXACT_POISSON_UP_TO)
    out = np.full(m.shape, np.nan)
    ps, running = prob[exact], np.zeros(int(exact.sum()))
    below = np.zeros(running.shape)            # counts k with P(N ≤ k) < p: the quantile itself
    for _, term in _poisson_terms(m[exact]):
        running += term
        below += running < ps
    out[exact] = below
    wide = valid & ~exact
    if wide.any():
        # Cornish-Fisher: the normal quantile corrected for the Poisson's skew
        levels, where = np.unique(prob[wide], return_inverse=True)     # usually one level, 0.5 or 0.9
        z = np.array([_normal_quantile(level) for level in levels])[where]
        out[wide] = np.maximum(np.ceil(m[wide] + z * np.sqrt(m[wide]) + (z * z - 1) / 6 - 0.5), 0)
    return _scalar_out(out, mean, p)


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist
    return NormalDist().inv_cdf(min(max(p, 1e-12), 1 - 1e-12))


PURE = {
    "min": (_min, ("number", "number"), "number", True),
    "max": (_max, ("number", "number"), "number", True),
    "clamp": (_clamp, ("number", "number", "number"), "number", False),
    "ceil": (np.ceil, ("number",), "number", False),
    "floor": (np.floor, ("number",), "number", False),
    "round": (_round, ("number", "number"), "number", False),
    "abs": (np.abs, ("number",), "number", False),
    "sqrt": (np.sqrt, ("number",), "number", False),
    "log": (np.log, ("number",), "number", False),
    "log2": (np.log2, ("number",), "number", False),
    "log10": (np.log10, ("number",), "number", False),
    "exp": (np.exp, ("number",), "number", False),
    "next_pow2": (_next_pow2, ("number",), "number", False),
    "given": (_given, ("any",), "bool", False),
    "switch": (_switch, ("any", "any"), "same", True),
    "poisson_cdf": (_poisson_cdf, ("number", "number"), "number", False),
    "poisson_quantile": (_poisson_quantile, ("number", "number"), "number", False),
}
_PURE_DOCS = {
    "ceil": "ceil(x): x rounded up to a whole number.",
    "floor": "floor(x): x rounded down to a whole number.",
    "abs": "abs(x): x without its sign.",
    "sqrt": "sqrt(x): square root.",
    "log": "log(x): natural logarithm.",
    "log2": "log2(x): base-2 logarithm.",
    "log10": "log10(x): base-10 logarithm.",
    "exp": "exp(x): e to the power x.",
}


def build_functions(catalogs, tables: dict | None = None) -> dict[str, FunctionSpec]:
    """The registry: pure functions plus catalog and table look-ups bound to `catalogs` and `tables`."""
    specs = {
        "if": FunctionSpec("if", _if, ("bool", "any", "any"), "same", _if.__doc__, lazy=True),
        "first": FunctionSpec("first", _first, ("any",), "same", _first.__doc__, variadic=True, lazy=True),
    }
    for name, (fn, args, returns, variadic) in PURE.items():
        doc = _PURE_DOCS.get(name) or fn.__doc__
        specs[name] = FunctionSpec(name, fn, args, returns, doc, variadic=variadic)
    for spec in _catalog_functions(catalogs, tables or {}):
        specs[spec.name] = spec
    return specs


def _catalog_functions(catalogs, tables: dict) -> list[FunctionSpec]:
    from engine.calc.lookups import Lookups
    look = Lookups(catalogs, tables)
    quoted2 = frozenset({1})
    return [
        FunctionSpec("gpu_spec", look.gpu_spec, ("text", "text"), "number", look.gpu_spec.__doc__,
                     constant_args=quoted2, catalog="gpus"),
        FunctionSpec("gpu_info", look.gpu_info, ("text", "text"), "text", look.gpu_info.__doc__,
                     constant_args=quoted2, catalog="gpus"),
        FunctionSpec("model_spec", look.model_spec, ("text", "text"), "number", look.model_spec.__doc__,
                     constant_args=quoted2, catalog="models"),
        FunctionSpec("model_info", look.model_info, ("text", "text"), "text", look.model_info.__doc__,
                     constant_args=quoted2, catalog="models"),
        FunctionSpec("model_flag", look.model_flag, ("text", "text"), "bool", look.model_flag.__doc__,
                     constant_args=quoted2, catalog="models"),
        FunctionSpec("optimizer_spec", look.optimizer_spec, ("text", "text"), "number",
                     look.optimizer_spec.__doc__, constant_args=quoted2, catalog="optimizers"),
        FunctionSpec("lookup", look.lookup, ("text", "any"), "number", look.lookup.__doc__, variadic=True,
                     constant_args=frozenset({0})),
        FunctionSpec("dense_peak", look.dense_peak, ("text", "text"), "number", look.dense_peak.__doc__),
        FunctionSpec("peak_precision", look.peak_precision, ("text", "text"), "text",
                     look.peak_precision.__doc__),
        FunctionSpec("has_precision", look.has_precision, ("text", "text"), "bool",
                     look.has_precision.__doc__),
        FunctionSpec("bytes_per", look.bytes_per, ("text",), "number", look.bytes_per.__doc__),
        FunctionSpec("precision_spec", look.precision_spec, ("text", "text"), "number",
                     look.precision_spec.__doc__, constant_args=quoted2, catalog="precisions"),
        FunctionSpec("precision_flag", look.precision_flag, ("text", "text"), "bool",
                     look.precision_flag.__doc__, constant_args=quoted2, catalog="precisions"),
        FunctionSpec("speedup", look.speedup, ("text", "number"), "number", look.speedup.__doc__,
                     constant_args=frozenset({0})),
    ]


def reference_markdown(catalogs=None) -> str:
    """The rule authors' reference page, generated from the docstrings above."""
    from engine.calc.catalogs import Catalogs
    specs = build_functions(catalogs or Catalogs())
    lines = ["# Formula functions", "",
             "Formulas are expressions: numbers, quoted text, + - * / // % **, comparisons, "
             "`and`/`or`/`not`, `x in [\"a\", \"b\"]`, and these functions. Nothing else runs.", ""]
    for name in sorted(specs):
        doc = " ".join((specs[name].doc or "").split())
        lines.append(f"- `{name}` — {doc}")
    return "\n".join(lines)
