"""The catalog schema (catalogs/schema.yaml): every field declared once, the one list of units, and the checks."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.calc.yamlfile import line_of, load_yaml_file
from engine.paths import CATALOGS_DIR, LANGUAGES
from engine.problems import Problem, SizingError

SCHEMA_FILE = "schema.yaml"
TYPES = ("text", "number", "integer", "yes/no", "text list", "labels", "mapping")
FIELD_KEYS = {"type", "unit", "range", "required", "choices", "help"}
NUMERIC = ("number", "integer")


@dataclass(frozen=True)
class FieldSpec:
    """One declared catalog field: `path` is dotted for a field inside a mapping (scale_up.gb_s)."""

    path: str
    type: str
    unit: str = ""
    low: float | None = None
    high: float | None = None
    required: bool = False
    choices: tuple[str, ...] = ()
    help: str = ""

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@dataclass
class FileSpec:
    """A catalog file: its list key (or mapping of tables), its fields and other top-level keys."""

    filename: str
    key: str
    fields: dict[str, FieldSpec]
    other_keys: tuple[str, ...] = ()
    tables: bool = False            # scaling.yaml: a mapping of named tables, not a list of entries

    def children(self, parent: str) -> dict[str, FieldSpec]:
        """The fields declared directly inside `parent` ("" for the top level of an entry)."""
        prefix = f"{parent}." if parent else ""
        return {f.path[len(prefix):]: f for f in self.fields.values()
                if f.path.startswith(prefix) and "." not in f.path[len(prefix):]}


@dataclass
class Schema:
    units: dict[str, str] = field(default_factory=dict)            # unit → what it means
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)  # unit → plausible rule/table values
    files: dict[str, FileSpec] = field(default_factory=dict)       # "gpus.yaml" → its spec

    def catalog(self, list_key: str) -> FileSpec | None:
        return next((f for f in self.files.values() if f.key == list_key), None)


def load_schema(directory: Path) -> Schema:
    """catalogs/schema.yaml of `directory`, or the shipped one when that folder has none (an older copy)."""
    path = Path(directory) / SCHEMA_FILE
    if not path.exists():
        path = CATALOGS_DIR / SCHEMA_FILE
    display = f"catalogs/{SCHEMA_FILE}"
    doc = load_yaml_file(path, display)
    problems: list[Problem] = []
    schema = Schema()
    units = doc.get("units") if isinstance(doc, dict) else None
    if not isinstance(units, dict) or not units:
        problems.append(Problem("schema.shape", f"{display}:1", "expected `units:` mapping each unit to what "
                                "it means, and `catalogs:` declaring each file's fields.", fixer="rules"))
        raise SizingError(problems)
    schema.units = {str(u): str(text or "") for u, text in units.items()}
    ranges = doc.get("ranges") or {}
    for unit, bounds in ranges.items() if isinstance(ranges, dict) else ():
        where = f"{display}:{line_of(ranges, unit)}"
        if str(unit) not in schema.units:
            problems.append(Problem("schema.unit", where, unknown_unit(str(unit), schema.units), fixer="rules"))
        elif not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_number(b) for b in bounds)
                  and bounds[0] <= bounds[1]):
            problems.append(Problem("schema.range", where, f"range of `{unit}` must be [low, high], e.g. [0, 1].",
                                    fixer="rules"))
        else:
            schema.ranges[str(unit)] = (float(bounds[0]), float(bounds[1]))
    files = doc.get("catalogs")
    if not isinstance(files, dict):
        problems.append(Problem("schema.shape", f"{display}:{line_of(doc)}", "expected `catalogs:` mapping "
                                "file names (gpus.yaml, ...) to their `fields:`.", fixer="rules"))
        raise SizingError(problems)
    for filename, spec in files.items():
        where = f"{display}:{line_of(files, filename)}"
        fields = spec.get("fields") if isinstance(spec, dict) else None
        key = spec.get("list") or spec.get("tables") if isinstance(spec, dict) else None
        if not isinstance(fields, dict) or not isinstance(key, str):
            problems.append(Problem("schema.shape", where, f"`{filename}` needs `list:` (or `tables:`) naming its "
                                    "top-level key, and `fields:`.", fixer="rules"))
            continue
        declared = {}
        for path, text in fields.items():
            field_spec = _field(str(path), text, f"{display}:{line_of(fields, path)}", schema.units, problems)
            if field_spec is not None:
                declared[field_spec.path] = field_spec
        schema.files[str(filename)] = FileSpec(str(filename), key, declared,
                                               tuple(str(k) for k in spec.get("other_keys") or ()),
                                               tables="tables" in spec)
    if problems:
        raise SizingError(problems)
    return schema


def _field(path: str, spec: Any, where: str, units: dict[str, str], problems: list[Problem]) -> FieldSpec | None:
    if not isinstance(spec, dict):
        problems.append(Problem("schema.shape", where, f"field `{path}` needs `type:` (and optionally unit, "
                                "range, required, choices, help).", fixer="rules"))
        return None
    for key in spec:
        if key not in FIELD_KEYS:
            problems.append(Problem("schema.shape", where, f"`{key}` is not a field setting{did_you_mean(key, FIELD_KEYS)}",
                                    fixer="rules"))
    kind = spec.get("type")
    if kind not in TYPES:
        problems.append(Problem("schema.type", where, f"type `{kind}` of `{path}` must be one of "
                                f"{', '.join(TYPES)}.", fixer="rules"))
        return None
    unit = str(spec.get("unit") or "")
    if unit and unit not in units:
        problems.append(Problem("schema.unit", where, unknown_unit(unit, units), fixer="rules"))
    low = high = None
    if spec.get("range") is not None:
        bounds = spec["range"]
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_number(b) for b in bounds)
                and bounds[0] <= bounds[1]):
            problems.append(Problem("schema.range", where, f"range of `{path}` must be [low, high], e.g. [1, 100].",
                                    fixer="rules"))
        else:
            low, high = float(bounds[0]), float(bounds[1])
    choices = tuple(str(c) for c in spec.get("choices") or ())
    return FieldSpec(path, kind, unit, low, high, spec.get("required") is True, choices,
                     " ".join(str(spec.get("help") or "").split()))


def unknown_unit(unit: str, units: dict[str, str]) -> str:
    """The sentence for a unit that is not in the list, with the nearest one."""
    return (f"unknown unit `{unit}`{did_you_mean(unit, units)} Units are listed in "
            f"catalogs/{SCHEMA_FILE} (`units:`); add a new one there.")


def did_you_mean(word: str, known, cutoff: float = 0.6) -> str:
    """". Did you mean `x`?" for the nearest known word, or "." when none is near."""
    near = difflib.get_close_matches(str(word), sorted(map(str, known)), n=1, cutoff=cutoff)
    return f". Did you mean `{near[0]}`?" if near else "."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class EntryCheck:
    """Checks catalog entries against a file's spec; errors stop the load, warnings are advice."""

    def __init__(self, spec: FileSpec, display: str):
        self.spec, self.display = spec, display
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []
        self.accepted: dict[str, str] = {}

    def entry(self, entry: dict, line: int, name: str) -> None:
        """One entry (a mapping): unknown fields, missing required ones, types, choices and ranges."""
        self.accepted = accepted(entry)
        for path in self.accepted:
            if path not in self.spec.fields:
                self._error("catalog.accept", f"{self.display}:{line_of(entry, ACCEPT) or line}",
                            f"`{ACCEPT}:` of `{name}` names `{path}`, which is not a field"
                            f"{did_you_mean(path, self.spec.fields)}")
        self._mapping(entry, "", line, name)

    def _mapping(self, node: dict, parent: str, line: int, name: str) -> None:
        declared = self.spec.children(parent)
        if parent and not declared:
            return                          # an open mapping (speedup points): its keys are data
        for key, value in node.items():
            path = f"{parent}.{key}" if parent else str(key)
            where = f"{self.display}:{line_of(node, key) or line}"
            spec = declared.get(str(key))
            if spec is None:
                if not parent and (str(key) in self.spec.other_keys or str(key) == ACCEPT):
                    continue
                self._error("catalog.unknown_field", where, f"`{path}` of `{name}` is not a field of "
                            f"{self.display}{did_you_mean(key, declared)} Fields are declared in "
                            f"catalogs/{SCHEMA_FILE}.")
                continue
            self._value(spec, value, where, name, node, key)
        missing = [spec.path for key, spec in declared.items()
                   if spec.required and (node.get(key) is None or node.get(key) == "")]
        if missing:
            said = [f"`{m}` ({self.spec.fields[m].help.rstrip('.')})" if self.spec.fields[m].help else f"`{m}`"
                    for m in missing]
            self._error("catalog.missing", f"{self.display}:{line}", f"entry `{name}` lacks {', '.join(said)}.")

    def _value(self, spec: FieldSpec, value: Any, where: str, name: str, node: dict, key: Any) -> None:
        if value is None:
            return                          # blank: allowed unless required (reported as missing)
        kind = spec.type
        if kind in NUMERIC:
            whole = kind == "integer"
            ok = _is_number(value) and value >= 0 and (not whole or float(value).is_integer())
            if not ok:
                want = "a whole number" if whole else "a number"
                self._error("catalog.type", where, f"`{spec.path}` of `{name}` must be {want} "
                            f"(not negative){self._unit(spec)}, not {value!r}.")
                return
            self._range(spec, float(value), where, name)
        elif kind == "text":
            if isinstance(value, (dict, list)):
                self._error("catalog.type", where, f"`{spec.path}` of `{name}` must be text, not a "
                            f"{'list' if isinstance(value, list) else 'mapping'}.")
            elif spec.choices and str(value) not in spec.choices:
                self._error("catalog.choice", where, f"`{spec.path}` of `{name}` is `{value}`, which is not one of "
                            f"{', '.join(spec.choices)}{did_you_mean(value, spec.choices)} A new one is added to "
                            f"`choices:` of `{spec.path}` in catalogs/{SCHEMA_FILE}.")
        elif kind == "yes/no":
            if not isinstance(value, bool):
                self._error("catalog.type", where, f"`{spec.path}` of `{name}` must be true or false, not {value!r}.")
        elif kind == "text list":
            if not isinstance(value, list) or any(isinstance(v, (dict, list)) for v in value):
                self._error("catalog.type", where, f"`{spec.path}` of `{name}` must be a list of names, "
                            "e.g. [H100, H100-SXM].")
        elif kind == "labels":
            if isinstance(value, dict):
                for lang in value:
                    if lang not in LANGUAGES:
                        self._error("catalog.type", where, f"`{spec.path}` of `{name}`: `{lang}` is not a language "
                                    f"({', '.join(LANGUAGES)}).")
            elif isinstance(value, list):
                self._error("catalog.type", where, f"`{spec.path}` of `{name}` must be text or "
                            "{en: ..., zh-TW: ..., zh-CN: ...}.")
        elif kind == "mapping":
            if not isinstance(value, dict):
                inside = ", ".join(self.spec.children(spec.path)) or "..."
                self._error("catalog.type", where, f"`{spec.path}` of `{name}` must be a mapping "
                            f"{{{inside}}}, not {value!r}.")
                return
            self._mapping(value, spec.path, line_of(node, key), name)

    def _range(self, spec: FieldSpec, value: float, where: str, name: str) -> None:
        if spec.low is None or spec.low <= value <= spec.high:
            return
        unit = f" {spec.unit}" if spec.unit else ""
        if value == 0 and spec.low > 0:
            # a blank-looking zero: a price of 0 quotes "Total cost 0 USD", a rate of 0 divides by zero
            self._error("catalog.zero", where, f"`{spec.path}` of `{name}` is 0; it must be more than 0"
                        f"{unit} (plausible: {_number(spec.low)}–{_number(spec.high)}{unit}). Leave it blank "
                        "(null) if the figure is not published.")
            return
        hint = ""
        if spec.unit.startswith("G") and spec.low <= value * 1000 <= spec.high:
            hint = f" If it is in T{spec.unit[1:]}, write {_number(value * 1000)} (1 T{spec.unit[1:]} = 1,000{unit})."
        self.warnings.append(Problem(
            "catalog.range", where,
            f"`{spec.path}` of `{name}` is {_number(value)}{unit}, outside the plausible range "
            f"{_number(spec.low)}–{_number(spec.high)}{unit}; check the figure.{hint} If it is right, widen "
            f"`range:` of `{spec.path}` in catalogs/{SCHEMA_FILE}, or say why beside it: "
            f"`accept: {{{spec.path}: \"…why…\"}}`.", fixer="rules",
            context=accepted_context(self.accepted.get(spec.path))))

    def _unit(self, spec: FieldSpec) -> str:
        return f" in {spec.unit}" if spec.unit else ""

    def _error(self, code: str, where: str, message: str) -> None:
        self.errors.append(Problem(code, where, message, fixer="rules"))


ACCEPT = "accept"


def accepted(entry: dict) -> dict[str, str]:
    """An entry's `accept: {field: "why the unusual value is right"}`, by field path."""
    found = entry.get(ACCEPT)
    if not isinstance(found, dict):
        return {}
    return {str(path): " ".join(str(reason or "").split()) for path, reason in found.items()
            if len(str(reason or "").strip()) >= 8}


def accepted_context(reason: str | None) -> dict:
    """A warning's context marking it acknowledged (the gate lets it through, `rules check` says why)."""
    return {"accepted": reason} if reason else {}


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.6g}"
