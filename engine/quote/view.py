"""The quote view: what a quote says, in the reader's language, before any file format."""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from engine.calc.planner import model_copies
from engine.calc.results import Results, plain
from engine.intake.model import Intake
from engine.quote.messages import Messages, finite, messages
from engine.quote.options import alternative_rows, layout_lines, layout_note

log = logging.getLogger(__name__)

# The order a sizing is reasoned in — model & precision, memory, compute, bandwidth, scaling,
# targets: (section, input keys, result keys), each shown where present.
SECTIONS = (
    ("model", ("workload", "model", "params_billion", "active_params_billion", "experts_total", "experts_active", "layers",
               "hidden_size", "seq_len", "precision", "weight_precision", "kv_cache_precision",
               "finetune_method", "training_tokens_billion", "dataset_gb", "samples", "epochs",
               "prompt_tokens", "output_tokens", "concurrency"),
     ("model_name", "params", "active_params", "training_tokens", "kv_cache_bytes_per_token")),
    ("capacity", ("zero_stage", "activation_checkpointing"),
     ("weights_gb", "gradients_gb", "optimizer_gb", "activations_gb", "kv_cache_gb",
      "memory_per_gpu_gb", "gpu_memory_gb", "fits_in_memory", "min_gpus_for_memory",
      "max_concurrency")),
    ("compute", ("gpu", "gpu_count", "gpu_power_limit_w", "serving_engine", "serving_engine_release", "max_batch_size", "kv_cache_memory_share", "cuda_graphs",
                 "attention_data_parallel",
                 "training_framework", "utilization"),
     ("gpu_name", "peak_tflops_per_gpu", "utilization_used", "effective_tflops_total", "goodput_used", "training_flops",
      "steps", "tokens_per_s_per_gpu", "training_time_hours", "training_time_days",
      "training_time_hours_at_default", "gpu_hours")),
    ("bandwidth", (), ("arithmetic_intensity", "ridge_point", "attainable_tflops_per_gpu", "bound")),
    ("scaling", ("gpus_per_node", "tensor_parallel", "pipeline_parallel", "pipeline_schedule"),
     ("scaling_efficiency", "gpus_for_deadline")),
    ("targets", ("deadline_days", "ttft_target_ms", "tpot_target_ms", "requests_per_second", "request_lengths",
                 "gpu_hour_price"),
     ("ttft_ms", "tpot_ms", "output_tokens_per_s", "meets_latency_targets", "cost_total",
      "cost_per_million_tokens")),
)
KEY_FIGURES = ("training_time_days", "training_time_hours", "training_time_hours_at_default",
               "gpu_hours", "cost_total", "ttft_ms",
               "tpot_ms", "output_tokens_per_s", "max_concurrency", "meets_latency_targets",
               "cost_per_million_tokens", "memory_per_gpu_gb", "gpu_memory_gb", "fits_in_memory",
               "min_gpus_for_memory", "gpus_for_deadline", "training_flops", "effective_tflops_total",
               "goodput_used", "bottleneck")
# What memory_per_gpu_gb adds up (rules/capacity.yaml), every part named, so the parts sum to it.
MEMORY_PARTS = ("weights_gb", "gradients_gb", "optimizer_gb", "activations_gb", "kv_cache_gb", "zero3_gather_gb",
                "framework_overhead_gb")
# Defaults that shape the figures, in the order the Assumptions list them when the intake left
# them out (any other default the form filled in follows).
ASSUMED = ("gpu_count", "serving_engine", "training_framework", "utilization", "scaling_efficiency",
           "precision", "weight_precision", "kv_cache_precision", "finetune_method", "lora_rank", "lora_targets", "epochs", "optimizer",
           "activation_checkpointing", "zero_stage", "tensor_parallel", "pipeline_parallel",
           "gpus_per_node", "global_batch_size", "micro_batch_size", "flash_attention",
           "gpu_hour_price", "currency", "optimize_for")
NOT_ASSUMPTIONS = {"language"}     # the quote's own language says itself
SCALING_KEYS = ("training_time_days", "training_time_hours", "gpu_hours", "output_tokens_per_s",
                "ttft_ms", "tpot_ms", "max_concurrency", "cost_total", "cost_per_million_tokens",
                "fits_in_memory")
