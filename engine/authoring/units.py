"""Units checked by dimensional analysis: what a formula yields, from the units of what it reads (pint).

Each name a formula reads is taken as one of its unit (a rule's `unit:`, an input's unit on the form,
a catalog field's in catalogs/schema.yaml) and each number as a plain factor; pint carries them through
the formula. A rule is wrong when what comes out is another kind of quantity (hours from GB), or the
right kind but a conversion off (kW from W without /1000, hours from days, /1e6 for /1e9): the factor
the formula applies then differs from the one its units need by exactly a unit's step.
Counts (parameters, tokens, GPUs) are plain numbers here, so 6·N·D is FLOPs; a name without a unit,
or a function whose unit is not known, leaves the formula unchecked rather than guessed.
"""

from __future__ import annotations

import ast
import functools
import math

import pint

from engine.calc.formula import IF_NAME
from engine.problems import Problem

# catalogs/schema.yaml's units in pint's words; a unit not here (year) is not checked.
PINT = {"%": "dimensionless", "fraction": "dimensionless", "×": "dimensionless", "bytes": "byte_",
        "KB": "kilobyte_", "GB": "gigabyte_", "GiB": "gibibyte_", "GB/s": "gigabyte_ / second",
        "FLOP": "dimensionless", "FLOP/byte": "1 / byte_", "TFLOPS": "tflops",
        "TOPS": "tflops", "W": "watt", "W/TFLOPS": "watt / tflops", "kW": "kilowatt", "parameters": "dimensionless",
        "billion parameters": "billion", "billion tokens": "billion", "bytes/parameter": "byte_",
        "tokens": "dimensionless", "tokens/s": "1 / second", "samples": "dimensionless",
        "steps": "dimensionless", "multiplies": "dimensionless", "requests": "dimensionless", "requests/s": "1 / second",
        "GPUs": "dimensionless", "GPU-hours": "hour", "ms": "millisecond", "s": "second",
        "minutes": "minute", "hours": "hour", "days": "day", "currency": "currency",
        "USD/GPU-hour": "currency / hour", "per GPU-hour": "currency / hour",
        "interruptions/GPU-hour": "1 / hour",
        "currency/USD": "dimensionless"}
# Units spelt like another one (GPU-hours are hours here): never the name a message gives.
SYNONYMS = {"GPU-hours", "TOPS", "bytes/parameter", "per GPU-hour", "kW"}
# Steps between units: a formula's factor off by one of these (either way) is a missed conversion.
STEPS = (1e3, 1e6, 1e9, 1e12, 24, 60, 3600, 86400, 1440, 2 ** 30 / 1e9, 8)
# Functions whose result has the unit of their value arguments (from the first of them).
SAME = {"if": slice(1, None), "first": slice(0, None), "max": slice(0, None), "min": slice(0, None),
        "abs": slice(0, 1), "ceil": slice(0, 1), "floor": slice(0, 1), "round": slice(0, 1),
        "clamp": slice(0, 1), "next_pow2": slice(0, 1)}
RETURNS = {"dense_peak": "TFLOPS", "bytes_per": "bytes"}


@functools.lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    ureg = pint.UnitRegistry()
    ureg.define("currency = [currency]")
    # pint's own byte is a plain number (bits are); memory is a kind of quantity of its own here
    ureg.define("byte_ = [data]")
    ureg.define("kilobyte_ = 1e3 byte_")
    ureg.define("gigabyte_ = 1e9 byte_")
    ureg.define("gibibyte_ = 1073741824 byte_")
    ureg.define("tflops = 1e12 / second")        # TFLOPS and TOPS: the counts are plain numbers here
    ureg.define("billion = 1e9")
    return ureg


def check_units(ruleset, form, problems: list[Problem]) -> None:
    """Every rule with a unit whose formula yields another, as `file:line: rule x: yields …`."""
    ureg = registry()
    known = {}
    for key, spec in form.fields.items():
        unit = spec.unit.get("en") if isinstance(spec.unit, dict) else spec.unit
        if unit in PINT:
            known[key] = ureg.Quantity(1, PINT[unit])
    for rule in ruleset.rules.values():
        if rule.unit in PINT:
            known[rule.name] = ureg.Quantity(1, PINT[rule.unit])
    for rule in ruleset.rules.values():
        if rule.unit not in PINT:
            continue
        try:
            got = _quantity(rule.formula.tree.body, known, ruleset)
        except _Mismatch as e:
            problems.append(Problem("rules.units", rule.formula_where or rule.where,
                                    f"rule `{rule.name}`: {e.message}", fixer="rules"))
            continue
        if rule.unit == "currency":
            # money: the unit names the quote's currency, what it is per (GPU-hour, million tokens) is in
            # the label; rules reading it use what its formula yields
            if got is not None and not isinstance(got, Free):
                known[rule.name] = got
            continue
        if got is None or isinstance(got, Free):
            continue
        message = _against(got, ureg.Quantity(1, PINT[rule.unit]), rule.unit)
        if message:
            problems.append(Problem("rules.units", rule.formula_where or rule.where,
                                    f"rule `{rule.name}` is declared in {rule.unit}, but its formula {message}",
                                    fixer="rules"))


class Free(float):
    """A number written in a formula: a factor in a product, but in a sum or a choice (`first(x, 32)`)
    it is in whatever unit the other side is."""


class _Mismatch(Exception):
    def __init__(self, message: str):
        self.message = message


