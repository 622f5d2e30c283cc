"""Physics guards: each figure a customer reads is present, finite, positive and possible, or withheld with a reason."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from engine.calc.results import Notice, Results
from engine.contract import TRAINING_WORKLOADS
from engine.paths import LANGUAGES
from engine.quote.messages import finite, messages

log = logging.getLogger(__name__)

# The figures a quote leads with, per workload: each must be there and make physical sense.
COMMON = ("memory_per_gpu_gb", "gpu_memory_gb", "peak_tflops_per_gpu", "cost_total")
TRAINING = ("training_time_hours", "training_time_days", "gpu_hours", "effective_tflops_total",
            "tokens_per_s_per_gpu", "training_flops", "utilization_used", "goodput_used")
SERVING = ("output_tokens_per_s", "ttft_ms", "tpot_ms", "cost_per_million_tokens")
# Figures that describe the configuration running: given for one that cannot hold the model, they
# would read as if it ran (DESIGN.md: `feasible`).
RUNNING = ("training_time_hours", "training_time_days", "training_time_hours_at_default", "gpu_hours", "job_hours",
           "inference_time_hours", "tokens_per_s_per_gpu", "effective_tflops_total", "output_tokens_per_s",
           "ttft_ms", "tpot_ms", "max_concurrency", "cost_total", "cost_per_million_tokens", "energy_mwh",
           "energy_cost", "completion_days_p50", "completion_days_p90", "cost_reserved_1y", "cost_reserved_3y",
           "cost_spot", "meets_latency_targets", "meets_deadline", "meets_throughput", "goodput_used",
           "steady_gpu_hours", "expected_interruptions", "utilization_used", "scaling_efficiency")
# What a figure's value passes on to: withheld, these go with it.
DEPENDS = {
    "training_time_hours": ("training_time_days", "gpu_hours", "job_hours", "cost_total", "cost_per_million_tokens",
                            "meets_deadline"),
    "training_time_days": ("training_time_hours",),
    "output_tokens_per_s": ("cost_per_million_tokens", "meets_throughput", "inference_time_hours"),
    "ttft_ms": ("meets_latency_targets",),
    "tpot_ms": ("meets_latency_targets",),
    "peak_tflops_per_gpu": ("effective_tflops_total",),
}
SLACK = 1.001                       # rounding in the rules, not physics


@dataclass(frozen=True)
class Withheld:
    """A figure the quote does not give, and why (a code of templates/messages `guards.*`)."""

    key: str
    reason: str
    detail: dict = field(default_factory=dict)


def guard(results: Results, workload: str) -> list[Withheld]:
    """Check every figure a customer reads; withhold (drop from `results.values`, with its band) the
    ones that fail, say why in `results.warnings` in every language, and log each."""
    values = results.values
    known = {**results.assumptions, **results.inputs, **values}     # the GPU count is an input
    found: dict[str, Withheld] = {}

    def withhold(key: str, reason: str, **detail: Any) -> None:
        if key not in found:
            found[key] = Withheld(key, reason, detail)

    training = workload in TRAINING_WORKLOADS
    required = COMMON + (TRAINING if training else SERVING)
    for key in required:
        value = values.get(key)
        if isinstance(value, bool):
            continue
        if value is None or (isinstance(value, float) and math.isnan(value)):
            if _applies(results, key):
                withhold(key, "missing")
        elif not finite(value):
            withhold(key, "not_finite")
        elif value <= 0:
            withhold(key, "not_positive")
    for key, reason, detail in _physics(known, training):
        withhold(key, reason, **detail)
    if values.get("fits_in_memory") is False or values.get("holds_a_request") is False:
        for key in RUNNING:
            if key in values:
                withhold(key, "does_not_fit")
    for key in list(found):                 # what a withheld figure passes on to goes with it
        for dependent in DEPENDS.get(key, ()):
            if dependent in values:
                withhold(dependent, found[key].reason, **found[key].detail)
    for item in found.values():
        for key in (item.key, f"{item.key}_low", f"{item.key}_high"):
            values.pop(key, None)
        # a configuration that cannot run is the quote working; a broken figure is worth a look
        (log.info if item.reason == "does_not_fit" else log.warning)("withheld %s: %s %s", item.key, item.reason,
                                                                        item.detail)
    if found:
        results.warnings.append(_notice(results, list(found.values())))
    _strip_options(results)
    return list(found.values())


def _physics(values: dict, training: bool):
    """(key, reason, detail) for each figure past what the hardware can do."""
    peak, gpus = values.get("peak_tflops_per_gpu"), values.get("gpu_count")
    memory, weights = values.get("memory_per_gpu_gb"), values.get("weights_gb")
    if finite(memory) and finite(weights) and memory * SLACK < weights:
        yield "memory_per_gpu_gb", "below_weights", {"weights": weights}
    if training:
        rate, ceiling = values.get("tokens_per_s_per_gpu"), values.get("ceiling_tokens_per_s_per_gpu")
        if finite(rate) and finite(ceiling) and rate > ceiling * SLACK:
            yield "tokens_per_s_per_gpu", "above_peak", {"limit": ceiling}
            yield "training_time_hours", "above_peak", {"limit": ceiling}
        effective = values.get("effective_tflops_total")
        if finite(effective) and finite(peak) and finite(gpus) and effective > peak * gpus * SLACK:
            yield "effective_tflops_total", "above_peak", {"limit": peak * gpus}
            yield "training_time_hours", "above_peak", {"limit": peak * gpus}
        return
    tpot, floor = values.get("tpot_ms"), values.get("floor_tpot_ms")
    if finite(tpot) and finite(floor) and tpot * SLACK < floor:
        yield "tpot_ms", "above_bandwidth", {"limit": floor}
        yield "output_tokens_per_s", "above_bandwidth", {"limit": floor}
    tokens, active = values.get("output_tokens_per_s"), values.get("active_params")
    if all(finite(x) for x in (tokens, active, peak, gpus)) and tokens * 2 * active > peak * 1e12 * gpus * SLACK:
        # every output token costs 2 FLOPs per active parameter; no GPU does more than its peak
        yield "output_tokens_per_s", "above_peak", {"limit": peak * 1e12 * gpus / (2 * active)}


def _applies(results: Results, key: str) -> bool:
    """A figure the rules meant to give (its rule ran) but could not: a missing rate, a blank input."""
    step = results.step(key)
    return step is not None


def _notice(results: Results, items: list[Withheld]) -> Notice:
    """One warning naming every withheld figure and why, in each language."""
    text = {}
    for lang in LANGUAGES:
        m = messages(lang)
        lines = []
        if any(item.reason == "does_not_fit" for item in items):
            lines.append(m("guards.not_run"))
        for item in items:
            if item.reason == "does_not_fit":
                continue
            step = results.step(item.key)
            label = (step.label.get(lang) or step.label.get("en")) if step else item.key
            detail = {k: m.number(v) for k, v in item.detail.items()}
            lines.append(m("guards.withheld", label=label, reason=m(f"guards.{item.reason}", **detail)))
        text[lang] = " ".join(lines)
    return Notice("withheld", text, "engine/quote/guards.py", "warning")


def _strip_options(results: Results) -> None:
    """A configuration among the alternatives (the request too) gives no running figures when it
    cannot hold the model: the keys stay (the JSON contract), their values are blank."""
    for option in results.alternatives or []:
        if option.figures.get("fits_in_memory") is False:
            for key in RUNNING:
                if key in option.figures:
                    option.figures[key] = None