# Units the quote needs where a rule leaves its unit blank: shares read as percent,
# money in the quote's currency.
FRACTIONS = {"utilization", "utilization_used", "scaling_efficiency", "goodput_used", "kv_cache_memory_share"}
MONEY = {"cost_total", "cost_per_million_tokens", "gpu_hour_price", "price_per_gpu_hour"}
NAMED_BY = {"model": "model_name", "gpu": "gpu_name"}   # catalog ids give way to their names
MAX_SCALING_GPUS = 65536
GITHUB_THREAD = re.compile(r"(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+)\s+(?:issue|pull request|PR|discussion)\b",
                           re.IGNORECASE)
VERDICT_WORDS = {"memory": "memory_capacity", "capacity": "memory_capacity",
                 "bandwidth": "memory_bandwidth"}


@dataclass
class Figure:
    """One value as the quote shows it: `value` for spreadsheets, `text` for readers."""

    key: str
    label: str
    value: Any
    unit: str
    text: str
    band: str = ""        # "likely 16–22" where rules/uncertainty.yaml gives a band


@dataclass
class Section:
    key: str
    title: str
    figures: list[Figure]


@dataclass
class Column:
    """One column of the scaling table (the first is the GPU count)."""

    key: str
    label: str
    unit: str
    values: list[Any]


@dataclass
class Quote:
    """Everything the three outputs say, already in the intake's language."""

    m: Messages
    customer: str
    project: str
    generated_at: datetime
    ruleset: str
    headline: str
    verdicts: list[str]
    key_figures: list[Figure]
    sections: list[Section]
    warnings: list[str]
    assumptions: list[Figure]
    memory: list[Figure]
    values: dict[str, Any]
    gpu_count: int
    results: Results
    intake: Intake | None = None
    layout: list = field(default_factory=list)          # options.LayoutLine: the layout quoted
    layout_note: str = ""
    alternatives: list = field(default_factory=list)    # options.Alternative, the request among them
    scaling: list[Column] = field(default_factory=list)
    scaling_note: str = ""      # the scaling table's caption: the counts it shows, each on its planned layout
    checked: list[str] = field(default_factory=list)   # the published runs this kind of estimate was checked against
    facility: Any = None                                # engine.quote.facility.Facility, added by job.write_quote

    @property
    def lang(self) -> str:
        return self.m.lang

    @property
    def date(self) -> str:
        return self.generated_at.date().isoformat()

    def figure(self, key: str) -> Figure | None:
        return next((f for s in self.sections for f in s.figures if f.key == key), None)