def _against(got, declared, unit: str) -> str:
    """"" when `got` (factor × unit) is `declared`; else what it yields instead."""
    if got.dimensionality != declared.dimensionality:
        return f"yields {_words(got, scale=False)}, another kind of quantity. Check what it reads and its `unit:`."
    needed = ureg_one(got).to(declared.units).magnitude          # 1 of what it yields, in the declared unit
    if _step(got.magnitude / needed) is None:
        return ""
    if got.units == declared.units:
        factor = got.magnitude
        how = f"divided by {_show(1 / factor)}" if factor < 1 else f"times {_show(factor)}"
        return (f"yields {unit} {how}: a conversion where none is needed, or the wrong `unit:` (what it computes "
                f"is in a unit {_show(factor if factor > 1 else 1 / factor)} times "
                f"{'smaller' if factor > 1 else 'larger'}).")
    return (f"yields {_words(got, scale=False)}: 1 {_words(got, scale=False)} is {_show(needed)} {unit}, so it "
            f"needs × {_show(needed)} where it has × {_show(got.magnitude)} (a conversion missing or wrong).")


def ureg_one(quantity):
    return registry().Quantity(1, quantity.units)


def _step(factor: float) -> float | None:
    """The unit step `factor` is (either way), or None for a plain number such as 6 or 0.5."""
    if factor <= 0 or math.isclose(factor, 1, rel_tol=1e-6):
        return None
    for step in STEPS:
        for candidate in (step, 1 / step):
            if math.isclose(factor, candidate, rel_tol=1e-6):
                return step
    return None


def _quantity(node: ast.AST, known: dict, ruleset):
    """The quantity an expression yields (a factor × a unit), or None when that cannot be known."""
    ureg = registry()
    if isinstance(node, ast.Constant):
        ok = isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        return Free(node.value) if ok else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _quantity(node.operand, known, ruleset)
        return Free(-inner) if isinstance(inner, Free) else inner
    if isinstance(node, ast.BinOp):
        left, right = _quantity(node.left, known, ruleset), _quantity(node.right, known, ruleset)
        if isinstance(node.op, ast.Pow):
            if left is None or isinstance(left, Free) or not isinstance(node.right, ast.Constant):
                return None
            return left ** float(node.right.value)
        if left is None or right is None:
            return None
        if isinstance(left, Free) and isinstance(right, Free):
            return None
        if isinstance(node.op, (ast.Add, ast.Sub)) and (isinstance(left, Free) or isinstance(right, Free)):
            return right if isinstance(left, Free) else left
        left, right = _plain(left), _plain(right)
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            return left / right
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return _same_kind(left, right, ast.unparse(node))
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _call(node, known, ruleset)
    return None


def _plain(value):
    return registry().Quantity(float(value), "dimensionless") if isinstance(value, Free) else value


def _same_kind(left, right, text: str):
    """Terms added (or alternatives) must be one kind of quantity in one scale: the scale a term's number
    is in is its unit divided by the factor the formula applied (`x_ms / 1000` is in seconds)."""
    if left.dimensionality != right.dimensionality:
        raise _Mismatch(f"`{text}` adds {_words(left)} to {_words(right)}; both sides must be the same "
                        "kind of quantity.")
    ratio = ((ureg_one(right) / right.magnitude) / (ureg_one(left) / left.magnitude)).to("dimensionless").magnitude
    if _step(ratio) is not None:
        raise _Mismatch(f"`{text}` adds {_words(right, scale=False)} to {_words(left, scale=False)} without "
                        "converting one of them.")
    return left


def _call(node: ast.Call, known: dict, ruleset):
    ureg = registry()
    name = "if" if node.func.id == IF_NAME else node.func.id
    args = node.args
    if name in SAME:
        values = [_quantity(a, known, ruleset) for a in args[SAME[name]]]
        if any(v is None for v in values):
            return None
        values = [v for v in values if not isinstance(v, Free)]
        if not values:
            return None
        for other in values[1:]:
            _same_kind(values[0], other, ast.unparse(node))
        return values[0]
    if name in RETURNS:
        return ureg.Quantity(1, PINT[RETURNS[name]])
    if name in ("gpu_spec", "model_spec") and len(args) == 2 and isinstance(args[1], ast.Constant):
        file_spec = ruleset.catalogs.schema.catalog("gpus" if name == "gpu_spec" else "models")
        field_spec = file_spec.fields.get(str(args[1].value)) if file_spec else None
        if field_spec is not None and field_spec.unit in PINT:
            return ureg.Quantity(1, PINT[field_spec.unit])
        return None
    if name == "lookup" and args and isinstance(args[0], ast.Constant):
        table = ruleset.tables.get(args[0].value)
        return ureg.Quantity(1, PINT[table.unit]) if table is not None and table.unit in PINT else None
    return None


def _words(quantity, scale: bool = True) -> str:
    """A quantity's unit as catalogs/schema.yaml names it (GiB, hours), else in pint's short form."""
    text = _schema_name(str(quantity.units)) or f"{quantity.units:~P}".replace("_", "")
    text = "a plain number" if quantity.dimensionless else text
    return text if not scale or math.isclose(quantity.magnitude, 1) else f"{_show(quantity.magnitude)} × {text}"


@functools.lru_cache(maxsize=None)
def _schema_name(units: str) -> str:
    ureg = registry()
    return next((name for name, spelt in PINT.items() if name not in SYNONYMS
                 and spelt != "dimensionless" and str(ureg.Quantity(1, spelt).units) == units), "")


def _show(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"
