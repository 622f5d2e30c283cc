"""The derivation of one result: its rule, the values that flowed in, down to intake cells and catalog lines."""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.calc.evaluate import friendly_number
from engine.calc.results import Results, Source

# a name in a formula, or a quoted text, which is no name: lookup("stack_allreduce_latency_ms", …) names a table,
# even where a rule of that name is among the formula's inputs
NAME = re.compile(r"\"[^\"]*\"|'[^']*'|[A-Za-z_]\w*")


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


def figure_key(name: str, ruleset, labels: dict[str, str] | None = None) -> str | None:
    """The result or input a person means: its key, or its label in any language (rules' labels, and
    `labels` — label → key — for the intake's fields), matched without regard to case or spacing."""
    if name in ruleset.rules or name in ruleset.input_types:
        return name
    wanted = _folded(name)
    for label, key in _labels(ruleset, labels).items():
        if _folded(label) == wanted:
            return key
    return None


def closest_figures(name: str, ruleset, labels: dict[str, str] | None = None, n: int = 3) -> list[tuple[str, str]]:
    """The nearest (key, label) pairs to a name that matched nothing, by key or by label in any language."""
    names = {**{k: k for k in ruleset.rules}, **{k: k for k in ruleset.input_types}, **_labels(ruleset, labels)}
    folded = {}
    for said, key in names.items():
        folded.setdefault(_folded(said), (key, said))
    near = difflib.get_close_matches(_folded(name), list(folded), n=n * 3, cutoff=0.5)
    out: dict[str, str] = {}
    for word in near:
        key, said = folded[word]
        out.setdefault(key, said)
    return list(out.items())[:n]


def _labels(ruleset, labels: dict[str, str] | None) -> dict[str, str]:
    out = dict(labels or {})
    for rule in ruleset.rules.values():
        for label in rule.label.values():
            out.setdefault(label, rule.name)
    return out


def _folded(text: str) -> str:
    return " ".join(str(text).replace("_", " ").casefold().split())