def build_quote(intake: Intake | None, results: Results, grid=None) -> Quote:
    """The view every output is written from; `grid` is evaluate_grid's columns, if any."""
    m = messages(intake.language if intake else "en")
    filled = {k: v for k, v in (intake.values if intake else {}).items() if v not in (None, "")}
    # what the intake said itself; the form's defaults for what it left out are assumptions
    entered = {k: v for k, v in filled.items() if intake.sources.get(k) != "default"}
    inputs = {**filled, **results.assumptions, **results.inputs}   # resolved by the engine where it resolved them
    steps = {s.name: s for s in results.trace}
    values = results.values
    cost_label = _cost_label(m, values, inputs)

    def label(key: str) -> str | None:
        step = steps.get(key)
        return (step.label.get(m.lang) or step.label.get("en")) if step else None

    def result(key: str) -> Figure:
        step = steps.get(key)
        value, unit = m.shown(values[key], _unit(key, step.unit if step else "", values, inputs),
                              gpu_memory=step is not None and step.group == "capacity")
        scale = value / values[key] if finite(value) and values[key] else 1   # the band moves alike
        text = _word(m, key, value) if isinstance(value, str) else m.value(value, unit)
        low, high = values.get(f"{key}_low"), values.get(f"{key}_high")
        band = ""
        if finite(low) and finite(high):     # the uncertainty band (rules/uncertainty.yaml)
            low, high = m.number(low * scale), m.number(high * scale)
            band = m("likely_range", low=low, high=high)
            text = m("likely", value=text, low=low, high=high)
        name = cost_label if key == "cost_total" and cost_label else label(key)
        return Figure(key, name or key, value, unit, text, band)

    def given(key: str) -> Figure:
        unit = _unit(key, "", values, inputs)
        text = m.value(inputs[key], unit) if unit else m.input_value(key, inputs[key])
        return Figure(key, m.input_label(key), inputs[key], unit, text)

    gpu = str(values.get("gpu_name") or inputs.get("gpu", "GPU"))
    count = inputs.get("gpu_count", 1)
    hardware = Figure("hardware", m.input_label("gpu"), f"{m.number(count)} × {gpu}", "",
                      f"{m.number(count)} × {gpu}")
    sections = [Section(key, m(f"sections.{key}"),
                        [given(k) for k in ins if k in entered and NAMED_BY.get(k) not in values]
                        + [result(k) for k in outs if k in values and k != _slower_time_unit(values)])
                for key, ins, outs in SECTIONS]
    return Quote(
        m=m, customer=str(inputs.get("customer", "")), project=str(inputs.get("project", "")),
        generated_at=datetime.now().astimezone().replace(microsecond=0),
        ruleset=results.ruleset,
        headline=_feasibility_headline(m, values, inputs, gpu, count) or _headline(m, values, gpu, count),
        verdicts=_instead(m, values, results.alternatives,
                          _cost_label(m, {**values, "cost_total": 0}, inputs, "alternatives.cost_per_period"))
        + _verdicts(m, values),
        key_figures=[hardware] + [result(k) for k in KEY_FIGURES if k in values
                                  and k != _slower_time_unit(values)],
        sections=sections,
        warnings=[n.text(m.lang) for n in results.warnings] + _money_notes(m, results, inputs, gpu),
        assumptions=_assumptions(m, inputs, entered, values, given),
        memory=[result(k) for k in MEMORY_PARTS if k in values and values[k] != 0],
        values=values, gpu_count=int(count) if finite(count) else 1,
        scaling=_scaling_columns(m, grid, steps, values, inputs, cost_label),
        scaling_note=_scaling_note(m, grid),
        checked=_checked(m, values, inputs.get("workload"), label), results=results, intake=intake,
        layout=layout_lines(m, results.plan, results.inputs.get("gpu_count")), layout_note=layout_note(m, results.plan),
        alternatives=alternative_rows(m, results.alternatives, _unit("cost_total", "currency", values, inputs),
                                      bool(values.get("is_training")), inputs.get("deadline_days"),
                                      cost_label=_cost_label(m, values, inputs, "alternatives.cost_per_period")),
    )


def _assumptions(m: Messages, inputs: dict, entered: dict, values: dict, given) -> list[Figure]:
    """What the intake left out and the engine assumed: the defaults it filled in, and the
    catalog's price where no price was given. Figures the engine worked out are results, not here."""
    keys = [k for k in ASSUMED if k in inputs] + [k for k in inputs if k not in ASSUMED]
    out = [given(k) for k in keys if k not in entered and k not in NOT_ASSUMPTIONS]
    if "gpu_hour_price" not in inputs and finite(values.get("price_per_gpu_hour")) \
            and finite(values.get("cost_total")):
        unit = _unit("price_per_gpu_hour", "currency", values, inputs)
        out.append(Figure("gpu_hour_price", m.input_label("gpu_hour_price"), values["price_per_gpu_hour"],
                          unit, m.value(values["price_per_gpu_hour"], unit)))
    return out


def _cost_label(m: Messages, values: dict, inputs: dict, path: str = "cost_per_period") -> str:
    """Online serving's cost is for a period of running (rules/cost.yaml, service_days): say which."""
    days = values.get("service_days")
    if inputs.get("workload") != "online-inference" or not finite(days) or "cost_total" not in values:
        return ""
    return m(path, days=m.value(days, "days"))


# a serving figure whose likely range's low end a physical floor may raise above the band's (rules/uncertainty.yaml)
FLOORED = (("ttft_ms", "first_token_band"), ("tpot_ms", "inference_band"))


def _checked(m: Messages, values: dict, workload: str | None, label: Callable[[str], str | None]) -> list[str]:
    """One sentence per kind of estimate: how many published runs its band rests on, and which; and
    which ranges stop at a physical limit before the band's factor."""
    from engine.calc.evidence import band_evidence
    kinds = [("training" if values.get("is_training") else "inference"), "memory"]
    out = []
    for kind in kinds:
        runs = band_evidence(kind, workload)
        band = values.get(f"{kind}_band")
        if runs and finite(band):
            out.append(m("checked_against", kind=m(f"kinds.{kind}"), count=len(runs), **_factor(band),
                         runs="; ".join(source_names(runs))))
            first = values.get("first_token_band")
            if kind == "inference" and finite(first) and first > band + 1e-9:
                out.append(m("checked_first_token", **_factor(first)))
    floored = [label(key) or key for key, band in FLOORED if _floored(values, key, band)]
    if floored:
        out.append(m("range_floor", figures=m("alternatives.joiner").join(floored)))
    return out


