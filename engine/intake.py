"""Reading an intake (YAML, JSON or a filled workbook) into values that remember where they came from."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.problems import Problem, SizingError

MAX_TEXT_INTAKE_BYTES = 1_000_000   # a YAML/JSON intake is a few hundred bytes; refuse floods


@dataclass
class Intake:
    """Canonical key → value, plus where each value came from.

    `sources[key]` is "Intake!C12" for a workbook cell or "case.yaml:4" for a
    text intake; `raw[key]` is what the person typed, for error messages.
    """

    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    origin: Path | None = None
    kind: str = "yaml"            # yaml | json | xlsx
    language: str = "en"
    book: Any = field(default=None, repr=False, compare=False)   # the open workbook, reused by the quote

    def where(self, key: str) -> str:
        return self.sources.get(key, key)


def read(path: Path) -> Intake:
    """Read any supported intake; raises SizingError with one clear problem if unreadable."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml", ".json"):
        return read_text_intake(path)
    if suffix in (".xlsx", ".xlsm", ".xls", ".xltx"):
        from engine.workbook_reader import read_workbook   # issue 3
        return read_workbook(path)
    raise SizingError([Problem("file.type", path.name,
                               f"{path.name} is not an intake: use a filled .xlsx template, "
                               "or a .yaml/.json intake.")])


def read_text_intake(path: Path) -> Intake:
    """A YAML or JSON mapping of canonical keys; every value keeps its line number."""
    from engine.yamlfile import load_yaml_text

    if path.stat().st_size > MAX_TEXT_INTAKE_BYTES:
        raise SizingError([Problem("file.too_big", path.name,
                                   f"{path.name} is larger than {MAX_TEXT_INTAKE_BYTES // 1000} KB; "
                                   "an intake is a short list of keys and values.")])
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SizingError([Problem("file.syntax", f"{path.name}:{e.lineno}",
                                       f"not valid JSON: {e.msg} (column {e.colno}).")]) from None
        lines = {}
    else:
        data, lines = load_yaml_text(text, path.name)
    if not isinstance(data, dict):
        raise SizingError([Problem("file.shape", path.name,
                                   f"{path.name} must be a mapping of keys to values "
                                   "(e.g. `customer: Example Co.`), not a "
                                   f"{type(data).__name__ if data is not None else 'empty file'}.")])
    values, sources = {}, {}
    for key, value in data.items():
        key = str(key).strip()
        values[key] = value
        sources[key] = f"{path.name}:{lines[key]}" if key in lines else f"{path.name}:{key}"
    language = str(values.get("language") or "en")
    return Intake(values=values, sources=sources, raw=dict(values), origin=path,
                  kind=path.suffix.lower().lstrip(".").replace("yml", "yaml"),
                  language=language)
