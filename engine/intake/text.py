"""A YAML or JSON intake: a mapping of canonical keys, each value keeping its line number."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from engine.calc.yamlfile import MAX_YAML_DEPTH, load_yaml_text
from engine.intake.model import Intake
from engine.problems import Problem, SizingError

MAX_TEXT_INTAKE_BYTES = 1_000_000   # a YAML/JSON intake is a few hundred bytes; refuse floods
MAX_KEYS = 200                      # the form's ~50 fields and any rule overrides; validation is quadratic past that
MAX_VALUES = 2_000                  # keys and values together: reading time stays in milliseconds
MAX_NUMBER_DIGITS = 100             # 1e100 needs no more; Python refuses ints past 4,300 digits anyway
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")   # Windows Notepad's "Unicode"


def read_text_intake(path: Path) -> Intake:
    """A YAML or JSON mapping of canonical keys; every value keeps its line number.

    Whatever the file holds, the answer is a SizingError with one sentence, never a traceback.
    """
    if path.stat().st_size > MAX_TEXT_INTAKE_BYTES:
        raise _refuse("file.too_big", path.name, f"{path.name} is larger than {MAX_TEXT_INTAKE_BYTES // 1000} KB; "
                      "an intake is a short list of keys and values.")
    data = path.read_bytes()
    text = data.decode("utf-16", errors="replace") if data[:2] in UTF16_BOMS else \
        data.decode("utf-8-sig", errors="replace")
    if path.suffix.lower() == ".json":
        data, lines = _load_json(text, path.name), {}
    else:
        try:
            data, lines = load_yaml_text(text, path.name, MAX_VALUES)
        except SizingError as e:      # the YAML reader speaks to rule authors; here the sender can fix it
            raise SizingError([dataclasses.replace(p, fixer="sales") for p in e.problems]) from None
    if not isinstance(data, dict):
        raise _refuse("file.shape", path.name, f"{path.name} must be a mapping of keys to values "
                      "(e.g. `customer: Example Co.`), not a "
                      f"{type(data).__name__ if data is not None else 'empty file'}.")
    if len(data) > MAX_KEYS:
        raise _refuse("file.shape", path.name, f"{path.name} has {len(data):,} keys; an intake has at most "
                      f"{MAX_KEYS} (the form's fields and any rule overrides).")
    values, sources = {}, {}
    for key, value in data.items():
        key = str(key).strip()
        values[key] = value
        sources[key] = f"{path.name}:{lines[key]}" if key in lines else f"{path.name}:{key}"
    language = str(values.get("language") or "en")
    return Intake(values=values, sources=sources, raw=dict(values), origin=path,
                  kind=path.suffix.lower().lstrip(".").replace("yml", "yaml"),
                  language=language)


def _refuse(code: str, where: str, message: str) -> SizingError:
    return SizingError([Problem(code, where, message)])


class _LongNumber(ValueError):
    def __init__(self, digits: str):
        super().__init__(digits)
        self.digits = digits


def _whole_number(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _LongNumber(digits)
    return int(digits)


def _load_json(text: str, name: str) -> Any:
    """Plain data from JSON text, refusing what would exhaust the stack or the int parser."""
    try:
        data = json.loads(text, parse_int=_whole_number)
    except json.JSONDecodeError as e:
        raise _refuse("file.syntax", f"{name}:{e.lineno}", f"not valid JSON: {e.msg} (column {e.colno}).") from None
    except _LongNumber as e:
        line = text[:text.find(e.digits)].count("\n") + 1
        raise _refuse("file.syntax", f"{name}:{line}", f"a number of {len(e.digits):,} digits is longer than "
                      "any value needs; write it in scientific notation (e.g. 1e12).") from None
    except RecursionError:
        raise _too_deep(name) from None
    _check_shape(data, name)
    return data


def _too_deep(name: str) -> SizingError:
    return _refuse("file.shape", name, f"{name} is nested more than {MAX_YAML_DEPTH} levels deep; an intake "
                   "is a flat list of keys and values (e.g. `\"customer\": \"Example Co.\"`).")


def _check_shape(data: Any, name: str) -> None:
    """The limits YAML intakes meet while parsing, for parsed JSON: depth and number of values."""
    stack, count = [(data, 1)], 0
    while stack:                         # walked without recursion
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise _refuse("file.too_big", name, f"{name} holds more than {MAX_VALUES:,} values; an intake "
                          "is a short list of keys and values.")
        if isinstance(value, (dict, list)):
            if depth > MAX_YAML_DEPTH:
                raise _too_deep(name)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