def _floored(values: dict, key: str, band: str) -> bool:
    """Whether the figure's likely low end sits above the estimate ÷ (1 + band): a physical floor raised it."""
    estimate, low, width = values.get(key), values.get(f"{key}_low"), values.get(band)
    return finite(estimate) and finite(low) and finite(width) and low > estimate / (1 + width) * (1 + 1e-9)


def _factor(band: float) -> dict[str, str]:
    """A band as the sentences give it: a ratio either way (engine/validation.py), ÷ and × the same factor."""
    return {"factor": f"{1 + band:.3g}", "down": f"{-band / (1 + band):.0%}".replace("-", "−"), "up": f"{band:.0%}"}


def source_names(runs: list[dict]) -> list[str]:
    """Each source named once, however many runs it gave: a run's title without the details in
    brackets (a table, a version), and one name for titles at the same address or where one is
    the other's short form ("Narayanan et al. 2021" and "Narayanan et al. 2021, Efficient …")."""
    return list(_source_names(tuple((run.get("title", ""), run.get("url", "")) for run in runs)))


@functools.lru_cache(maxsize=64)
def _source_names(runs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    # The runs are the rule set's published evidence, the same for every quote of a kind: the
    # pairwise comparison of their titles (≈ 25 ms a quote) is done once per rule set.
    names: list[str] = []
    urls: list[set[str]] = []
    for title, url in runs:
        name = _source_name(title)
        if not name:
            continue
        same = next((i for i, known in enumerate(names)
                     if (url and url in urls[i]) or _short_form(name, known) or _short_form(known, name)), None)
        if same is None:
            names.append(name)
            urls.append({url} if url else set())
            continue
        if len(name) > len(names[same]):
            names[same] = name          # the fuller name of the two
        if url:
            urls[same].add(url)
    return tuple(names)


def _source_name(title: str) -> str:
    """A run's source by its name: "Meta Llama 2 model card (…, Table 2)" → "Meta Llama 2 model card";
    a GitHub issue or pull request by the project it was published in ("vllm (GitHub)"), not its title."""
    thread = GITHUB_THREAD.match(title.strip())
    if thread:
        return f"{thread['repo']} (GitHub)"
    name, depth = title, 0
    for i, ch in enumerate(title):   # what follows a "; " outside brackets is a second citation
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and title.startswith("; ", i):
            name = title[:i]
            break
    name = " ".join(name.split())
    while name.endswith(")"):        # the details in brackets at the end: a table, a version
        depth, i = 0, len(name) - 1
        while i >= 0:
            depth += (name[i] == ")") - (name[i] == "(")
            if depth == 0:
                break
            i -= 1
        if i <= 0:
            break
        name = name[:i].rstrip()
    return name.strip(" ,;:")


def _short_form(short: str, name: str) -> bool:
    """`short` names the same work as `name`, in fewer words (a trailing "README" aside)."""
    def words(text: str) -> list[str]:
        out = [w.strip(",;:").casefold() for w in text.split()]
        return out[:-1] if out and out[-1] == "readme" else out
    a, b = words(short), words(name)
    return 2 <= len(a) <= len(b) and b[:len(a)] == a      # one word alone names too much


def _unit(key: str, unit: str, values: dict, inputs: dict) -> str:
    if unit == "currency" or (not unit and key in MONEY):
        return str(values.get("cost_currency") or inputs.get("currency") or "USD")
    return unit or ("fraction" if key in FRACTIONS else "")


def _slower_time_unit(values: dict) -> str:
    """Of training time in days and in hours, the one that reads worse (0.02 days, 460 hours)."""
    days = values.get("training_time_days")
    return "training_time_hours" if finite(days) and days >= 1 else "training_time_days"


def _word(m: Messages, key: str, value: str) -> str:
    """A word a rule gives as its value (`bound: memory`) in the reader's language."""
    return m.get(f"{key}.{_slug(value, keep=True)}") or m.get(f"{key}.{_slug(value)}") or value


def _slug(word: str, keep: bool = False) -> str:
    """`Memory-bandwidth` → `memory_bandwidth`; bare `memory` means capacity unless `keep`."""
    word = word.strip().lower().replace(" ", "_").replace("-", "_")
    return word if keep else VERDICT_WORDS.get(word, word)


def _headline(m: Messages, v: dict, gpu: str, count: Any) -> str:
    hw = {"count": m.number(count), "gpu": gpu}
    hours = v.get("training_time_hours")
    if not finite(hours) and finite(v.get("training_time_days")):
        hours = v["training_time_days"] * 24
    if finite(hours):
        # {time} is the figure with its unit ("1 day", "19.2 days"); {value} the bare number
        if hours >= 24:
            days = v.get("training_time_days", hours / 24)
            return m("headline.days", value=m.number(days), time=m.value(days, "days"), **hw)
        if hours >= 1:
            return m("headline.hours", value=m.number(hours), time=m.value(hours, "hours"), **hw)
        return m("headline.minutes", value=m.number(hours * 60), time=m.value(hours * 60, "minutes"), **hw)
    if finite(v.get("output_tokens_per_s")):
        tokens = m.number(v["output_tokens_per_s"])
        if finite(v.get("ttft_ms")):
            return m("headline.latency", tokens=tokens, ttft=m.number(v["ttft_ms"]), **hw)
        return m("headline.throughput", tokens=tokens, **hw)
    return m("headline.hardware", **hw)


def _feasibility_headline(m: Messages, v: dict, inputs: dict, gpu: str, count: Any) -> str:
    """One sentence for a configuration that cannot work as asked (rules/verdict.yaml, feasible); "" otherwise."""
    if v.get("feasible") is not False:
        return ""
    hw = {"count": m.number(count), "gpu": gpu}
    if v.get("fits_in_memory") is False and finite(v.get("memory_per_gpu_gb")):
        # in the GB the GPU's name counts, as "Memory needed per GPU" and "GPU memory" below show them
        need, have = (m.shown(v.get(key), "GB", gpu_memory=True)[0] for key in ("memory_per_gpu_gb", "gpu_memory_gb"))
        return m("feasibility.headline_memory", need=m.number(need), have=m.number(have), **hw)
    if v.get("holds_a_request") is False:
        return m("feasibility.headline_request", **hw)
    missed = []
    days, hours = inputs.get("deadline_days"), v.get("job_hours")
    if finite(days) and finite(hours) and hours > days * 24:
        missed.append(m("feasibility.missed_deadline", days=m.number(days)))
    if v.get("meets_latency_targets") is False:
        missed.append(m("feasibility.missed_latency"))
    if v.get("meets_throughput") is False:
        missed.append(m("feasibility.missed_throughput"))
    return m("feasibility.headline_targets", missed=m("alternatives.joiner").join(missed) or "—", **hw)


def _instead(m: Messages, v: dict, options: list, cost_label: str = "") -> list[str]:
    """Where the request cannot work: the cheapest configuration that does (at the precision asked
    for where one does), first of the verdicts."""
    if v.get("feasible") is not False:
        return []
    working = [o for o in options or [] if not o.requested and o.meets_targets and finite(o.figures.get("cost_total"))]
    if not working:
        return [m("feasibility.none_works")] if options else []
    # like-for-like where one works: a change of precision is the customer's to make
    same = [o for o in working if not o.extra.get("precision_change")]
    best = min(same or working, key=lambda o: o.figures["cost_total"])
    f = best.figures
    configuration = m("alternatives.configuration", count=m.number(best.gpu_count),
                      gpu=best.extra.get("gpu_name", best.gpu), precision=m.input_value("precision", best.precision))
    cost = m.value(f["cost_total"], str(f.get("cost_currency") or "USD"))
    shown = [m("feasibility.cost", label=cost_label, value=cost) if cost_label else cost]
    if finite(f.get("training_time_days")):
        shown.insert(0, m.value(f["training_time_days"], "days"))
    elif finite(f.get("output_tokens_per_s")):
        shown.insert(0, m.value(f["output_tokens_per_s"], "tokens/s"))
    return [m("feasibility.instead", configuration=configuration, figures=m("alternatives.joiner").join(shown))]


def _money_notes(m: Messages, results: Results, inputs: dict, gpu: str) -> list[str]:
    """Whose price each GPU is charged at: the typed price for the typed GPU only, the others their
    catalog price converted at the dated rate the rules hold (rules/cost.yaml, usd_rate)."""
    v, out = results.values, []
    currency = str(inputs.get("currency") or "USD")
    if v.get("typed_price_applies") is True and results.alternatives:
        out.append(m("money.typed_price", price=m.value(inputs.get("gpu_hour_price"), currency), gpu=gpu))
    if currency == "USD":
        return out
    rate = v.get("usd_rate")
    step = results.step("usd_rate")
    source = next((s.note for s in (step.sources if step else ()) if s.note), "")
    if finite(rate) and (results.alternatives or v.get("typed_price_applies") is not True):
        out.append(m("money.converted", rate=m.number(rate), currency=currency, source=source))
    elif not finite(rate) and v.get("typed_price_applies") is True and results.alternatives:
        out.append(m("money.in_usd", currency=currency))
    return out


def _verdicts(m: Messages, v: dict) -> list[str]:
    """What limits the workload, in sentences: bottleneck, memory fit, latency targets."""
    out = []
    if isinstance(v.get("bottleneck"), str):
        out.append(m.get(f"verdict.{_slug(v['bottleneck'])}")
                   or m("verdict.other", value=v["bottleneck"]))
    if v.get("fits_in_memory") is False and finite(v.get("memory_per_gpu_gb")):
        need, have = (m.number(m.shown(v.get(k), "GB", gpu_memory=True)[0]) for k in ("memory_per_gpu_gb",
                                                                                     "gpu_memory_gb"))
        if finite(v.get("min_gpus_for_memory")):
            out.append(m("verdict.not_fit_min", need=need, have=have,
                         min=m.number(v["min_gpus_for_memory"]),
                         gpus=m.value(v["min_gpus_for_memory"], "GPUs")))
        else:
            out.append(m("verdict.not_fit", need=need, have=have))
    if isinstance(v.get("meets_latency_targets"), bool):
        out.append(m("verdict.latency_met" if v["meets_latency_targets"] else "verdict.latency_missed"))
    return out


def gpu_counts(chosen: int) -> list[int]:
    """1, 2, 4, 8 … up to twice the quoted count, and the quoted count itself."""
    top, counts, n = min(max(8, 2 * chosen), MAX_SCALING_GPUS), {chosen}, 1
    while n <= top:
        counts.add(n)
        n *= 2
    return sorted(counts)


def scaling_grid(intake: Intake, results: Results, ruleset, layout: dict | None = None):
    """The same intake at 1, 2, 4, 8 … GPUs, each count on the layout the planner chooses for it —
    the rows `sizing sweep` gives for this GPU and precision (engine.calc.sweep.planned_rows) — as
    {key: one value per count}; the quoted count's row is the quote itself. None where it cannot be had."""
    from engine.calc.sweep import planned_rows
    values = {**(intake.values if intake else {}), **results.inputs}
    chosen = values.get("gpu_count") or 1
    measured = ("training_time_hours", "training_time_days", "output_tokens_per_s")
    if intake is None or not (finite(chosen) and chosen >= 1) or not any(k in results.values for k in measured):
        return None       # nothing that more GPUs would change
    try:
        rows, _, _ = planned_rows(intake, ruleset, {"gpu": [values.get("gpu")], "gpu_count": gpu_counts(int(chosen)),
                                                    "precision": [values.get("precision")]},
                                  outputs=SCALING_KEYS + ("scaling_efficiency",))
    except Exception:  # noqa: BLE001 — the quote stands without its scaling table; say so in the log
        log.exception("scaling table for %s could not be computed", intake.origin)
        return None
    # a layout the intake fixed (tensor parallel 8, say) cannot run on fewer GPUs than it spans, nor on
    # counts it does not divide: those counts are left out, as the sweep marks them failing
    rows = sorted((r for r in rows if r.get("divides", True) or r["gpu_count"] == int(chosen)),
                  key=lambda r: r["gpu_count"])
    if not rows:
        return None
    for row in rows:
        if row["gpu_count"] == int(chosen):      # the quote's own figures and layout, not a second evaluation
            row.update({k: results.values[k] for k in row if k in results.values})
            if layout:
                row["layout_values"] = dict(layout)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k) for r in rows] for k in keys}


