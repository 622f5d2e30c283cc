"""Rule files: load, check (names, types, cycles) and order them into a RuleSet."""

from __future__ import annotations

import ast
import difflib
import graphlib
import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.calc.catalogs import Catalogs, load_catalogs
from engine.calc.formula import IF_NAME, Formula, FormulaError, compile_formula
from engine.calc.functions import FunctionSpec, build_functions
from engine.calc.rulecache import cached_ruleset
from engine.calc.schema import did_you_mean, unknown_unit
from engine.calc.slips import quote_hint
from engine.calc.tables import Table, expand_why, load_table, why_problems
from engine.calc.yamlfile import line_of, load_yaml_file, plain
from engine.contract import EXTRA_INPUT_TYPES, INPUT_TYPES
from engine.paths import CATALOGS_DIR, LANGUAGES, RULES_DIR
from engine.problems import Problem, SizingError

FILE_KEYS = {"group", "label", "order", "rules", "tables", "warnings", "examples", "about"}
RULE_KEYS = {"name", "label", "unit", "when", "formula", "why", "range", "accept"}
WARNING_KEYS = {"code", "when", "message", "severity"}
EXAMPLE_KEYS = {"name", "given", "expect", "tolerance"}
NOT_RULE_FILES = {"intake.yaml"}      # the form, read by engine.form


@dataclass
class Rule:
    name: str
    group: str
    label: dict[str, str]
    unit: str
    formula: Formula
    when: Formula | None
    why: str
    where: str                  # file:line of the rule
    type: str = "number"        # number | text | bool
    formula_where: str = ""     # file:line of its `formula:` and `when:`, where their slips are reported
    when_where: str = ""
    range: tuple[float, float] | None = None   # the plausible range its author declared, if any
    accept: str = ""            # why a warning about it is acknowledged (`accept:` beside the value)

    @property
    def reads(self) -> frozenset[str]:
        return self.formula.names | (self.when.names if self.when else frozenset())


@dataclass
class WarningRule:
    code: str
    when: Formula
    message: dict[str, str]
    where: str
    severity: str = "warning"


@dataclass
class Example:
    name: str
    given: dict[str, Any]
    expect: dict[str, Any]
    tolerance: float
    where: str


@dataclass
class RuleSet:
    """Rules in evaluation order, warnings, examples, catalogs and the function registry."""

    rules: dict[str, Rule]
    warnings: list[WarningRule]
    examples: list[Example]
    catalogs: Catalogs
    functions: dict[str, FunctionSpec]
    input_types: dict[str, str]
    groups: dict[str, dict] = field(default_factory=dict)   # group → {label, order, file}
    version: str = ""
    tables: dict[str, Table] = field(default_factory=dict)  # the rule files' `tables:` by name
    lint: list[Problem] = field(default_factory=list)       # warnings from the checks: plausible, but look


def load_ruleset(rules_dir: Path = RULES_DIR, catalogs_dir: Path = CATALOGS_DIR) -> RuleSet:
    """Load, check and order every rule file; SizingError lists every problem as file:line."""
    rules_dir, problems, lint = Path(rules_dir), [], []
    try:
        catalogs = load_catalogs(catalogs_dir)
        lint.extend(catalogs.lint)
    except SizingError as e:
        problems.extend(e.problems)
        catalogs = Catalogs()
    input_types = {**INPUT_TYPES, **EXTRA_INPUT_TYPES, **_form_input_types(rules_dir)}
    files = sorted(p for p in rules_dir.glob("*.yaml") if p.name not in NOT_RULE_FILES)
    if not files:
        problems.append(Problem("rules.none", str(rules_dir), "no rule files (*.yaml) found here.",
                                fixer="rules"))
    docs = _read_files(files, problems)
    tables = _tables(docs, catalogs.schema.units, problems)
    functions = build_functions(catalogs, tables)
    loader = _Loader(functions, problems, catalogs.schema.units)
    for path, display, doc in docs:
        loader.load_doc(doc, path, display)
    if not problems:
        by_topic = sorted(loader.rules.values(), key=lambda r: _as_number(loader.groups[r.group]["order"]))
        ordered = _order({r.name: r for r in by_topic}, input_types, problems)
        if not problems:
            _check_types(ordered, input_types, functions, problems)
            _check_warnings(loader.warnings, ordered, input_types, problems)
            _check_examples(loader.examples, ordered, input_types, problems)
            _check_lookups(ordered, loader.warnings, functions, catalogs, tables, problems)
            _check_whys(ordered, tables, problems, lint)
    problems.extend(loader.unit_problems)
    if problems:
        raise SizingError(problems)
    return RuleSet(ordered, loader.warnings, loader.examples, catalogs, functions, input_types,
                   loader.groups, version_of(rules_dir, Path(catalogs_dir)), tables, lint)


