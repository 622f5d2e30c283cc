"""A YAML or JSON intake: a mapping of canonical keys, each value keeping its line number."""

from __future__ import annotations

import json
from pathlib import Path

from engine.calc.yamlfile import load_yaml_text
from engine.intake.model import Intake
from engine.problems import Problem, SizingError

MAX_TEXT_INTAKE_BYTES = 1_000_000   # a YAML/JSON intake is a few hundred bytes; refuse floods


def read_text_intake(path: Path) -> Intake:
    """A YAML or JSON mapping of canonical keys; every value keeps its line number."""
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
