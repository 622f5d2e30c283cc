"""The derivation of one result: its rule, the values that flowed in, down to intake cells and catalog lines."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from engine.calc.evaluate import friendly_number
from engine.calc.results import Results, Source

NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass
class Node:
    """One name in the derivation: a rule that ran, a rule that did not apply, or an input."""

    name: str
    kind: str                      # rule | input | given (an intake value in place of a rule) | skipped
    value: Any
    unit: str = ""
    label: str = ""
    formula: str = ""
    when: str = ""
    where: str = ""                # rules/x.yaml:12, Intake!C12, case.yaml:4, or "" when not given
    typed: Any = None              # what the intake said, when the engine resolved it (H100 → its id)
    sources: tuple[Source, ...] = ()
    children: list[Node] = field(default_factory=list)
    repeated: bool = False         # already shown higher up: not expanded again


def explain(key: str, results: Results, ruleset, where: dict[str, str] | None = None,
            typed: dict[str, Any] | None = None, lang: str = "en") -> Node:
    """The tree below `key`; `where` says where each intake value sits (Intake!C12), `typed` what was typed."""
    steps = {s.name: s for s in results.trace}
    where, typed, shown = where or {}, typed or {}, set()

    def node(name: str) -> Node:
        rule = ruleset.rules.get(name)
        if name in shown:
            return Node(name, "rule" if rule else "input", _value(name, steps, results), repeated=True)
        shown.add(name)
        if rule is None:
            value = results.inputs.get(name)
            said = typed.get(name)
            differs = isinstance(said, str) and said.strip().casefold() != str(value).casefold()
            return Node(name, "input", value, where=where.get(name, ""), typed=said if differs else None)
        step = steps.get(name)
        label = rule.label.get(lang) or rule.label.get("en", name)
        if step is not None and step.formula == "given in the intake":
            return Node(name, "given", step.value, rule.unit, label, where=where.get(name, step.where))
        kind = "rule" if step is not None else "skipped"
        out = Node(name, kind, step.value if step else None, rule.unit, label, rule.formula.text,
                   rule.when.text if rule.when else "", rule.where, sources=step.sources if step else ())
        formula_names = _in_order(rule.formula.text, rule.formula.names) if step else []
        when_names = _in_order(rule.when.text, rule.when.names) if rule.when else []
        for child in dict.fromkeys(formula_names + when_names):
            out.children.append(node(child))
        return out

    return node(key)


def _value(name: str, steps: dict, results: Results) -> Any:
    step = steps.get(name)
    return step.value if step is not None else results.inputs.get(name)


def _in_order(text: str, names) -> list[str]:
    """The names a formula reads, in the order it reads them."""
    return [n for n in dict.fromkeys(NAME.findall(text)) if n in names]


def rules_and_lines(tree: Node) -> tuple[set[str], set[str]]:
    """Every rule and every catalog or table line the tree names."""
    rules, lines, stack = set(), set(), [tree]
    while stack:
        n = stack.pop()
        if n.kind in ("rule", "skipped", "given") and not n.repeated:
            rules.add(n.name)
        lines.update(s.where for s in n.sources)
        stack.extend(n.children)
    return rules, lines


def render(tree: Node) -> str:
    """The tree as indented text for a terminal."""
    out: list[str] = []
    _render(tree, "", "", out)
    return "\n".join(out)


def _render(n: Node, first: str, rest: str, out: list[str]) -> None:
    out.append(first + _headline(n))
    if n.repeated:
        return
    details = []
    if n.kind == "skipped":
        details.append(f"not applicable: `when: {n.when}` is false")
    elif n.formula:
        details.append(f"= {n.formula}")
        if n.when:
            details.append(f"when {n.when}")
    for s in n.sources:
        details.append(f"{_source(s)}  [{s.where}]")
    kids = n.children
    bar = "│  " if kids else "   "
    for line in details:
        out.append(rest + bar + line)
    for index, child in enumerate(kids):
        last = index == len(kids) - 1
        _render(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), out)


def _headline(n: Node) -> str:
    value = show(n.value, n.unit)
    if n.repeated:
        return f"{n.name} = {value}  (see above)"
    if n.kind == "input":
        said = f" (typed {n.typed!r})" if n.typed is not None else ""
        place = (n.where if "default" in n.where else f"intake {n.where}") if n.where else "not in the intake"
        return f"{n.name} = {value}{said}  [{place}]"
    if n.kind == "given":
        return f"{n.name} = {value}  — {n.label}, given in the intake  [{n.where or 'intake'}]"
    return f"{n.name} = {value}  — {n.label}  [{n.where}]"


def _source(s: Source) -> str:
    value = show(s.value)
    text = f"{s.what} = {value}"
    return f"{text} ({s.note})" if s.note else text


def show(value: Any, unit: str = "") -> str:
    """A value as the explanation writes it: 1,234.5 GB, 40% for fractions, blank for no value."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return "blank"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if unit == "fraction":
            return f"{value:.1%}"
        number = friendly_number(float(value)) if abs(value) < 1e10 else f"{value:.3g}"
        return f"{number} {unit}".strip()
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in value.items())
    return str(value)