def _read_files(files: list[Path], problems: list[Problem]) -> list[tuple[Path, str, dict]]:
    """Each rule file parsed (its tables are needed before any formula is compiled)."""
    docs = []
    for path in files:
        display = f"rules/{path.name}"
        try:
            doc = load_yaml_file(path, display)
        except SizingError as e:
            problems.extend(e.problems)
            continue
        if not isinstance(doc, dict):
            problems.append(Problem("rules.shape", f"{display}:1", "a rule file is a mapping with `group:`, "
                                    "`rules:` and optionally `tables:`, `warnings:` and `examples:` (the file is "
                                    "empty or a list).", fixer="rules"))
            continue
        docs.append((path, display, doc))
    return docs


def _tables(docs, units: dict[str, str], problems: list[Problem]) -> dict[str, Table]:
    tables: dict[str, Table] = {}
    for _, display, doc in docs:
        items = doc.get("tables") or []
        if not isinstance(items, list):
            problems.append(Problem("rules.shape", f"{display}:{line_of(doc, 'tables')}",
                                    "`tables:` must be a list of tables.", fixer="rules"))
            continue
        for index, item in enumerate(items):
            table, found = load_table(item, display, line_of(items, index), units)
            problems.extend(found)
            if table is None:
                continue
            if table.name in tables:
                problems.append(Problem("rules.duplicate", table.where, f"table `{table.name}` is defined twice "
                                        f"(also at {tables[table.name].where}).", fixer="rules"))
                continue
            tables[table.name] = table
    return tables


def _form_input_types(rules_dir: Path) -> dict[str, str]:
    """Input keys the form (rules/intake.yaml) declares, typed as number, text or bool.

    Only the keys and types are read here; the form's own loader (engine.intake.form)
    checks the rest of that file, and `rules check` reports what it finds.
    """
    path = rules_dir / "intake.yaml"
    try:
        doc = load_yaml_file(path, f"rules/{path.name}") if path.exists() else {}
    except SizingError:
        return {}
    fields = doc.get("fields") if isinstance(doc, dict) else None
    return {f["key"]: _value_type(f.get("type")) for f in fields if isinstance(f, dict)
            and isinstance(f.get("key"), str)} if isinstance(fields, list) else {}


def _value_type(kind) -> str:
    kind = str(kind or "text").lower()
    if kind in ("number", "integer", "int", "float", "percent", "decimal"):
        return "number"
    if kind in ("bool", "boolean", "yesno", "yes/no"):
        return "bool"
    return "text"


def _as_number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 100.0


def version_of(*dirs: Path) -> str:
    """The rule set's version: a hash of every rule and catalog file, so the same files are the same set."""
    digest = hashlib.sha256()
    for d in dirs:
        for p in sorted(d.glob("*.yaml")):
            digest.update(p.name.encode())
            digest.update(p.read_bytes())
    return "rs-" + digest.hexdigest()[:10]


