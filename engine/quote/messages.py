"""The message catalogue: every non-rule text of a quote, and how numbers and units read, per language."""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from engine.calc.evaluate import BINARY_GB
from engine.intake.form import current_form
from engine.paths import LANGUAGES, TEMPLATES_DIR

SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
PERCENT_UNITS = {"fraction", "ratio"}     # stored as 0.4, shown as 40%
SCIENTIFIC_FROM = 1e10                     # FLOP counts and token totals read better as powers
HOURS_IN = {"s": 1 / 3600, "seconds": 1 / 3600, "minutes": 1 / 60, "h": 1, "hours": 1, "day": 24, "days": 24}
# GPU vendors count memory in binary gigabytes (an "80 GB" H100 holds 80 × 2³⁰ bytes); the rules
# count 10⁹ bytes. Quotes show GB as the GPU's name counts it, every memory figure alike
# (the rules' warning messages too: engine.calc.evaluate).
BILLION = 1e9


def template_dirs() -> list[Path]:
    """Folders searched for templates and messages, first match wins.

    SIZING_TEMPLATES (one or more folders, separated like PATH) lets a deployment
    override any template or message by file name; the package's own come last.
    """
    extra = [Path(p) for p in os.environ.get("SIZING_TEMPLATES", "").split(os.pathsep) if p]
    return [*extra, TEMPLATES_DIR]


def messages(lang: str) -> Messages:
    """The catalogue for a language (unknown languages read English)."""
    lang = lang if lang in LANGUAGES else "en"
    return Messages(lang, _table(lang, tuple(template_dirs())))


@functools.lru_cache(maxsize=16)
def _table(lang: str, dirs: tuple[Path, ...]) -> dict:
    # English underneath, so an override file or a new language can leave entries out.
    table: dict = {}
    for name in dict.fromkeys(("en", lang)):
        for folder in reversed(dirs):
            path = folder / "messages" / f"{name}.yaml"
            if path.is_file():
                _merge(table, YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {})
    return table


def _merge(base: dict, over: dict) -> None:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


class Messages:
    """Looks texts up by dotted path (`m("sections.capacity")`) and writes numbers with units."""

    def __init__(self, lang: str, table: dict):
        self.lang, self.table = lang, table

    def __call__(self, path: str, **fields: Any) -> str:
        node: Any = self.table
        for part in path.split("."):
            node = node[part]          # a missing entry is a bug in a catalogue: fail loudly
        return node.format(**fields) if fields else node

    def get(self, path: str, default: str | None = None) -> str | None:
        try:
            return self(path)
        except (KeyError, TypeError):
            return default

    def unit(self, unit: str, number: str = "") -> str:
        """A unit in this language; after the number "1", its singular where the language has one."""
        if number == "1" and unit in self.table.get("units_one", {}):
            return self.table["units_one"][unit]
        return self.table.get("units", {}).get(unit, unit)

    def number(self, value: Any) -> str:
        """A number as a reader expects it: 1,234 · 19.2 · 0.0123 · 1.8 × 10¹⁸."""
        if isinstance(value, bool):
            return self("values.yes") if value else self("values.no")
        if not isinstance(value, (int, float)):
            return self("values.missing") if value is None else str(value)
        if not math.isfinite(value):
            return self("values.missing")
        size = abs(value)
        if size >= SCIENTIFIC_FROM:
            mantissa, exponent = f"{value:.2e}".split("e")
            return self("values.power", mantissa=_trim(mantissa),
                        exponent=str(int(exponent)).translate(SUPERSCRIPT))
        if size >= 1000 or isinstance(value, int):
            return f"{value:,.0f}"
        if size >= 1:
            return _trim(f"{value:,.{1 if size >= 100 else 2}f}")
        return "0" if value == 0 else _trim(f"{value:.3g}")

    def value(self, value: Any, unit: str = "") -> str:
        """A figure with its unit, in this language: "19.2 days", "40%", "Yes"."""
        if not finite(value):
            return self.number(value)       # words, yes/no and "—" carry no unit
        if unit in PERCENT_UNITS:
            return f"{_trim(f'{value * 100:,.1f}')}%"
        text = self.number(value)
        if not unit:
            return text
        return f"{text} {self.unit(unit, text)}"     # "1 GPU", "2 GPUs": by the number as written

    def duration(self, value: Any, unit: str) -> tuple[Any, str]:
        """A time in the unit its size reads best in: seconds, minutes, hours, then days from 24 hours
        (the headline's rule): 0.0208 days → 30 minutes. Other units pass through."""
        if not finite(value) or unit not in HOURS_IN:
            return value, unit
        hours = value * HOURS_IN[unit]
        if abs(hours) >= 24:
            return hours / 24, "days"
        if abs(hours) >= 1:
            return hours, "hours"
        if abs(hours) * 60 >= 1 or hours == 0:
            return hours * 60, "minutes"
        return hours * 3600, "s"

    def shown(self, value: Any, unit: str, gpu_memory: bool = False) -> tuple[Any, str]:
        """A result as a reader gets it: times by magnitude, GPU memory (`gpu_memory`: the capacity
        rules' GB) in the GB the GPU's name counts, parameter counts (and token counts from a
        billion) in billions. Storage and data stay in GB of 10⁹ bytes, as disks are sold."""
        if not finite(value):
            return value, unit
        if unit == "GB":
            return (value / BINARY_GB if gpu_memory else value), unit
        if unit == "parameters":
            return value / BILLION, "billion parameters"
        if unit == "tokens" and abs(value) >= BILLION:      # as the intake asks for them: in billions
            return value / BILLION, "billion tokens"
        return self.duration(value, unit)

    def heading(self, label: str, unit: str) -> str:
        """A column heading with its unit, unless the label already says it: "Cost (USD)"."""
        unit = "" if unit in PERCENT_UNITS else self.unit(unit)
        return f"{label} ({unit})" if unit and unit not in label else label

    def input_label(self, key: str) -> str:
        """An intake field's name: this catalogue's, else the form's own label."""
        label = self.table.get("inputs", {}).get(key)
        return label or current_form().label(key, self.lang)

    def input_value(self, key: str, value: Any) -> str:
        """An intake value as the reader knows it: a choice by its name ("lora" → "LoRA"), else the number."""
        if key == "workload" and value in self.table.get("workloads", {}):
            return self.table["workloads"][value]
        if isinstance(value, str):
            form = current_form()       # the form's choice lists name every id they offer
            field = form.fields.get(key)
            if field is not None and field.type == "choice" and field.choices:
                return form.choice_label(field.choices, value, self.lang)
        return self.number(value)


def rounded(value: float) -> float:
    """A number rounded as every quote, sweep and mail writes it (Messages.number, without the words):
    3 significant digits from 10¹⁰ and below 1, whole from 1,000, one decimal from 100, else two."""
    size = abs(value)
    if size >= SCIENTIFIC_FROM or size < 1:
        return float(f"{value:.3g}") if value else 0.0
    if size >= 1000:
        return float(round(value))
    return round(value, 1 if size >= 100 else 2)


def finite(value: Any) -> bool:
    """A real number (not a bool, NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _trim(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text
