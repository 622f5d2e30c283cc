"""The catalogs: GPUs, models, precisions, optimizers and speedup tables, looked up by id or alias."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.calc.schema import SCHEMA_FILE, EntryCheck, FileSpec, Schema, load_schema
from engine.calc.yamlfile import line_of, load_yaml_file, plain
from engine.paths import CATALOGS_DIR
from engine.problems import Problem, SizingError

LISTS = ("gpus", "models", "precisions", "optimizers")     # the catalogs of entries, by their list key

# Words a name may carry that do not change what is sized: a vendor before a GPU or its memory
# type after ("NVIDIA H100 80GB HBM3", as nvidia-smi prints it); a publisher before a model or
# the release after ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-2-70b-chat-hf"), since a
# chat or instruct release has the base model's shape.
LOOSE_LEADING = {"gpus": {"nvidia", "amd", "intel", "habana", "tesla", "geforce", "instinct"},
                 "models": {"meta"}}
LOOSE_TRAILING = {"gpus": {"hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7"},
                  "models": {"instruct", "chat", "hf", "base", "it", "pt"}}
VERSION = re.compile(r"v\d+(\.\d+)*")

@dataclass
class Catalogs:
    """Every catalog entry by id, plus alias tables (lower-case) for friendly names."""

    gpus: dict[str, dict] = field(default_factory=dict)
    models: dict[str, dict] = field(default_factory=dict)
    precisions: dict[str, dict] = field(default_factory=dict)
    optimizers: dict[str, dict] = field(default_factory=dict)
    speedup_tables: dict[str, dict] = field(default_factory=dict)
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)   # catalog → {alias: id}
    loose: dict[str, dict[str, str | None]] = field(default_factory=dict)  # catalog → {loose name: id, None if two share it}
    where: dict[tuple[str, str], str] = field(default_factory=dict)     # (catalog, id) → file:line
    nodes: dict[tuple[str, str], dict] = field(default_factory=dict)    # (catalog, id) → entry with its lines
    schema: Schema = field(default_factory=Schema)
    lint: list[Problem] = field(default_factory=list)                   # warnings: plausible, but check

    def table(self, name: str) -> dict[str, dict]:
        return getattr(self, name)

    def field_where(self, catalog: str, key: str, path: str) -> str:
        """file:line of one field of an entry (`scale_up.gb_s`), or of the entry when the field is absent."""
        where = self.where.get((catalog, key), "")
        node = self.nodes.get((catalog, key))
        line = 0
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                break
            line, node = line_of(node, part), node[part]
        return f"{where.rsplit(':', 1)[0]}:{line}" if where and line else where

    def name_of(self, key: Any, lang: str = "en") -> str | None:
        """The name quotes show for a catalog id — a precision's `label`, a GPU's or a model's
        `name` — or None when `key` is no catalog id."""
        if not isinstance(key, str):
            return None
        if key in self.precisions:
            label = self.precisions[key].get("label")
            if isinstance(label, dict):
                return str(label.get(lang) or label.get("en") or key)
            return str(label or key)
        for entries in (self.gpus, self.models):
            if key in entries and entries[key].get("name"):
                return str(entries[key]["name"])
        return None

    def resolve(self, catalog: str, text: Any) -> str | None:
        """Catalog id for an id or alias, case- and space-insensitive, else for the same name with
        the words of LOOSE_LEADING / LOOSE_TRAILING around it; None if unknown or ambiguous."""
        if text is None:
            return None
        found = self.aliases.get(catalog, {}).get(_norm(str(text)))
        return found or self.loose.get(catalog, {}).get(_loose(catalog, str(text)))

    def resolve_gpu(self, text: Any) -> str | None:
        return self.resolve("gpus", text)

    def resolve_model(self, text: Any) -> str | None:
        return self.resolve("models", text)

    def resolve_precision(self, text: Any) -> str | None:
        return self.resolve("precisions", text)

    def closest(self, catalog: str, text: Any, n: int = 3) -> list[tuple[str, str]]:
        """The n entries whose id or alias is nearest to `text`: [(id, display name)]."""
        names = self.aliases.get(catalog, {})
        hits = difflib.get_close_matches(_norm(str(text)), list(names), n=n * 3, cutoff=0.3)
        ids = list(dict.fromkeys(names[h] for h in hits))[:n]
        table = self.table(catalog)
        return [(i, table[i].get("name", i)) for i in ids]

    def closest_gpus(self, text: Any, n: int = 3) -> list[tuple[str, str]]:
        return self.closest("gpus", text, n)

    def closest_models(self, text: Any, n: int = 3) -> list[tuple[str, str]]:
        return self.closest("models", text, n)

    def gpu_choices(self) -> list[tuple[str, str]]:
        return [(i, g["name"]) for i, g in self.gpus.items()]

    def model_choices(self) -> list[tuple[str, str]]:
        return [(i, m["name"]) for i, m in self.models.items()]


def _norm(text: str) -> str:
    return " ".join(text.replace("_", " ").split()).casefold()


def _loose(catalog: str, text: str) -> str:
    """The name without a publisher, vendor or release word: "Meta-Llama-3.1-8B-Instruct" → "llama 3.1 8b"."""
    words = re.split(r"[\s_\-]+", text.casefold().rsplit("/", 1)[-1].strip())
    leading, trailing = LOOSE_LEADING.get(catalog, set()), LOOSE_TRAILING.get(catalog, set())
    while len(words) > 1 and words[0] in leading:
        words.pop(0)
    while len(words) > 1 and (words[-1] in trailing
                              or (len(words) > 2 and words[-2] in trailing and VERSION.fullmatch(words[-1]))):
        words.pop()          # "…-Instruct-v0.2": a release's version goes with its release word
    return " ".join(w for w in words if w)


def load_catalogs(directory: Path = CATALOGS_DIR) -> Catalogs:
    """Load every catalog and check it against catalogs/schema.yaml; SizingError lists every problem as file:line."""
    directory = Path(directory)
    catalogs, problems = Catalogs(), []
    catalogs.schema = load_schema(directory)     # without it nothing can be checked: its problems stop here
    for key in LISTS:
        spec = catalogs.schema.catalog(key)
        if spec is None:
            problems.append(Problem("schema.missing", f"catalogs/{SCHEMA_FILE}:1",
                                    f"`catalogs:` must declare the fields of {key}.yaml.", fixer="rules"))
            continue
        problems.extend(_load_list(directory, spec, catalogs))
    problems.extend(_load_speedups(directory, catalogs))
    problems.extend(_check_references(catalogs))
    if problems:
        raise SizingError(problems)
    return catalogs


def _load_list(directory: Path, spec: FileSpec, catalogs: Catalogs) -> list[Problem]:
    """One catalog of entries (`gpus:` with `- id: ...`), each checked against its declared fields."""
    display, key = f"catalogs/{spec.filename}", spec.key
    try:
        doc = load_yaml_file(directory / spec.filename, display)
    except SizingError as e:
        return e.problems
    entries = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        return [Problem("catalog.shape", f"{display}:1", f"expected a list under `{key}:` with at least one entry.",
                        fixer="rules")]
    check, problems = EntryCheck(spec, display), []
    for other in doc:
        if other != key and other not in spec.other_keys:
            problems.append(Problem("catalog.unknown_key", f"{display}:{line_of(doc, other)}",
                                    f"unknown top-level key `{other}`; the entries go under `{key}:`.", fixer="rules"))
    table, aliases, loose = {}, {}, {}
    for index, entry in enumerate(entries):
        line = line_of(entries, index)
        if not isinstance(entry, dict):
            problems.append(Problem("catalog.shape", f"{display}:{line}",
                                    "each entry must be a mapping of fields (`- id: ...`).", fixer="rules"))
            continue
        check.entry(entry, line, str(entry.get("id", "?")))
        if not isinstance(entry.get("id"), str):
            continue
        eid = entry["id"]
        if eid in table:
            problems.append(Problem("catalog.duplicate", f"{display}:{line}",
                                    f"`{eid}` is listed twice (first at line "
                                    f"{catalogs.where[(key, eid)].rsplit(':', 1)[1]}).", fixer="rules"))
            continue
        table[eid] = plain(entry)
        catalogs.where[(key, eid)] = f"{display}:{line}"
        catalogs.nodes[(key, eid)] = entry
        for name in [eid, *(entry.get("aliases") or [])]:
            norm = _norm(str(name))
            if norm in aliases and aliases[norm] != eid:
                problems.append(Problem("catalog.alias", f"{display}:{line}",
                                        f"alias `{name}` of `{eid}` is already used by "
                                        f"`{aliases[norm]}`; aliases must be unique.", fixer="rules"))
            aliases.setdefault(norm, eid)
        for name in [eid, entry.get("name"), *(entry.get("aliases") or [])]:
            if isinstance(name, str):
                word = _loose(key, name)
                loose[word] = eid if loose.get(word, eid) == eid else None
    setattr(catalogs, key, table)
    catalogs.aliases[key] = aliases
    catalogs.loose[key] = loose
    catalogs.lint.extend(check.warnings)
    return check.errors + problems


def _load_speedups(directory: Path, catalogs: Catalogs) -> list[Problem]:
    display = "catalogs/scaling.yaml"
    try:
        doc = load_yaml_file(directory / "scaling.yaml", display)
    except SizingError as e:
        return e.problems
    tables = doc.get("speedup_tables") if isinstance(doc, dict) else None
    if not isinstance(tables, dict):
        return [Problem("catalog.shape", f"{display}:1", "expected `speedup_tables:` mapping names to "
                        "tables with `points: {GPUs: speedup}`.", fixer="rules")]
    spec = catalogs.schema.files.get("scaling.yaml")
    check = EntryCheck(spec, display) if spec else None
    out = []
    for name, table in tables.items():
        points = table.get("points") if isinstance(table, dict) else None
        line = line_of(tables, name)
        if check is not None and isinstance(table, dict):
            check.entry(table, line, str(name))
        ok = (isinstance(points, dict) and points and all(
            isinstance(k, int) and k >= 1 and isinstance(v, (int, float)) and 0 < v <= k
            for k, v in points.items()))
        if not ok:
            out.append(Problem("catalog.type", f"{display}:{line}",
                               f"table `{name}` needs `points:` mapping whole GPU counts to speedups "
                               "between 0 and the GPU count, e.g. {1: 1.0, 2: 1.6}.", fixer="rules"))
            continue
        catalogs.speedup_tables[str(name)] = {"points": {int(k): float(v) for k, v in sorted(points.items())},
                                              "label": plain(table.get("label") or {})}
        catalogs.where[("speedup_tables", str(name))] = f"{display}:{line}"
    if check is not None:
        catalogs.lint.extend(check.warnings)
        out = check.errors + out
    return out


def _check_references(catalogs: Catalogs) -> list[Problem]:
    """Names one catalog uses from another (precision fallbacks) must exist."""
    out = []
    for pid, p in catalogs.precisions.items():
        fb = p.get("fallback")
        if fb is not None and fb not in catalogs.precisions:
            out.append(Problem("catalog.reference", catalogs.where[("precisions", pid)],
                               f"fallback `{fb}` of `{pid}` is not a precision in this file.",
                               fixer="rules"))
    return out
