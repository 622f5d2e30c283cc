"""The Facility & cost section: racks and power, network, storage, failures and buying, as the quote words them."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.calc.results import plain
from engine.quote.facility_sheet import facility_sheet
from engine.quote.messages import finite
from engine.quote.view import Figure

if TYPE_CHECKING:
    from engine.quote.view import Quote

log = logging.getLogger(__name__)

# The figures of each part, in reading order; each is shown where its rule applied.
GROUPS = (
    ("power", ("server_name", "nodes", "server_power_kw", "servers_per_rack", "racks", "rack_load_kw",
               "it_power_kw", "pue", "facility_power_kw", "energy_mwh", "energy_price_per_kwh", "energy_cost",
               "energy_kwh_per_million_tokens")),
    ("network", ("nics", "fabric_tiers", "leaf_switches", "spine_switches", "core_switches", "network_switches",
                 "network_cables", "network_transceivers", "oversubscription")),
    ("storage", ("checkpoint_size_gb", "checkpoint_write_gb_s", "checkpoint_interval_minutes",
                 "dataset_size_gb")),
    ("failures", ("interruptions_per_day", "mtbf_hours", "expected_interruptions",
                  "work_lost_per_interruption_hours", "failure_goodput", "completion_days_p50",
                  "completion_days_p90")),
    ("money", ("cost_total", "cost_reserved_1y", "cost_reserved_3y", "cost_spot", "commitment_1y",
               "commitment_3y", "server_price", "purchase_cost", "depreciation_years", "rent_per_month",
               "ownership_per_month", "buy_breakeven_months")),
)
SITE_WARNINGS = ("rack_too_dense", "liquid_cooling")   # rules/facility.yaml's warnings, said here too
NO_FABRIC_KEYS = {"fabric_tiers", "leaf_switches", "spine_switches", "core_switches", "network_cables",
                  "network_transceivers", "oversubscription"}


@dataclass
class Part:
    key: str
    title: str
    figures: list[Figure]
    sentences: list[str] = field(default_factory=list)


@dataclass
class Facility:
    """The section's parts, the sources of its catalog figures, and what oversubscription costs."""

    parts: list[Part]
    sources: list[str]
    step_time: dict[str, float] = field(default_factory=dict)   # {"quoted", "non_blocking"} seconds

    def write_sheet(self, ws, quote: Quote) -> None:
        """The workbook's Facility & cost sheet (engine.quote.workbook calls it through the quote)."""
        facility_sheet(ws, quote)

    def to_json(self) -> dict:
        return {"parts": [{"key": p.key, "title": p.title, "sentences": p.sentences,
                           "figures": [{"key": f.key, "label": f.label, "value": plain(f.value), "text": f.text}
                                       for f in p.figures]} for p in self.parts],
                "sources": self.sources,
                "step_time_s": {k: plain(v) for k, v in self.step_time.items()}}


def build_facility(quote: Quote, ruleset) -> Facility:
    """The section for a quote already built; `ruleset` re-times a step on a non-blocking fabric."""
    m, values = quote.m, quote.results.values
    steps = {s.name: s for s in quote.results.trace}
    currency = str(values.get("cost_currency") or "USD")
    step_time = _step_times(quote, ruleset)

    def figure(key: str) -> Figure | None:
        value = values.get(key)
        if value is None or (isinstance(value, float) and not math.isfinite(value)) or value == "":
            return None
        step = steps.get(key)
        label = (step.label.get(m.lang) or step.label.get("en")) if step else key
        unit = (step.unit if step else "").replace("currency", currency)
        if not isinstance(value, str):
            value, unit = m.duration(value, unit)   # times by their size, as the quote writes every time
        text = value if isinstance(value, str) else m.value(value, unit)
        return Figure(key, label, value, unit, text)

    parts = []
    for key, keys in GROUPS:
        if key == "network" and not values.get("nics"):
            keys = tuple(k for k in keys if k not in NO_FABRIC_KEYS)
        figures = [f for f in (figure(k) for k in keys) if f is not None]
        if figures:
            parts.append(Part(key, m(f"facility.{key}"), figures, _sentences(m, key, values, quote, step_time)))
    return Facility(parts, _sources(m, ruleset, values.get("gpu") or quote.results.inputs.get("gpu")), step_time)


def _step_times(quote: Quote, ruleset) -> dict[str, float]:
    """The quoted step time and the step on a non-blocking fabric, when oversubscription slows it: the
    planner lays the job out again for that fabric, so the figure is what quoting it would say (on a
    faster fabric it may pick another micro-batch or recompute share)."""
    values = quote.results.values
    if not (finite(values.get("fabric_slowdown")) and values["fabric_slowdown"] > 1
            and finite(values.get("step_time_s")) and quote.intake is not None):
        return {}
    from engine.calc.evaluate import evaluate
    from engine.calc.planner import plan_layout
    try:
        inputs = {**quote.intake.values, **quote.results.inputs, "oversubscription": 1}
        layout = plan_layout(inputs, ruleset).chosen
        other = evaluate(inputs, ruleset, only=("step_time_s",), layout=layout).values.get("step_time_s")
    except Exception:  # noqa: BLE001 — the section stands without the comparison; the log says why
        log.exception("non-blocking step time for %s could not be computed", quote.customer)
        return {}
    return {"quoted": values["step_time_s"], "non_blocking": other} if finite(other) else {}


def _sentences(m, key: str, v: dict, quote: Quote, step_time: dict) -> list[str]:
    out = []
    if key == "power":
        out += [n.text(m.lang) for n in quote.results.warnings if n.code in SITE_WARNINGS]
    if key == "network" and step_time:
        slow, fast = step_time["quoted"], step_time["non_blocking"]
        hidden = slow <= fast * 1.005          # within half a percent: the traffic hides behind compute
        out.append(m("facility.oversubscribed_hidden" if hidden else "facility.oversubscribed",
                     ratio=m.number(v.get("oversubscription")), slow=m.value(slow, "s"),
                     fast=m.value(fast, "s"), more=m.value(slow / fast - 1, "fraction")))
    if key == "failures" and finite(v.get("completion_days_p90")):
        out.append(m("facility.finish", p50=m.value(*m.duration(v["completion_days_p50"], "days")),
                     p90=m.value(*m.duration(v["completion_days_p90"], "days")),
                     count=m.number(v.get("expected_interruptions"))))
        chance, deadline = v.get("deadline_probability"), quote.results.inputs.get("deadline_days")
        if finite(chance) and finite(deadline):
            # rounded down and at most 99%: a chance, never a promise
            out.append(m("facility.deadline", days=m.number(deadline),
                         chance=f"{min(math.floor(chance * 100), 99)}%"))
    if key == "money" and finite(v.get("buy_breakeven_months")) and finite(v.get("depreciation_years")):
        within = v["buy_breakeven_months"] <= v["depreciation_years"] * 12
        out.append(m("facility.buy_within" if within else "facility.buy_beyond",
                     months=m.value(v["buy_breakeven_months"], "months"),
                     years=m.value(v["depreciation_years"], "years")))
    return out


def _sources(m, ruleset, gpu: Any) -> list[str]:
    """Where the catalog's server power, purchase and rental prices come from, with their dates."""
    entry = ruleset.catalogs.gpus.get(gpu) if ruleset is not None and isinstance(gpu, str) else None
    out = []
    for part in ("server", "rental"):
        info = (entry or {}).get(part)
        if isinstance(info, dict) and info.get("source"):
            out.append(m(f"facility.source_{part}", source=info["source"], date=info.get("date") or "—"))
    return out