def _scaling_note(m: Messages, grid) -> str:
    """The caption names the counts the table shows."""
    if grid is None or "gpu_count" not in grid or not len(grid["gpu_count"]):
        return ""
    counts = [m.number(int(n)) for n in grid["gpu_count"]]
    shown = counts if len(counts) <= 4 else [*counts[:3], "…", counts[-1]]
    return m("scaling.note", counts=m("scaling.joiner").join(shown))


def _scaling_columns(m: Messages, grid, steps: dict, values: dict, inputs: dict,
                     cost_label: str = "") -> list[Column]:
    """The scaling table: GPUs, the layout at that count, time or throughput, speedup, the scaling
    efficiency the estimate used (the same figure the quote shows for its own count), cost, fit."""
    if grid is None or "gpu_count" not in grid or not len(grid["gpu_count"]):
        return []
    counts = [int(n) for n in grid["gpu_count"]]
    # only what applies to this workload (the grid has a column for every rule)
    keys = [k for k in SCALING_KEYS if k in grid and k in values and k != _slower_time_unit(values)]
    columns = [Column("gpu_count", m("columns.gpus"), "", counts)]
    # a count that cannot hold the model does not run: its row says so, with no time, speed or cost
    runs = [plain(f) is not False and plain(f) != 0 for f in list(grid["fits_in_memory"])] \
        if "fits_in_memory" in grid else [True] * len(counts)
    if "layout_values" in grid:
        columns.append(Column("layout", m("columns.layout"), "",
                              [_layout_text(m, layout, n if values.get("is_inference") else None)
                               if isinstance(layout, dict) else ""
                               for layout, n in zip(grid["layout_values"], counts)]))
    for key in keys:
        step = steps.get(key)
        label = (step.label.get(m.lang) or step.label.get("en")) if step else key
        if key == "cost_total" and cost_label:
            label = cost_label
        cells = [plain(v) for v in list(grid[key])]
        shown = cells if key == "fits_in_memory" else [c if ok else None for c, ok in zip(cells, runs)]
        columns.append(Column(key, label, _unit(key, step.unit if step else "", values, inputs),
                              shown))
        if key in ("training_time_days", "training_time_hours", "output_tokens_per_s"):
            speedup = [Column(c.key, c.label, c.unit, [v if ok else None for v, ok in zip(c.values, runs)])
                       for c in _speedup(m, key, counts, cells, runs)]
            columns += speedup
            rule = steps.get("scaling_efficiency")
            efficiency = (rule.label.get(m.lang) or rule.label.get("en")) if rule \
                else m.input_label("scaling_efficiency")
            if "scaling_efficiency" in grid and "scaling_efficiency" in values:
                columns.append(Column("scaling_efficiency", efficiency, "fraction",
                                      [plain(v) for v in list(grid["scaling_efficiency"])]))
            elif key == "output_tokens_per_s" and speedup:
                # serving has no efficiency rule (rules/scaling.yaml): its efficiency is what the
                # speedup beside it gives, speedup ÷ GPUs, so the two columns cannot disagree
                columns.append(Column("scaling_efficiency", efficiency, "fraction",
                                      [s / n if s is not None else None
                                       for s, n in zip(speedup[0].values, counts)]))
    return columns