class _Loader:
    """Reads rule files into Rules, collecting every problem with its file:line."""

    def __init__(self, functions: dict[str, FunctionSpec], problems: list[Problem], units: dict[str, str]):
        self.functions, self.problems, self.units = functions, problems, units
        self.unit_problems: list[Problem] = []
        self.rules: dict[str, Rule] = {}
        self.warnings: list[WarningRule] = []
        self.examples: list[Example] = []
        self.groups: dict[str, dict] = {}

    def problem(self, code: str, where: str, message: str) -> None:
        self.problems.append(Problem(code, where, message, fixer="rules"))

    def load_doc(self, doc: dict, path: Path, display: str) -> None:
        self._unknown_keys(doc, FILE_KEYS, display, "top-level key")
        group = str(doc.get("group") or path.stem)
        self.groups[group] = {"label": _labels(doc.get("label"), group), "order": doc.get("order", 100),
                              "file": display}
        rules = doc.get("rules") or []
        if not isinstance(rules, list):
            self.problem("rules.shape", f"{display}:{line_of(doc, 'rules')}", "`rules:` must be a list of rules.")
            rules = []
        for index, item in enumerate(rules):
            self._rule(item, group, display, line_of(rules, index))
        for key, target in (("warnings", self._warning), ("examples", self._example)):
            items = doc.get(key) or []
            if not isinstance(items, list):
                self.problem("rules.shape", f"{display}:{line_of(doc, key)}", f"`{key}:` must be a list.")
                continue
            for index, item in enumerate(items):
                target(item, display, line_of(items, index))

    def _unknown_keys(self, node: dict, allowed: set[str], display: str, what: str) -> None:
        for key in node:
            if str(key) not in allowed:
                near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f" Did you mean `{near[0]}`?" if near else f" Allowed: {', '.join(sorted(allowed))}."
                self.problem("rules.unknown_key", f"{display}:{line_of(node, key)}",
                             f"unknown {what} `{key}`.{hint}")

    def _compile(self, text: Any, where: str, rule_name: str) -> Formula | None:
        try:
            return compile_formula(text, self.functions)
        except FormulaError as e:
            self.problem(e.code, where, f"rule `{rule_name}`: {e.message}")
            return None

    def _rule(self, item: Any, group: str, display: str, line: int) -> None:
        if not isinstance(item, dict):
            self.problem("rules.shape", f"{display}:{line}", "each rule is a mapping: `- name: ...` "
                         "with `formula:`.")
            return
        self._unknown_keys(item, RULE_KEYS, display, "rule field")
        name = item.get("name")
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            self.problem("rules.name", f"{display}:{line}", f"rule name {name!r} must be a word of letters, "
                         "digits and _ (not starting with a digit or _).")
            return
        if name in self.rules:
            self.problem("rules.duplicate", f"{display}:{line}",
                         f"rule `{name}` is defined twice (also at {self.rules[name].where}).")
            return
        if "formula" not in item:
            self.problem("rules.missing", f"{display}:{line}", f"rule `{name}` has no `formula:`.")
            return
        formula_where, when_where = f"{display}:{line_of(item, 'formula')}", f"{display}:{line_of(item, 'when')}"
        formula = self._compile(item["formula"], formula_where, name)
        when = None
        if item.get("when") is not None:
            when = self._compile(item["when"], when_where, name)
            if when is None:
                return
        unit = str(item.get("unit") or "")
        if unit and self.units and unit not in self.units:
            # reported after the other checks: a unit changes no formula, so they can still run
            self.unit_problems.append(Problem("rules.unit", f"{display}:{line_of(item, 'unit')}",
                                              f"rule `{name}`: {unknown_unit(unit, self.units)}", fixer="rules"))
        if formula is None:
            return
        self.rules[name] = Rule(name, group, _labels(item.get("label"), name), unit,
                                formula, when, " ".join(str(item.get("why") or "").split()),
                                f"{display}:{line}", formula_where=formula_where, when_where=when_where,
                                range=self._range(item, display, name), accept=_accept(item, display, self))

    def _range(self, item: dict, display: str, name: str) -> tuple[float, float] | None:
        bounds = item.get("range")
        if bounds is None:
            return None
        if isinstance(bounds, list) and len(bounds) == 2 and all(_is_number(b) for b in bounds) \
                and bounds[0] <= bounds[1]:
            return float(bounds[0]), float(bounds[1])
        self.problem("rules.range", f"{display}:{line_of(item, 'range')}",
                     f"rule `{name}`: `range:` is [low, high], the plausible values, e.g. [0.3, 0.8].")
        return None

    def _warning(self, item: Any, display: str, line: int) -> None:
        if not isinstance(item, dict) or "code" not in item or "when" not in item or "message" not in item:
            self.problem("rules.shape", f"{display}:{line}", "a warning needs `code:`, `when:` and `message:`.")
            return
        self._unknown_keys(item, WARNING_KEYS, display, "warning field")
        when = self._compile(item["when"], f"{display}:{line_of(item, 'when')}", str(item["code"]))
        if when is not None:
            self.warnings.append(WarningRule(str(item["code"]), when, _labels(item["message"], str(item["code"])),
                                             f"{display}:{line}", str(item.get("severity") or "warning")))

    def _example(self, item: Any, display: str, line: int) -> None:
        if not isinstance(item, dict) or not isinstance(item.get("given"), dict) \
                or not isinstance(item.get("expect"), dict):
            self.problem("rules.shape", f"{display}:{line}", "an example needs `given:` and `expect:` mappings.")
            return
        self._unknown_keys(item, EXAMPLE_KEYS, display, "example field")
        self.examples.append(Example(str(item.get("name") or f"{display}:{line}"), plain(item["given"]),
                                     plain(item["expect"]), float(item.get("tolerance") or 1e-6),
                                     f"{display}:{line}"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _accept(item: dict, display: str, loader: _Loader) -> str:
    """The reason an author gave for a warning they acknowledge; it must say why, not just "ok"."""
    reason = " ".join(str(item.get("accept") or "").split())
    if "accept" in item and len(reason) < 8:
        loader.problem("rules.accept", f"{display}:{line_of(item, 'accept')}",
                       'write why the value is right: `accept: "list price for the Gulf region"`, '
                       "so the reason travels with the edit.")
        return ""
    return reason


def _labels(value: Any, fallback: str) -> dict[str, str]:
    if isinstance(value, dict):
        labels = {str(k): str(v) for k, v in value.items()}
    elif value:
        labels = {"en": str(value)}
    else:
        labels = {"en": fallback.replace("_", " ")}
    for lang in LANGUAGES:
        labels.setdefault(lang, labels.get("en", fallback))
    return labels


def _unknown_name(name: str, known: set[str]) -> str:
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f"unknown name `{name}`." + (f" Did you mean `{near[0]}`?" if near else "")


def _unknown_in(rule: Rule, name: str, known: set[str], types: dict[str, str]) -> Problem:
    """An unknown name, on the line of the formula (or `when:`) that reads it; text left unquoted says so."""
    formula = rule.formula if name in rule.formula.names else rule.when
    where = rule.formula_where if formula is rule.formula else rule.when_where
    hint = quote_hint(formula.text, formula.tree, name, types)
    message = hint if hint else _unknown_name(name, known)
    return Problem("rules.unknown_name", where or rule.where, f"rule `{rule.name}`: {message}", fixer="rules")


def _order(rules: dict[str, Rule], inputs: dict[str, str], problems: list[Problem]) -> dict[str, Rule]:
    """Topological order from the names each formula reads; names must exist; no cycles."""
    known = set(rules) | set(inputs)
    types = {**inputs, **{name: "any" for name in rules}}
    sorter = graphlib.TopologicalSorter()
    for rule in rules.values():
        unknown = sorted(rule.reads - known)
        if unknown:
            # One slip (unquoted text such as online-inference) can leave several unknown words: say it once.
            said = set()
            for name in unknown:
                problem = _unknown_in(rule, name, known, types)
                if problem.message not in said:
                    said.add(problem.message)
                    problems.append(problem)
        deps = {name for name in rule.reads if name in rules}
        sorter.add(rule.name, *deps)
    if problems:
        return {}
    try:
        sorter.prepare()          # raises CycleError naming the loop
    except graphlib.CycleError as e:
        # graphlib lists each rule before the one that reads it; say it the way formulas read.
        cycle = list(reversed(e.args[1]))
        first = rules[cycle[0]]
        chain = ", which reads ".join(f"`{name}`" for name in cycle[1:])
        problems.append(Problem("rules.cycle", first.formula_where or first.where,
                                f"rules read each other in a loop: `{cycle[0]}` reads {chain}. A rule cannot "
                                "depend on itself: one of these formulas must not use the rule after it.",
                                fixer="rules"))
        return {}
    return {name: rules[name] for name in _stable_order(rules)}


def _stable_order(rules: dict[str, Rule]) -> list[str]:
    """Dependencies first, otherwise the order of the files, so the audit reads like the rule files."""
    done, order = set(), []

    def visit(name: str) -> None:
        if name in done:
            return
        done.add(name)
        for dep in sorted(rules[name].reads):
            if dep in rules:
                visit(dep)
        order.append(name)

    for name in rules:
        visit(name)
    return order


def _check_types(rules: dict[str, Rule], inputs: dict[str, str], functions, problems: list[Problem]) -> None:
    """Infer each rule's type (number, text, bool) in order; report slips like text + number."""
    types = dict(inputs)
    for rule in rules.values():
        try:
            if rule.when is not None and _infer(rule.when.tree.body, types, functions) not in ("bool", "any"):
                raise FormulaError("rules.type", "`when:` must be a condition (true or false).")
            rule.type = _infer(rule.formula.tree.body, types, functions)
            if rule.type == "any":
                rule.type = "number"
        except FormulaError as e:
            problems.append(Problem("rules.type", rule.where, f"rule `{rule.name}`: {e.message}", fixer="rules"))
            rule.type = "number"
        types[rule.name] = rule.type


def _check_warnings(warnings, rules, inputs, problems) -> None:
    types = {**inputs, **{r.name: r.type for r in rules.values()}}
    known = set(types)
    for w in warnings:
        for name in sorted(w.when.names - known):
            problems.append(Problem("rules.unknown_name", w.where, f"warning `{w.code}`: "
                                    f"{_unknown_name(name, known)}", fixer="rules"))
        if not (w.when.names - known):
            try:
                if _infer(w.when.tree.body, types, build_functions(Catalogs())) not in ("bool", "any"):
                    raise FormulaError("rules.type", "`when:` must be a condition (true or false).")
            except FormulaError as e:
                problems.append(Problem("rules.type", w.where, f"warning `{w.code}`: {e.message}", fixer="rules"))


def _check_examples(examples, rules, inputs, problems) -> None:
    known = set(rules) | set(inputs)
    for ex in examples:
        for name in list(ex.given) + list(ex.expect):
            if name not in known:
                problems.append(Problem("rules.unknown_name", ex.where,
                                        f"example `{ex.name}`: {_unknown_name(name, known)}", fixer="rules"))


_WORD = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
         ast.Pow: "**"}


def _infer(node: ast.AST, types: dict[str, str], functions) -> str:
    """The type of an expression: number, text, bool or any (a missing-value constant)."""
    if isinstance(node, ast.Constant):
        v = node.value
        return "bool" if isinstance(v, bool) else "text" if isinstance(v, str) else "number"
    if isinstance(node, ast.Name):
        if node.id in ("true", "True", "false", "False"):
            return "bool"
        return types.get(node.id, "any")
    if isinstance(node, ast.BinOp):
        for side in (node.left, node.right):
            t = _infer(side, types, functions)
            if t not in ("number", "any"):
                raise FormulaError("rules.type", f"`{_WORD.get(type(node.op), '?')}` needs numbers, but "
                                   f"`{ast.unparse(side)}` is {t}.")
        return "number"
    if isinstance(node, ast.UnaryOp):
        t = _infer(node.operand, types, functions)
        if isinstance(node.op, ast.Not):
            if t not in ("bool", "any"):
                raise FormulaError("rules.type", f"`not` needs a condition, but `{ast.unparse(node.operand)}` is {t}.")
            return "bool"
        if t not in ("number", "any"):
            raise FormulaError("rules.type", f"a sign needs a number, but `{ast.unparse(node.operand)}` is {t}.")
        return "number"
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            t = _infer(v, types, functions)
            if t not in ("bool", "any"):
                raise FormulaError("rules.type", f"`and`/`or` join conditions, but `{ast.unparse(v)}` is {t}.")
        return "bool"
    if isinstance(node, ast.Compare):
        left = _infer(node.left, types, functions)
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                kinds = {_infer(e, types, functions) for e in right.elts}
                if left != "any" and kinds and kinds != {left}:
                    raise FormulaError("rules.type", f"`{ast.unparse(node.left)}` is {left} but the list "
                                       f"after `in` holds {'/'.join(sorted(kinds))}.")
                continue
            r = _infer(right, types, functions)
            if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and "text" in (left, r):
                raise FormulaError("rules.type", "`<`/`>` compare numbers, not text.")
            if "any" not in (left, r) and left != r:
                raise FormulaError("rules.type", f"comparing {left} `{ast.unparse(node.left)}` with "
                                   f"{r} `{ast.unparse(right)}` is always false.")
            left = r
        return "bool"
    if isinstance(node, ast.Call):
        name = "if" if node.func.id == IF_NAME else node.func.id
        spec = functions[name]
        arg_types = [_infer(a, types, functions) for a in node.args]
        for index, (t, a) in enumerate(zip(arg_types, node.args)):
            want = spec.arg_type(index)
            if name in ("if", "switch") and index > 0:
                continue
            if want != "any" and t not in (want, "any"):
                raise FormulaError("rules.type", f"argument {index + 1} of {name}() should be {want}, but "
                                   f"`{ast.unparse(a)}` is {t}.")
        if spec.returns != "same":
            return spec.returns
        values = arg_types[1:] if name == "if" else \
            arg_types[2::2] + arg_types[-1:] if name == "switch" else arg_types
        kinds = {t for t in values if t != "any"}
        if len(kinds) > 1:
            raise FormulaError("rules.type", f"{name}() mixes {' and '.join(sorted(kinds))} values; "
                               "all choices must be of one kind.")
        return kinds.pop() if kinds else "any"
    return "any"


_current: RuleSet | None = None
_lock = threading.Lock()


def current_ruleset() -> RuleSet:
    """The rule set from the default folders, loaded once per process (and kept between
    processes while the files stay the same: engine.calc.rulecache)."""
    global _current
    with _lock:
        if _current is None:
            _current = cached_ruleset(load_ruleset, RULES_DIR, CATALOGS_DIR)
        return _current


def _calls(formula: Formula):
    """Every function call in a formula, with its name as rule authors write it."""
    for node in ast.walk(formula.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            yield ("if" if node.func.id == IF_NAME else node.func.id), node


def _check_lookups(rules, warnings, functions, catalogs: Catalogs, tables: dict[str, Table], problems) -> None:
    """Catalog fields and tables named in formulas must exist: a misspelt field would be blank in every quote."""
    formulas = [(r.formula, r.formula_where, f"rule `{r.name}`") for r in rules.values()]
    formulas += [(r.when, r.when_where, f"rule `{r.name}`") for r in rules.values() if r.when is not None]
    formulas += [(w.when, w.where, f"warning `{w.code}`") for w in warnings]
    for formula, where, owner in formulas:
        for name, call in _calls(formula):
            spec = functions.get(name)
            if spec is None:
                continue
            message = None
            if spec.catalog and len(call.args) > 1:
                message = _field_problem(name, spec, call.args[1].value, catalogs)
            elif name == "lookup":
                message = _table_problem(call, tables)
            elif name == "speedup" and call.args[0].value not in catalogs.speedup_tables:
                message = (f"speedup(\"{call.args[0].value}\", ...): catalogs/scaling.yaml has no such table"
                           f"{did_you_mean(call.args[0].value, catalogs.speedup_tables)}")
            if message:
                problems.append(Problem("rules.lookup", where, f"{owner}: {message}", fixer="rules"))


def _field_problem(function: str, spec: FunctionSpec, path: str, catalogs: Catalogs) -> str | None:
    file_spec = catalogs.schema.catalog(spec.catalog)
    if file_spec is None:
        return None
    declared = file_spec.fields.get(path)
    shown = f'{function}(..., "{path}")'
    if declared is None:
        return (f"{shown}: catalogs/{file_spec.filename} has no field `{path}`"
                f"{did_you_mean(path, file_spec.fields)} Fields are declared in catalogs/schema.yaml.")
    wants_number = spec.returns == "number"
    if wants_number != (declared.type in ("number", "integer")):
        other = function.replace("_spec", "_info") if wants_number else function.replace("_info", "_spec")
        return (f"{shown}: `{path}` is {'text' if wants_number else 'a number'}; read it with {other}().")
    table = catalogs.table(spec.catalog)
    if table and not any(_has(entry, path) for entry in table.values()):
        return f"{shown}: no entry of catalogs/{file_spec.filename} has a value for `{path}`, so it is always blank."
    return None


def _has(entry: dict, path: str) -> bool:
    value: Any = entry
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value is not None


def _table_problem(call: ast.Call, tables: dict[str, Table]) -> str | None:
    name = call.args[0].value
    table = tables.get(name)
    if table is None:
        return f"lookup(\"{name}\", ...): there is no table `{name}`{did_you_mean(name, tables)}"
    given = len(call.args) - 1
    if given != len(table.columns):
        return (f"lookup(\"{name}\", ...) takes one value per column of the table ({', '.join(table.columns)}), "
                f"{len(table.columns)} in all, not {given}.")
    return None


def _check_whys(rules, tables: dict[str, Table], problems, lint) -> None:
    """A why: that names {table} gets the table in words; one that writes out a table's number is warned."""
    for rule in rules.values():
        if not rule.why:
            continue
        read = {call.args[0].value for name, call in _calls(rule.formula) if name == "lookup"}
        errors, warnings = why_problems(rule.why, tables, read, rule.where, rule.name)
        problems.extend(errors)
        lint.extend(warnings)
        rule.why = expand_why(rule.why, tables)
