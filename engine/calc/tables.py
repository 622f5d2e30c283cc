"""Rule-file tables: numbers kept one row per case with their evidence, and read by lookup() in a formula."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine.calc.schema import did_you_mean, unknown_unit
from engine.calc.yamlfile import line_of, plain
from engine.problems import Problem

TABLE_KEYS = {"name", "label", "columns", "value", "unit", "rows", "about", "range"}
EVIDENCE = "evidence"
ACCEPT = "accept"          # a row's acknowledged warning: why its value is right though unusual
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w.])")


@dataclass(frozen=True)
class Row:
    match: dict[str, tuple]          # column → the values it matches (absent: any value)
    value: Any
    evidence: str
    where: str                       # file:line of the row
    accept: str = ""                 # why a warning about its value is acknowledged

    def matches(self, values: tuple, columns: tuple[str, ...]) -> bool:
        return all(col not in self.match or _same(value, self.match[col]) for col, value in zip(columns, values))

    def case(self) -> str:
        """The row's condition in words: "precision fp8, architecture hopper or blackwell" or "otherwise"."""
        parts = [f"{col} {' or '.join(map(str, vals))}" for col, vals in self.match.items()]
        return ", ".join(parts) if parts else "otherwise"


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]         # what a row is matched on, in the order lookup() takes them
    value: str                       # the column holding the number
    unit: str
    rows: tuple[Row, ...]
    where: str
    range: tuple[float, float] | None = None     # the plausible values its author declared, if any

    def find(self, values: tuple) -> Row | None:
        """The first row (top to bottom) whose columns all match; None when none does."""
        return next((row for row in self.rows if row.matches(values, self.columns)), None)

    def values(self) -> list[float]:
        return [row.value for row in self.rows]

    def in_words(self) -> str:
        """The table as one sentence, for a `why:` that says {table_name}."""
        return "; ".join(f"{_show(row.value)} {'when ' + row.case() if row.match else 'otherwise'}"
                         for row in self.rows)


def _same(value: Any, choices: tuple) -> bool:
    if isinstance(value, str):
        return value in choices
    return any(not isinstance(c, str) and float(c) == float(value) for c in choices)


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def load_table(item: Any, display: str, line: int, units: dict[str, str]) -> tuple[Table | None, list[Problem]]:
    """One entry of a rule file's `tables:`; every problem with its file:line."""
    problems: list[Problem] = []

    def problem(code: str, at: int, message: str) -> None:
        problems.append(Problem(code, f"{display}:{at}", message, fixer="rules"))

    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"].isidentifier():
        problem("tables.shape", line, "a table needs `name:` (a word), `columns:` (what rows are matched on), "
                "`value:` (the column with the number) and `rows:`.")
        return None, problems
    name = item["name"]
    for key in item:
        if key not in TABLE_KEYS:
            problem("tables.unknown_key", line_of(item, key), f"table `{name}`: unknown field `{key}`"
                    f"{did_you_mean(key, TABLE_KEYS)}")
    columns = item.get("columns")
    if not isinstance(columns, list) or not all(isinstance(c, str) and c.isidentifier() for c in columns):
        problem("tables.shape", line_of(item, "columns") or line, f"table `{name}`: `columns:` must list the names "
                "rows are matched on, e.g. [precision, architecture].")
        return None, problems
    value = str(item.get("value") or "value")
    unit = str(item.get("unit") or "")
    if unit and units and unit not in units:
        problem("rules.unit", line_of(item, "unit"), f"table `{name}`: {unknown_unit(unit, units)}")
    rows = item.get("rows")
    if not isinstance(rows, list) or not rows:
        problem("tables.shape", line_of(item, "rows") or line, f"table `{name}` needs `rows:`, one per case.")
        return None, problems
    allowed = {*columns, value, EVIDENCE, ACCEPT}
    built, catch_all = [], None
    for index, row in enumerate(rows):
        at = line_of(rows, index)
        if not isinstance(row, dict):
            problem("tables.shape", at, f"table `{name}`: each row is a mapping, e.g. "
                    f"{{{columns[0]}: ..., {value}: 0.5, {EVIDENCE}: \"where the number comes from\"}}.")
            continue
        for key in row:
            if key not in allowed:
                problem("tables.unknown_key", line_of(row, key) or at, f"table `{name}`: `{key}` is not a column"
                        f"{did_you_mean(key, allowed)} Columns: {', '.join(columns)}; the number goes in "
                        f"`{value}`, its source in `{EVIDENCE}`.")
        number = row.get(value)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            problem("tables.value", at, f"table `{name}`: the row needs its number in `{value}:`.")
            continue
        evidence = " ".join(str(row.get(EVIDENCE) or "").split())
        if not evidence:
            problem("tables.evidence", at, f"table `{name}`: the row with {value} {number} needs `{EVIDENCE}:` — "
                    "where the number comes from.")
        match = {}
        for col in columns:
            if row.get(col) is None:
                continue
            choices = plain(row[col]) if isinstance(row[col], list) else [plain(row[col])]
            if not choices or any(isinstance(c, (bool, dict, list)) for c in choices):
                problem("tables.shape", line_of(row, col) or at, f"table `{name}`: `{col}` holds a word, a number "
                        "or a list of them.")
                continue
            match[col] = tuple(choices)
        if catch_all is not None:
            problem("tables.unreachable", at, f"table `{name}`: this row is never used, because the row at line "
                    f"{catch_all} matches every case; move it above that row.")
        if not match:
            catch_all = at
        built.append(Row(match, float(number), evidence, f"{display}:{at}", " ".join(str(row.get(ACCEPT) or "").split())))
    if problems:
        return None, problems
    bounds = item.get("range")
    if bounds is not None and not (isinstance(bounds, list) and len(bounds) == 2
                                   and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)):
        problem("tables.shape", line_of(item, "range"), f"table `{name}`: `range:` is [low, high], e.g. [0.1, 0.6].")
        return None, problems
    return Table(name, tuple(columns), value, unit, tuple(built), f"{display}:{line}",
                 (float(bounds[0]), float(bounds[1])) if bounds else None), problems


def why_problems(why: str, tables: dict[str, Table], read: set[str], where: str,
                 rule: str) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings): {table} must name a table; writing out a number the table holds goes stale."""
    errors, out = [], []
    for name in PLACEHOLDER.findall(why):
        if name not in tables:
            errors.append(Problem("rules.why", where, f"rule `{rule}`: the why: says {{{name}}}, but there is no "
                               f"table `{name}`{did_you_mean(name, tables)}", fixer="rules"))
    quoted = PLACEHOLDER.sub("", why)
    for name in sorted(read & set(tables)):
        values = set(tables[name].values())
        for text in NUMBER.findall(quoted):
            number = float(text.replace(",", ""))
            if number in values:
                rows = [r.where.rsplit(":", 1)[1] for r in tables[name].rows if r.value == number]
                out.append(Problem("rules.why_number", where, f"rule `{rule}`: the why: writes out {text}, a number "
                                   f"of table `{name}` (line {', '.join(rows)}); write {{{name}}} instead, so the "
                                   "text follows the table when the number changes, and keep each number's "
                                   f"source in its row's `{EVIDENCE}:`.", fixer="rules"))
    return errors, out


def expand_why(why: str, tables: dict[str, Table]) -> str:
    """{table_name} in a why: → the table in words."""
    return PLACEHOLDER.sub(lambda m: tables[m.group(1)].in_words() if m.group(1) in tables else m.group(0), why)
