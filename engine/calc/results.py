"""What an evaluation produces: values, a step-by-step trace, and warnings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Source(NamedTuple):
    """A value a formula looked up: a catalog field or a table row, and the file:line it sits on.

    A tuple, not a dataclass: one is recorded per look-up of a traced quote, so it must be cheap.
    """

    what: str                  # "gpus nvidia-h100-sxm5-80gb memory_gb", "table sustained_shares: precision fp8"
    value: Any                 # a number or text (hashable)
    where: str                 # "catalogs/gpus.yaml:150"
    note: str = ""             # a table row's evidence


@dataclass(frozen=True)
class Step:
    """One rule evaluated: the number and everything needed to defend it."""

    name: str
    group: str                 # rule file topic: model, compute, capacity, ...
    label: dict[str, str]      # {"en": ..., "zh-TW": ..., "zh-CN": ...}
    unit: str
    formula: str
    inputs: dict[str, Any]     # every name the formula read, with its value
    value: Any
    where: str                 # "rules/compute.yaml:14"
    why: str = ""
    sources: tuple[Source, ...] = ()   # the catalog fields and table rows the formula looked up


@dataclass(frozen=True)
class Notice:
    """A warning raised by a rule file's `warnings:` section."""

    code: str
    message: dict[str, str]    # already formatted, one text per language
    where: str
    severity: str = "warning"  # warning | info

    def text(self, lang: str) -> str:
        return self.message.get(lang) or self.message.get("en", self.code)


@dataclass
class Results:
    """Results of one scenario. `values` holds every rule that applied."""

    values: dict[str, Any]
    trace: list[Step]
    warnings: list[Notice]
    ruleset: str
    inputs: dict[str, Any] = field(default_factory=dict)   # resolved inputs used, as the intake gave them
    assumptions: dict[str, Any] = field(default_factory=dict)   # defaults used for fields it left blank
    plan: Any = None                 # the layout the planner chose (engine.calc.planner.Plan)
    alternatives: list = field(default_factory=list)       # engine.calc.alternatives.Option, requested first

    def step(self, name: str) -> Step | None:
        return next((s for s in self.trace if s.name == name), None)

    def to_json(self, lang: str = "en") -> dict:
        """The `--json` document: {"inputs", "assumptions", "results", "warnings", "trace", "ruleset"}."""
        return {
            "inputs": {k: plain(v) for k, v in self.inputs.items()},
            "assumptions": {k: plain(v) for k, v in self.assumptions.items()},
            "results": {k: plain(v) for k, v in self.values.items()},
            "warnings": [{"code": n.code, "message": n.text(lang), "where": n.where,
                          "severity": n.severity} for n in self.warnings],
            "trace": [{"rule": s.name, "group": s.group, "label": s.label.get(lang, s.name),
                       "formula": s.formula, "inputs": {k: plain(v) for k, v in s.inputs.items()},
                       "value": plain(s.value), "unit": s.unit, "where": s.where,
                       "sources": [{"what": c.what, "value": plain(c.value), "where": c.where}
                                   for c in s.sources]}
                      for s in self.trace],
            "ruleset": self.ruleset,
            **({"plan": self.plan.to_json()} if self.plan is not None else {}),
            **({"alternatives": [o.to_json() for o in self.alternatives]} if self.alternatives else {}),
        }


def plain(value: Any) -> Any:
    """A JSON-safe Python value: numpy scalars become floats/bools, NaN/inf become None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value
