"""Evaluate a RuleSet on one intake (with a trace) or on a grid of scenarios as numpy arrays."""

from __future__ import annotations

import math
import string
from typing import Any, Iterable

import numpy as np

from engine.calc.formula import FormulaError, is_array
from engine.calc.functions import is_given, missing
from engine.calc.lookups import READS
from engine.calc.results import Notice, Results, Step, plain
from engine.problems import Problem, SizingError

MISSING = {"number": np.float64("nan"), "text": "", "bool": False}


def evaluate(intake, ruleset, *, only: Iterable[str] | None = None, layout: dict | None = None) -> Results:
    """Every rule that applies to this intake, in dependency order, with its trace and warnings.

    `layout` adds the planner's choices for fields the intake left blank; they shape the
    results but are not inputs (`Results.inputs` holds only what the intake gave).
    """
    given = input_values(intake)
    values = {**given, **(layout or {})}
    scope, pinned = _scope(values, ruleset)
    wanted = rules_read(ruleset, only) if only is not None else None
    reads: list = []
    recording = READS.set(reads)       # the catalog fields and table rows each formula looks up
    try:
        with np.errstate(all="ignore"):
            applied, trace = _traced(ruleset, values, scope, pinned, wanted, reads)
            notices = _warnings(ruleset, scope) if wanted is None else []
    finally:
        READS.reset(recording)
    used = {k: _native(_coerce(given[k], kind)) for k, kind in ruleset.input_types.items()
            if k in given and is_given(_native(_coerce(given[k], kind)))}
    return Results(applied, trace, notices, ruleset.version, used)


def _traced(ruleset, values: dict, scope: dict, pinned: set[str], wanted, reads: list):
    """Each rule in order into `scope`; (values that applied, the trace)."""
    applied, trace = {}, []
    for rule in ruleset.rules.values():
        if wanted is not None and rule.name not in wanted:
            continue
        sources = ()
        if rule.when is not None and not _run(rule, rule.when, scope):
            scope[rule.name] = MISSING[rule.type]       # not this workload's figure, even if the intake gives it
            continue
        if rule.name in pinned:
            value = _coerce(values[rule.name], rule.type)
            formula, inputs = "given in the intake", {}
        else:
            if reads:
                reads.clear()
            value = _run(rule, rule.formula, scope)
            formula, inputs = rule.formula.text, {n: _native(scope[n]) for n in sorted(rule.formula.names)}
            if reads:
                sources = tuple(dict.fromkeys(reads))
        scope[rule.name] = value
        value = _native(value)
        if is_given(value):
            applied[rule.name] = value
        trace.append(Step(rule.name, rule.group, rule.label, rule.unit, formula, inputs, value,
                          rule.where, rule.why, sources))
    return applied, trace


