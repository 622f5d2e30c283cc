"""The layout a quote uses and the other configurations it suggests, in the reader's words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.calc.planner import model_copies
from engine.quote.messages import Messages, finite

# The layout fields in the order an engineer reads them.
LAYOUT_ORDER = ("tensor_parallel", "pipeline_parallel", "virtual_pipeline_stages", "context_parallel",
                "expert_parallel", "zero_stage", "micro_batch_size", "activation_checkpointing", "recompute_share",
                "concurrency")


@dataclass
class LayoutLine:
    key: str
    label: str
    text: str
    by: str            # "intake" | "planner" | "result" (follows from the others)
    note: str = ""     # who chose it, in the reader's words


@dataclass
class Alternative:
    """One configuration as a row: what it is, its figures as text, and a sentence against the request."""

    configuration: str
    figures: list[tuple[str, str]]   # (label, text)
    note: str
    requested: bool
    meets_targets: bool
    data: dict                        # the JSON object, for the workbook's numbers


def layout_lines(m: Messages, plan, gpu_count: Any = None) -> list[LayoutLine]:
    """Each layout value and who chose it; then the copies of the model the GPUs hold, which follow."""
    if plan is None:
        return []
    keys = [k for k in LAYOUT_ORDER if k in plan.chosen] + [k for k in plan.chosen if k not in LAYOUT_ORDER]
    lines = [LayoutLine(k, m.input_label(k), _layout_value(m, k, plan.chosen[k]), plan.by.get(k, "planner"))
             for k in keys]
    copies = model_copies(plan.chosen, gpu_count)
    if copies:
        lines.append(LayoutLine("model_copies", m("layout.model_copies"), m.number(copies), "result"))
    for line in lines:
        line.note = m({"planner": "layout.by_planner", "intake": "layout.by_intake"}.get(line.by, "layout.by_result"))
    return lines


def layout_note(m: Messages, plan) -> str:
    """Why the layout is what it is, or what would fit where the intake's own layout does not."""
    if plan is None:
        return ""
    if plan.free is not None:
        return m("layout.would_fit", layout=describe(m, plan.free))
    if not plan.fits:
        return m("layout.nothing_fits")
    return m("layout.chosen") if any(v == "planner" for v in plan.by.values()) else ""


def describe(m: Messages, layout: dict) -> str:
    parts = [f"{m.input_label(k)} {_layout_value(m, k, layout[k])}" for k in LAYOUT_ORDER if k in layout]
    return ", ".join(parts)


def alternative_rows(m: Messages, options: list, currency: str, training: bool, deadline: Any,
                     cost_label: str = "") -> list[Alternative]:
    """The requested configuration and the others; where the request misses a target, the
    cheapest that meets it comes first. `cost_label` names the cost column where it is for a
    period (online serving)."""
    if not options:
        return []
    requested = next((o for o in options if o.requested), options[0])
    ordered = list(options)
    if not requested.meets_targets:
        first = next((o for o in options if not o.requested and o.meets_targets), None)
        if first is not None:
            ordered.remove(first)
            ordered.insert(0, first)
    return [_row(m, o, requested, currency, training, deadline, cost_label) for o in ordered]


def _row(m: Messages, option, requested, currency: str, training: bool, deadline: Any,
         cost_label: str = "") -> Alternative:
    f, name = option.figures, option.extra.get("gpu_name", option.gpu)
    configuration = m("alternatives.configuration", count=m.number(option.gpu_count), gpu=name,
                      precision=m.input_value("precision", option.precision))
    shown = [(cost_label or m("alternatives.cost"), m.value(f.get("cost_total"), f.get("cost_currency") or currency))]
    if training:
        shown.insert(0, (m("alternatives.time"), m.value(*m.duration(f.get("training_time_days"), "days"))))
    else:
        shown.insert(0, (m("alternatives.throughput"), m.value(f.get("output_tokens_per_s"), "tokens/s")))
    words = []
    if option.requested:
        words.append(m("alternatives.requested"))
    if not f.get("fits_in_memory", True):
        words.append(m("alternatives.does_not_fit"))
    elif training and finite(deadline):
        days = m.number(deadline)
        words.append(m("alternatives.meets_deadline" if f.get("meets_deadline") else
                       "alternatives.misses_deadline", days=days))
    elif not training and not option.meets_targets:
        words.append(m("alternatives.misses_targets"))
    elif not training:
        words.append(m("alternatives.meets_targets"))
    if option.extra.get("precision_change"):
        asked, to = (m.input_value("precision", p) for p in (requested.precision, option.precision))
        words.append(m("choice.precision_change", asked=asked, to=to))
    if not option.requested and _comparable(f, requested.figures):
        words += _against(m, f, requested.figures, training)
    note = m("alternatives.joiner").join(words)
    return Alternative(configuration, shown, note, option.requested, option.meets_targets, option.to_json())


def _comparable(mine: dict, theirs: dict) -> bool:
    """Only against a request that runs, priced in the same currency: never "900% dearer" than a
    setup that cannot load the model, nor CNY against USD."""
    return theirs.get("fits_in_memory") is not False and \
        (mine.get("cost_currency") or "USD") == (theirs.get("cost_currency") or "USD")


def _against(m: Messages, mine: dict, theirs: dict, training: bool) -> list[str]:
    """Cheaper/dearer and faster/slower than the request, in percent."""
    out = []
    cost, base = mine.get("cost_total"), theirs.get("cost_total")
    if finite(cost) and finite(base) and base > 0:
        change = cost / base - 1
        if abs(change) >= 0.01:
            # dearer reads as a multiple ("2.5× the cost"), never "1500% dearer"
            out.append(m("alternatives.cheaper" if change < 0 else "alternatives.dearer",
                         pct=f"{abs(change):.0%}", times=m.number(cost / base)))
    key, faster_when_lower = ("job_hours", True) if training else ("output_tokens_per_s", False)
    speed, base = mine.get(key), theirs.get(key)
    if finite(speed) and finite(base) and base > 0 and speed > 0:
        ratio = base / speed if faster_when_lower else speed / base
        if abs(ratio - 1) >= 0.01:
            out.append(m("alternatives.faster" if ratio > 1 else "alternatives.slower",
                         times=m.number(ratio if ratio > 1 else 1 / ratio)))
    return out


def _layout_value(m: Messages, key: str, value: Any) -> str:
    if isinstance(value, bool):
        return m.input_value(key, value)
    return m.number(value)