def _layout_text(m: Messages, layout: dict, serving_gpus: int | None = None) -> str:
    """A layout in a few words: the degrees above 1 and the choices made ("Tensor parallel 2, ZeRO stage 1").
    With `serving_gpus`, also the copies of the model above one: a second copy serves other requests and
    does not speed up one, which is why a serving row's speedup falls short of its GPUs."""
    from engine.quote.options import LAYOUT_ORDER
    parts = []
    for key in LAYOUT_ORDER:
        value = layout.get(key)
        if value is None or value is False or (value == 1 and key not in ("zero_stage", "micro_batch_size")):
            continue
        parts.append(m.input_label(key) if value is True else f"{m.input_label(key)} {m.number(value)}")
    copies = model_copies(layout, serving_gpus) if serving_gpus else 0
    if copies > 1:
        parts.append(f"{m('layout.model_copies')} {m.number(copies)}")
    return m("scaling.joiner").join(parts)


def _speedup(m: Messages, key: str, counts: list[int], values: list, runs: list[bool]) -> list[Column]:
    if not all(finite(x) and x > 0 for x in values) or not any(runs):
        return []
    # relative to the smallest configuration that runs, counted as its GPUs: a row that cannot hold the
    # model shows no time, so it cannot be the base either (its time may assume recomputation the
    # larger layouts avoid, which made 64 GPUs read as 82× faster than one)
    first = runs.index(True)
    base = values[first]
    ratio = [(base / x if "time" in key else x / base) * counts[first] for x in values]
    return [Column("speedup", m("columns.speedup"), "", ratio)]