def evaluate_grid(intake, ruleset, grid: dict[str, Iterable], *,
                  only: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """One scenario per combination of the grid's values, every rule a column, in one numpy pass.

    `only` limits the work to the rules those results need (and the columns to them).
    """
    values = input_values(intake)
    keys = list(grid)
    axes = [np.asarray(list(grid[k])) for k in keys]
    count = math.prod(len(a) for a in axes) if axes else 1
    grids = np.meshgrid(*axes, indexing="ij") if axes else []
    return evaluate_columns(values, ruleset, {k: g.ravel() for k, g in zip(keys, grids)}, count, only=only)


def input_values(intake) -> dict:
    """The key → value mapping of an intake (anything with `.values`) or of a plain dict."""
    return dict(intake) if isinstance(intake, dict) else dict(intake.values)


def evaluate_columns(values: dict, ruleset, columns: dict[str, np.ndarray], count: int, *,
                     only: Iterable[str] | None = None, unknown_where_not_applied: bool = False
                     ) -> dict[str, np.ndarray]:
    """Evaluate with some inputs given as equal-length arrays (scenarios); others stay scalars.

    Every rule (or, with `only`, just those results and what they read) becomes a column,
    beside the given columns and one `warning.<code>` column per warning rule: a plain
    mapping of name → array of `count` values (pandas wraps it where a table is wanted;
    a quote does without, and so without pandas' import).

    A yes/no rule reads False where its `when:` fails, which the rules that read it need.
    A table shown to people must not say "no" of what does not apply ("meets the deadline"
    of a serving job): `unknown_where_not_applied` makes such a column None there instead.
    """
    merged = dict(values)
    types = {**ruleset.input_types, **{r.name: r.type for r in ruleset.rules.values()}}
    for key, column in columns.items():
        merged[key] = _coerce_array(column, types.get(key, "number"))
    scope, pinned = _scope(merged, ruleset)
    pinned |= set(columns) & set(ruleset.rules)
    wanted = rules_read(ruleset, only) if only is not None else None
    with np.errstate(all="ignore"):
        for rule in ruleset.rules.values():
            if wanted is not None and rule.name not in wanted:
                continue
            if rule.name in pinned:
                scope[rule.name] = _pinned_value(rule, merged, columns, scope)
                continue
            scope[rule.name] = _rule_value(rule, scope)
        # a column that pins a rule reads as the rule's value: blank where its `when:` fails
        out = {k: np.broadcast_to(scope[k] if k in ruleset.rules and k in scope else columns[k], count)
               for k in columns}
        for name in (ruleset.rules if only is None else [n for n in only if n in ruleset.rules]):
            out.setdefault(name, np.broadcast_to(np.asarray(scope[name]), count))
        if only is None:
            for w in ruleset.warnings:
                out[f"warning.{w.code}"] = np.broadcast_to(np.asarray(_run(w, w.when, scope), dtype=bool), count)
        if unknown_where_not_applied:
            for name in list(out):
                rule = ruleset.rules.get(name)
                if rule is not None and rule.type == "bool" and rule.when is not None:
                    applies = np.broadcast_to(np.asarray(_run(rule, rule.when, scope), dtype=bool), count)
                    out[name] = np.where(applies, np.asarray(out[name], dtype=object), None)
    return out


def evaluate_families(values: dict, ruleset, columns: dict[str, np.ndarray], count: int,
                      inner: dict[str, np.ndarray], family: np.ndarray, *,
                      only: Iterable[str]) -> dict[str, np.ndarray]:
    """evaluate_columns for scenarios that come in families: `columns` (`count` rows) hold what a
    family shares, `inner` (one row per scenario) what varies within it, `family[i]` scenario i's
    family. The result is evaluate_columns' on the columns repeated by `family` beside `inner`,
    value for value; but a rule that reads nothing of `inner` (directly or through other rules)
    is computed once per family and repeated, so only the few rules that depend on what varies
    pay for every scenario. (The planner's recompute share: four shares per layout; about 15 of
    the 150 rules it ranks layouts by read the share — compute, TP traffic and activations.)
    Warnings are not computed: `only` names the results wanted."""
    family = np.asarray(family, dtype=np.intp)
    types = {**ruleset.input_types, **{r.name: r.type for r in ruleset.rules.values()}}
    merged = dict(values)
    for key, column in columns.items():
        merged[key] = _coerce_array(column, types.get(key, "number"))
    shared, pinned = _scope(merged, ruleset)
    pinned |= set(columns) & set(ruleset.rules)
    varied = _Repeated(shared, family, count)
    for key, column in inner.items():
        varied[key] = merged[key] = _coerce_array(column, types.get(key, "number"))
    pinned |= set(inner) & set(ruleset.rules)
    varies = set(inner)
    wanted = rules_read(ruleset, only)
    with np.errstate(all="ignore"):
        for rule in ruleset.rules.values():
            if rule.name not in wanted or rule.name in inner:
                continue
            scope = shared
            if rule.reads & varies:
                varies.add(rule.name)
                scope = varied
            if rule.name in pinned:
                scope[rule.name] = _pinned_value(rule, merged, columns, scope,
                                                 varied.repeat if scope is varied else None)
                continue
            scope[rule.name] = _rule_value(rule, scope)
        size = len(family)
        out = {k: np.broadcast_to(np.asarray(columns[k])[family], size) for k in columns}
        out.update({k: np.broadcast_to(v, size) for k, v in inner.items()})
        # a column that pins a rule reads as the rule's value, as in evaluate_columns
        out.update({k: np.broadcast_to(np.asarray(varied[k]), size) for k in out if k in ruleset.rules})
        for name in (n for n in only if n in ruleset.rules):
            out.setdefault(name, np.broadcast_to(np.asarray(varied[name]), size))
    return out


class _Repeated(dict):
    """The scope of one scenario per row: values set here, others read from the per-family scope
    and repeated to one row per scenario (once, on first read)."""

    def __init__(self, shared: dict, family: np.ndarray, count: int):
        super().__init__()
        self.shared, self.family, self.count = shared, family, count

    def __missing__(self, name):
        value = self.repeat(self.shared[name])
        self[name] = value
        return value

    def repeat(self, value):
        if is_array(value) and np.ndim(value) == 1 and len(value) == self.count:
            return np.asarray(value)[self.family]
        return value


def _pinned_value(rule, merged: dict, columns: dict, scope: dict, shape=None):
    """The value an intake (or a scenario column) gives a rule; where some scenarios leave it blank,
    the rule's own value there; blank where the rule's `when:` fails. `shape` fits a per-family
    value to the scope's rows (evaluate_families)."""
    given = merged[rule.name] if rule.name in columns else _coerce(merged[rule.name], rule.type)
    if shape is not None:
        given = shape(given)
    blank = missing(given) if is_array(given) else None
    if blank is not None and blank.any():
        given = np.where(blank, _rule_value(rule, scope), given)  # some scenarios give it, others leave it to the rule
    if rule.when is None:
        return given
    applies = _run(rule, rule.when, scope)                       # a given value stands only where the rule applies
    if not is_array(applies):
        return given if applies else MISSING[rule.type]
    return np.where(applies, given, MISSING[rule.type])


def _rule_value(rule, scope):
    """A rule's value over the scenarios: its formula where `when:` holds, blank elsewhere."""
    if rule.when is None:
        return _run(rule, rule.formula, scope)
    mask = _run(rule, rule.when, scope)
    if not is_array(mask):
        return _run(rule, rule.formula, scope) if mask else MISSING[rule.type]
    return np.where(mask, _run(rule, rule.formula, scope), MISSING[rule.type])


def _scope(values: dict, ruleset) -> tuple[dict, set[str]]:
    scope = {name: _coerce(values.get(name), kind) for name, kind in ruleset.input_types.items()}
    for name, value in values.items():
        if is_array(value):
            scope[name] = value
    pinned = {k for k, v in values.items()
              if k in ruleset.rules and (is_array(v) or is_given(v))}
    return scope, pinned


def _coerce(value: Any, kind: str) -> Any:
    if is_array(value):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING[kind]
    if kind == "number":
        if isinstance(value, bool):
            return np.float64(value)
        try:
            return np.float64(value)
        except (TypeError, ValueError):
            return MISSING["number"]
    if kind == "bool":
        return bool(value)
    return str(value)


def _coerce_array(column, kind: str) -> np.ndarray:
    """The column as its kind's array: the very array when it is one already, so that what the
    look-ups know of it (lookups.repeat_rows) still holds."""
    column = np.asarray(column)
    return column.astype(float if kind == "number" else bool if kind == "bool" else str, copy=False)


def _run(rule, formula, scope):
    try:
        return formula(scope)
    except FormulaError as e:
        raise SizingError([Problem(e.code, rule.where, f"`{getattr(rule, 'name', getattr(rule, 'code', ''))}`: "
                                   f"{e.message}", fixer="rules")]) from None
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        raise SizingError([Problem("rules.runtime", rule.where,
                                   f"`{getattr(rule, 'name', getattr(rule, 'code', ''))}` could not be "
                                   f"computed: {e}.", fixer="rules")]) from None


def _native(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


_ANCESTORS: dict[tuple[int, frozenset], tuple[Any, frozenset]] = {}


def rules_read(ruleset, names: Iterable[str]) -> frozenset[str]:
    """The rules `names` need, themselves included; cached, since the planner asks for the same few sets often."""
    key = (id(ruleset), frozenset(names))
    hit = _ANCESTORS.get(key)
    if hit is not None and hit[0] is ruleset:
        return hit[1]
    if len(_ANCESTORS) > 256:
        _ANCESTORS.clear()
    wanted = frozenset(_walk(ruleset, key[1]))
    _ANCESTORS[key] = (ruleset, wanted)
    return wanted


def _walk(ruleset, names: Iterable[str]) -> set[str]:
    wanted, stack = set(), [n for n in names if n in ruleset.rules]
    while stack:
        name = stack.pop()
        if name in wanted:
            continue
        wanted.add(name)
        stack.extend(n for n in ruleset.rules[name].reads if n in ruleset.rules)
    return wanted


class _MessageFormatter(string.Formatter):
    """`{name}` shows numbers readably; `{name:.0%}` and other format specs work as in Python."""

    def format_field(self, value, spec):
        value = _native(value)
        if not spec and isinstance(value, (int, float)) and not isinstance(value, bool):
            return friendly_number(float(value))
        return super().format_field(value, spec)


# Rules count GB as 10⁹ bytes; GPU makers (and so the quote, engine.quote.messages) as 2³⁰ bytes.
BINARY_GB = 2 ** 30 / 1e9


def friendly_number(value: float) -> str:
    """1,321 · 165.2 · 66.08 · 0.0123 — thousands separators, about four significant digits, no exponent."""
    if not math.isfinite(value):
        return "n/a"
    magnitude = abs(value)
    if magnitude >= 1000 or value == int(value):
        return f"{value:,.0f}"
    decimals = 1 if magnitude >= 100 else 2 if magnitude >= 1 else max(2, 3 - math.floor(math.log10(magnitude)))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


class _PlainView(dict):
    """The scope as plain Python values, converted only for the names a message uses; a catalog
    id reads as its name in the message's language (`bf16` → "BF16 (bfloat16)")."""

    def __init__(self, scope: dict, catalogs=None, lang: str = "en", gb: frozenset = frozenset()):
        super().__init__()
        self.scope, self.catalogs, self.lang, self.gb = scope, catalogs, lang, gb

    def __getitem__(self, key):
        value = self.scope[key]
        if isinstance(value, str):
            name = self.catalogs.name_of(value, self.lang) if self.catalogs is not None else None
            return name or value
        value = plain(value)
        if key in self.gb and isinstance(value, (int, float)) and not isinstance(value, bool):
            return value / BINARY_GB      # a message reads GB as the quote does: as the GPU's name counts them
        return value


def _warnings(ruleset, scope: dict) -> list[Notice]:
    notices, formatter = [], _MessageFormatter()
    catalogs = getattr(ruleset, "catalogs", None)
    # GPU memory (the capacity rules' GB), not storage or data, which are sold in GB of 10⁹ bytes
    memory = {name for name, rule in ruleset.rules.items() if rule.unit == "GB" and rule.group == "capacity"}
    # ... and the ends of their likely ranges (rules/uncertainty.yaml), which the quote scales alike
    gb = frozenset(memory | {f"{name}_{end}" for name in memory for end in ("low", "high")})
    for w in ruleset.warnings:
        if not _run(w, w.when, scope):
            continue
        message = {}
        for lang, text in w.message.items():
            try:
                message[lang] = formatter.vformat(text, (), _PlainView(scope, catalogs, lang, gb))
            except (KeyError, ValueError, IndexError) as e:
                message[lang] = text + f" [message placeholder problem: {e}]"
        notices.append(Notice(w.code, message, w.where, w.severity))
    return notices