def explain(key: str, results: Results, ruleset, where: dict[str, str] | None = None,
            typed: dict[str, Any] | None = None, lang: str = "en",
            input_labels: dict[str, str] | None = None) -> Node:
    """The tree below `key`; `where` says where each intake value sits (Intake!C12), `typed` what was
    typed, `input_labels` what the intake's fields are called in the reader's language."""
    input_labels = input_labels or {}
    steps = {s.name: s for s in results.trace}
    where, typed, shown = where or {}, typed or {}, set()
    currency = str(results.values.get("cost_currency") or results.inputs.get("currency") or "USD")

    def node(name: str) -> Node:
        rule = ruleset.rules.get(name)
        if name in shown:
            return Node(name, "rule" if rule else "input", _value(name, steps, results), repeated=True)
        shown.add(name)
        if rule is None:
            value = results.inputs.get(name)
            said = typed.get(name)
            differs = isinstance(said, str) and said.strip().casefold() not in (str(value).casefold(),
                                                                                 show(value).casefold())
            return Node(name, "input", value, label=input_labels.get(name, ""), where=where.get(name, ""),
                        typed=said if differs else None)
        step = steps.get(name)
        label = rule.label.get(lang) or rule.label.get("en", name)
        unit = currency if rule.unit == "currency" else rule.unit
        if step is not None and step.formula == "given in the intake":
            return Node(name, "given", step.value, unit, label, where=where.get(name, step.where))
        kind = "rule" if step is not None else "skipped"
        out = Node(name, kind, step.value if step else None, unit, label, rule.formula.text,
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


def render_short(tree: Node, words: dict[str, str], full_hint: str = "", as_quoted: str = "",
                 unit_word: Callable[[str], str] = str) -> str:
    """The figure, its formula and the formula with its values, what it reads directly, and the intake
    values and catalog entries the whole derivation rests on (one line per entry) — a screenful.
    `words` holds the few fixed phrases in the reader's language (engine.quote.messages: explain);
    `as_quoted` is the figure as the quote writes it, where its unit differs (30 minutes for 0.5 hours);
    `unit_word` says a unit in the reader's language."""
    def value(n: Node) -> str:
        return show(n.value, unit_word(n.unit) if n.unit and n.unit != "fraction" else n.unit)

    quoted = f" ({words['in_quote']} {as_quoted})" if as_quoted else ""
    out = [f"{tree.label or tree.name} ({tree.name}) = {value(tree)}{quoted}"
           + (f"  [{tree.where}]" if tree.where else "")]
    if tree.kind == "skipped":
        out.append(f"   {words['not_applicable']}: `when: {tree.when}`")
    elif tree.formula:
        out.append(f"   = {tree.formula}")
        values = {c.name: c for c in tree.children}
        filled = NAME.sub(lambda m: _bare(values[m[0]].value) if m[0] in values else m[0], tree.formula)
        if filled != tree.formula:
            out.append(f"   = {filled}")
    for s in tree.sources:
        out.append(f"   {_source(s)}  [{s.where}]")
    for index, child in enumerate(tree.children):
        first = "└─ " if index == len(tree.children) - 1 else "├─ "
        label = child.label or child.name
        said = f" ({child.name})" if label != child.name else ""
        place = child.where or (words["not_given"] if child.kind == "input" else "")
        out.append(f"{first}{label}{said} = {value(child)}" + (f"  [{place}]" if place else ""))
    rests = _intake_leaves(tree)
    if rests:
        out.append(words["rests_on"] + ":")
        out += [f"   {n.label or n.name} = {value(n)}" + (f" ({words['typed']} {n.typed!r})" if n.typed is not None else "")
                + f"  [{n.where}]" for n in rests]
    catalogs = _catalog_lines(tree)
    if catalogs:
        out.append(words["catalogs"] + ":")
        out += [f"   {line}" for line in catalogs]
    if full_hint:
        out.append(full_hint)
    return "\n".join(out)


def _catalog_lines(tree: Node) -> list[str]:
    """Every catalog entry and table row below the tree, one line per entry: "gpus nvidia-h100-sxm5-80gb:
    memory_gb 80, price_usd_per_gpu_hour 2.49  [catalogs/gpus.yaml:139–151]"; blank fields left out."""
    entries: dict[tuple[str, str], list[Source]] = {}
    rows: dict[tuple[str, str], Source] = {}
    stack = [tree]
    while stack:
        n = stack.pop(0)
        for s in n.sources:
            words = s.what.split(" ")
            if s.what.startswith("table ") or len(words) != 3:
                rows.setdefault((s.what, s.where), s)
            elif s.value is not None and s.value != "":
                entries.setdefault((words[0], words[1]), [])
                if all(known.what != s.what for known in entries[(words[0], words[1])]):
                    entries[(words[0], words[1])].append(s)
        stack.extend(n.children)
    out = []
    for (catalog, entry), found in entries.items():
        path = found[0].where.rsplit(":", 1)[0]
        lines = sorted(int(s.where.rsplit(":", 1)[1]) for s in found if s.where.rsplit(":", 1)[-1].isdigit())
        span = f"{lines[0]}–{lines[-1]}" if lines and lines[0] != lines[-1] else (str(lines[0]) if lines else "")
        fields = ", ".join(f"{s.what.split(' ')[2]} {show(s.value)}" for s in found)
        out.append(f"{catalog} {entry}: {fields}  [{path}:{span}]" if span else f"{catalog} {entry}: {fields}")
    out += [f"{_source(s)}  [{s.where}]" for s in rows.values()]
    return out


def count_steps(tree: Node) -> int:
    """How many rules the whole derivation shows."""
    return len(rules_and_lines(tree)[0])


def _intake_leaves(tree: Node) -> list[Node]:
    """The intake values anywhere below the tree (not the form's defaults), once each, in order met."""
    out, seen, stack = [], set(), [tree]
    while stack:
        n = stack.pop(0)
        if n.kind in ("input", "given") and n.where and "default" not in n.where and n.name not in seen:
            seen.add(n.name)
            out.append(n)
        stack.extend(n.children)
    return out


def _bare(value: Any) -> str:
    """A value inside a formula: the number without its unit, text in quotes."""
    if isinstance(value, str):
        return f'"{value}"'
    return show(value)


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
