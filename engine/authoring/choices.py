"""Checked choices: a word a formula compares, switches on or looks up must be one its value can take."""

from __future__ import annotations

import ast

from engine.calc.formula import IF_NAME
from engine.calc.schema import did_you_mean
from engine.problems import Problem

# Functions whose text result is a precision id (the catalog's precisions and the form's list).
PRECISION_FUNCTIONS = {"peak_precision"}


def check_choices(ruleset, form, problems: list[Problem]) -> None:
    """Every quoted word compared with, switched on or matched in a table against a name with known choices."""
    choices = choice_sets(ruleset, form)
    formulas = [(r.formula, r.formula_where or r.where, f"rule `{r.name}`") for r in ruleset.rules.values()]
    formulas += [(r.when, r.when_where or r.where, f"rule `{r.name}`") for r in ruleset.rules.values() if r.when]
    formulas += [(w.when, w.where, f"warning `{w.code}`") for w in ruleset.warnings]
    columns: dict[tuple[str, str], frozenset[str] | None] = {}      # (table, column) → what lookups pass
    for formula, where, owner in formulas:
        for node in ast.walk(formula.tree):
            for word, subject, known in _compared(node, choices, ruleset):
                if word not in known:
                    problems.append(_problem(where, owner, word, subject, known))
            if isinstance(node, ast.Call) and _name(node.func) == "lookup":
                _passed(node, choices, ruleset, columns)
    _table_words(ruleset, columns, problems)


def choice_sets(ruleset, form) -> dict[str, frozenset[str]]:
    """The words each input and text rule can hold: the form's lists, catalog ids, what formulas yield."""
    precisions = frozenset(ruleset.catalogs.precisions)
    found: dict[str, frozenset[str]] = {}
    for key, spec in form.fields.items():
        listed = frozenset(c.id for c in form.choices.get(spec.choices or "", ()))
        if listed:
            found[key] = listed | (precisions if spec.choices == "precision" else frozenset())
    for rule in ruleset.rules.values():
        if rule.type == "text":
            words = _words(rule.formula.tree.body, found, ruleset)
            if words is not None:
                found[rule.name] = words
    return found


def _words(node: ast.AST, found: dict, ruleset) -> frozenset[str] | None:
    """The words an expression can yield; None when they are not known (a name, a free text)."""
    if isinstance(node, ast.Constant):
        return frozenset([node.value]) if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return found.get(node.id)
    if not isinstance(node, ast.Call):
        return None
    name, args = _name(node.func), node.args
    if name in ("if", "first", "switch"):
        values = args[1:] if name == "if" else args if name == "first" else _switch_values(args)
        parts = [_words(a, found, ruleset) for a in values]
        return None if not parts or any(p is None for p in parts) else frozenset().union(*parts)
    if name in PRECISION_FUNCTIONS:
        return frozenset(ruleset.catalogs.precisions)
    if name == "gpu_info" and len(args) == 2 and isinstance(args[1], ast.Constant):
        spec = ruleset.catalogs.schema.files.get("gpus.yaml")
        field_spec = spec.fields.get(str(args[1].value)) if spec else None
        return frozenset(field_spec.choices) if field_spec and field_spec.choices else None
    return None


def _switch_values(args: list) -> list:
    """switch(x, k1, v1, k2, v2, ..., default): the values and the default."""
    rest = args[1:]
    values = rest[1::2]
    if len(rest) % 2:
        values.append(rest[-1])
    return values


def _switch_keys(args: list) -> list:
    rest = args[1:]
    return rest[0:len(rest) - len(rest) % 2:2]


def _compared(node: ast.AST, choices: dict, ruleset):
    """(word, subject, its choices) for each quoted word `subject == "word"`, `in [...]` or a switch key."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        for (a, b) in zip(sides, sides[1:]):
            for subject, other in ((a, b), (b, a)):
                known = _words_of_subject(subject, choices, ruleset)
                if known is None:
                    continue
                words = other.elts if isinstance(other, (ast.List, ast.Tuple)) else [other]
                for w in words:
                    if isinstance(w, ast.Constant) and isinstance(w.value, str):
                        yield w.value, ast.unparse(subject), known
    elif isinstance(node, ast.Call) and _name(node.func) == "switch" and node.args:
        known = _words_of_subject(node.args[0], choices, ruleset)
        if known is not None:
            for key in _switch_keys(node.args):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield key.value, ast.unparse(node.args[0]), known


def _words_of_subject(node: ast.AST, choices: dict, ruleset) -> frozenset[str] | None:
    if isinstance(node, ast.Constant):
        return None
    return _words(node, choices, ruleset)


def _passed(call: ast.Call, choices: dict, ruleset, columns: dict) -> None:
    """The words one lookup("table", a, b) passes for each column (None: not known, so not checked)."""
    if not call.args or not isinstance(call.args[0], ast.Constant):
        return
    table = ruleset.tables.get(call.args[0].value)
    if table is None:
        return
    for column, arg in zip(table.columns, call.args[1:]):
        key = (table.name, column)
        known = _words(arg, choices, ruleset)
        if key in columns and columns[key] is None:
            continue
        columns[key] = None if known is None else (columns.get(key) or frozenset()) | known


def _table_words(ruleset, columns: dict, problems: list[Problem]) -> None:
    """A row's word for a column must be one some lookup passes for it: a misspelt key picks another row."""
    for (name, column), known in columns.items():
        if known is None:
            continue
        table = ruleset.tables[name]
        for row in table.rows:
            for word in row.match.get(column, ()):
                if isinstance(word, str) and word not in known:
                    problems.append(_problem(row.where, f"table `{name}`", word, column, known))


def _problem(where: str, owner: str, word: str, subject: str, known: frozenset[str]) -> Problem:
    listed = ", ".join(sorted(known))
    return Problem("rules.choice", where, f"{owner}: \"{word}\" is not a value `{subject}` can take "
                   f"({listed}){did_you_mean(word, known)} A misspelt word never matches, so the edit "
                   "would silently do nothing.", fixer="rules")


def _name(func: ast.AST) -> str:
    name = func.id if isinstance(func, ast.Name) else ""
    return "if" if name == IF_NAME else name
