"""The catalogs: GPUs, models, precisions, optimizers and speedup tables, looked up by id or alias."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.calc.yamlfile import line_of, load_yaml_file, plain
from engine.paths import CATALOGS_DIR
from engine.problems import Problem, SizingError

# Catalog file → (top-level list key, fields every entry must have, numeric fields).
SHAPES = {
    "gpus.yaml": ("gpus", ("id", "name", "memory_gb", "memory_bandwidth_gb_s", "dense_tflops"),
                  ("memory_gb", "memory_bandwidth_gb_s", "tdp_w", "price_usd_per_gpu_hour",
                   "network_gb_s_per_gpu", "gpus_per_node")),
    "models.yaml": ("models", ("id", "name", "params_billion", "layers", "hidden_size",
                               "attention_heads"),
                    ("params_billion", "active_params_billion", "layers", "hidden_size",
                     "attention_heads", "kv_heads", "head_dim", "ffn_size", "vocab_size",
                     "context_length", "kv_cache_dim")),
    "precisions.yaml": ("precisions", ("id", "bytes"), ("bytes",)),
    "optimizers.yaml": ("optimizers", ("id", "state_bytes", "master_bytes"),
                        ("state_bytes", "master_bytes")),
}


@dataclass
class Catalogs:
    """Every catalog entry by id, plus alias tables (lower-case) for friendly names."""

    gpus: dict[str, dict] = field(default_factory=dict)
    models: dict[str, dict] = field(default_factory=dict)
    precisions: dict[str, dict] = field(default_factory=dict)
    optimizers: dict[str, dict] = field(default_factory=dict)
    speedup_tables: dict[str, dict] = field(default_factory=dict)
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)   # catalog → {alias: id}
    where: dict[tuple[str, str], str] = field(default_factory=dict)     # (catalog, id) → file:line

    def table(self, name: str) -> dict[str, dict]:
        return getattr(self, name)

    def resolve(self, catalog: str, text: Any) -> str | None:
        """Catalog id for an id or alias, case- and space-insensitive; None if unknown."""
        if text is None:
            return None
        return self.aliases.get(catalog, {}).get(_norm(str(text)))

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


def load_catalogs(directory: Path = CATALOGS_DIR) -> Catalogs:
    """Load and check every catalog file; SizingError lists every problem as file:line."""
    directory = Path(directory)
    catalogs, problems = Catalogs(), []
    for filename, (key, required, numeric) in SHAPES.items():
        path = directory / filename
        display = f"catalogs/{filename}"
        try:
            doc = load_yaml_file(path, display)
        except SizingError as e:
            problems.extend(e.problems)
            continue
        entries = doc.get(key) if isinstance(doc, dict) else None
        if not isinstance(entries, list) or not entries:
            problems.append(Problem("catalog.shape", f"{display}:1",
                                    f"expected a list under `{key}:` with at least one entry.",
                                    fixer="rules"))
            continue
        table, aliases = {}, {}
        for index, entry in enumerate(entries):
            line = line_of(entries, index)
            problems.extend(_check_entry(entry, display, line, required, numeric))
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                continue
            eid = entry["id"]
            if eid in table:
                problems.append(Problem("catalog.duplicate", f"{display}:{line}",
                                        f"`{eid}` is listed twice (first at line "
                                        f"{catalogs.where[(key, eid)].rsplit(':', 1)[1]}).", fixer="rules"))
                continue
            table[eid] = plain(entry)
            catalogs.where[(key, eid)] = f"{display}:{line}"
            for name in [eid, *(entry.get("aliases") or [])]:
                norm = _norm(str(name))
                if norm in aliases and aliases[norm] != eid:
                    problems.append(Problem("catalog.alias", f"{display}:{line}",
                                            f"alias `{name}` of `{eid}` is already used by "
                                            f"`{aliases[norm]}`; aliases must be unique.", fixer="rules"))
                aliases.setdefault(norm, eid)
        setattr(catalogs, key, table)
        catalogs.aliases[key] = aliases
    problems.extend(_load_speedups(directory, catalogs))
    problems.extend(_check_references(catalogs))
    if problems:
        raise SizingError(problems)
    return catalogs


def _check_entry(entry: Any, display: str, line: int, required, numeric) -> list[Problem]:
    if not isinstance(entry, dict):
        return [Problem("catalog.shape", f"{display}:{line}",
                        "each entry must be a mapping of fields (`- id: ...`).", fixer="rules")]
    out = []
    missing = [f for f in required if entry.get(f) is None]
    if missing:
        out.append(Problem("catalog.missing", f"{display}:{line}",
                           f"entry `{entry.get('id', '?')}` lacks {', '.join(missing)}.", fixer="rules"))
    for f in numeric:
        v = entry.get(f)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            out.append(Problem("catalog.type", f"{display}:{line_of(entry, f) or line}",
                               f"`{f}` of `{entry.get('id', '?')}` must be a non-negative number, "
                               f"not {v!r}.", fixer="rules"))
    peaks = entry.get("dense_tflops")
    if peaks is not None:
        if not isinstance(peaks, dict):
            out.append(Problem("catalog.type", f"{display}:{line_of(entry, 'dense_tflops') or line}",
                               "`dense_tflops` must map precisions to numbers.", fixer="rules"))
        else:
            for p, v in peaks.items():
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                    out.append(Problem("catalog.type", f"{display}:{line_of(peaks, p) or line}",
                                       f"dense_tflops.{p} of `{entry.get('id')}` must be a number or null, "
                                       f"not {v!r}.", fixer="rules"))
    return out


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
    out = []
    for name, table in tables.items():
        points = table.get("points") if isinstance(table, dict) else None
        line = line_of(tables, name)
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
