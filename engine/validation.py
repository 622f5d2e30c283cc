"""Quote every published case and compare the estimates with what was measured (`sizing validate`)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from engine.calc import calibration as customer
from engine.calc.evaluate import evaluate, evaluate_columns
from engine.calc.evidence import GROUPS, Case, band_cases
from engine.calc.fitting import (Coefficient, Rows, cell_value, describe, estimates, fit, fit_folds, informed_by,
                                 load_coefficients, loss_at, stack_columns)
from engine.calc.planner import plan_layout
from engine.calc.rulecache import cached_value
from engine.contract import memory_kind
from engine.intake.model import Intake
from engine.job import validate_intake
from engine.problems import Problem, SizingError

MIN_SOURCES = 2     # a coefficient is fitted only where figures of two sources inform it


def estimate(case: Case, ruleset) -> dict:
    """Quote one case through the same validation, planner and rules as any intake."""
    values = planned_values(case, ruleset)
    return evaluate(values, ruleset).values


def planned_values(case: Case, ruleset) -> dict:
    """The case's intake as validated, with the planner's layout for the fields it leaves blank."""
    values = {"customer": f"validation {case.id}", **case.intake}
    intake = Intake(values=values, sources={k: f"{case.where} {k}" for k in values}, kind="yaml")
    problems = validate_intake(intake, ruleset)
    if problems:
        raise SizingError([Problem(p.code, f"{case.id}: {p.where}", p.message) for p in problems])
    return {**intake.values, **plan_layout(intake.values, ruleset).chosen, **case.given()}


def rows_of(cases: list[Case], ruleset) -> dict[str, Rows]:
    """Every measured figure as a row, by group."""
    out: dict[str, list] = {}
    for figure in _figures([(case, planned_values(case, ruleset)) for case in cases]):
        out.setdefault(figure[0].group, []).append(figure)
    return {group: _rows(figures) for group, figures in out.items()}


def _figures(planned: list[tuple[Case, dict]]) -> list[tuple[Case, dict, str, float]]:
    """Each measured figure of the planned cases: (case, its planned values, quantity, the measurement as the
    rules estimate it)."""
    return [(case, values, quantity, float(case.comparable(quantity, float(measured))))
            for case, values in planned for quantity, measured in case.measured.items()]


def _rows(figures: list[tuple[Case, dict, str, float]]) -> Rows:
    """Figures as the columns the rules evaluate at once (engine/calc/fitting.py)."""
    return Rows([f[1] for f in figures], [f[2] for f in figures], np.array([f[3] for f in figures]),
                [f[0].source.get("id") or f[0].source.get("title", "") for f in figures], [f[0].id for f in figures])


def shipped_coefficients(ruleset, coefficients: list[Coefficient]) -> dict[str, float]:
    """The values the rule files hold now."""
    return {c.rule: float(cell if (cell := cell_value(ruleset, c.rule)) is not None
                          else ruleset.rules[c.rule].formula.text) for c in coefficients}


@dataclass
class CrossValidation:
    """In-sample and leave-one-source-out estimates of every figure, and what the fits chose."""

    table: pd.DataFrame                    # case, group, quantity, source, measured, in_sample, out_of_sample
    fitted: dict[str, float]               # every coefficient fitted on all sources
    shipped: dict[str, float]
    informed: dict[str, set[str]]          # coefficient → sources that move it
    folds: dict[str, dict[str, float]]     # held-out source → coefficients fitted without it


_RECENT: dict[tuple, CrossValidation] = {}   # the last few, by their whole input
RECENT_KEPT = 2
CACHED_KEPT = 4    # in the cache folder


def cross_validate(cases: list[Case], ruleset, coefficients: list[Coefficient] | None = None,
                   converge: bool = False) -> CrossValidation:
    """Leave-one-source-out: each figure estimated with coefficients chosen without its own source.
    `converge`: converged fits (engine/calc/fitting.py), each group's from the values fitted so far and
    each fold's from the all-sources fit, so that nothing depends on the values the rule files hold.
    The same question asked again (the CLI after the accuracy tests' own run, which take minutes
    each) is answered from the last answers: same engine, rule files, cases and coefficients — in
    one process from memory, across processes from the cache folder (engine/calc/rulecache.py)."""
    coefficients = load_coefficients(ruleset) if coefficients is None else coefficients
    if not ruleset.version:     # a rule set without a version cannot be told from another: computed every time
        return _cross_validate(cases, ruleset, coefficients, converge)
    key = (ruleset.version, repr(cases), repr(coefficients), converge)
    if key in _RECENT:
        return _RECENT[key]
    # an entry per question, so that one process waiting for another's answer waits only for its own
    # question; the last few are kept
    question = repr(key).encode()
    stored = cached_value(f"cross-validation-{hashlib.sha256(question).hexdigest()[:16]}", lambda: question,
                          lambda: _plain(_cross_validate(cases, ruleset, coefficients, converge)), keep=CACHED_KEPT)
    result = _RECENT[key] = _from_plain(stored)
    while len(_RECENT) > RECENT_KEPT:
        _RECENT.pop(next(iter(_RECENT)))
    return result


def _plain(result: CrossValidation) -> dict:
    """The answer as builtin containers and numbers, which is all the cache folder reads back."""
    return {"table": result.table.to_dict("split"), "fitted": _floats(result.fitted),
            "shipped": _floats(result.shipped), "informed": {k: set(v) for k, v in result.informed.items()},
            "folds": {k: _floats(v) for k, v in result.folds.items()}}


def _from_plain(stored: dict) -> CrossValidation:
    split = stored["table"]
    table = pd.DataFrame(split["data"], index=split["index"], columns=split["columns"])
    return CrossValidation(table, stored["fitted"], stored["shipped"], stored["informed"], stored["folds"])


def _floats(values: dict) -> dict[str, float]:
    return {k: float(v) for k, v in values.items()}


def _cross_validate(cases: list[Case], ruleset, coefficients: list[Coefficient], converge: bool) -> CrossValidation:
    shipped = shipped_coefficients(ruleset, coefficients)
    frames, fitted, informed, folds = [], dict(shipped), {}, {}
    for group, rows in rows_of(cases, ruleset).items():
        mine = [c for c in coefficients if c.group == group]
        informed.update(informed_by(rows, ruleset, mine, shipped))
        usable = [c for c in mine if len(informed[c.rule]) >= MIN_SOURCES]
        # from the values fitted so far: another group's coefficients that these rows read (serving reads
        # training's GEMM and attention shares) at their fit, not at whatever the rule files hold
        chosen = fit(rows, ruleset, usable, fitted if converge else shipped, converge)
        if converge:    # and from the middle of every range; the lower loss wins
            middle = fit(rows, ruleset, usable, {**fitted, **{c.rule: (c.low + c.high) / 2 for c in usable}}, True)
            chosen = min(chosen, middle, key=lambda v: float(loss_at(rows, ruleset, [v], usable)[0]))
        fitted.update({c.rule: v for c, v in zip(usable, _values(chosen, usable))})
        in_sample = estimates(rows, ruleset, _constant(shipped, len(rows)))
        out = np.full(len(rows), np.nan)
        names, plan = leave_one_source_out(rows, usable, informed)
        if converge:
            fits = [fit(rows.subset(keep), ruleset, fold, fitted, True) for keep, fold in plan]
        else:           # all folds in step: the same values as one fit each, in a fraction of the time
            fits = fit_folds(rows, ruleset, usable, shipped, plan)
        for source, (keep, fold), chosen in zip(names, plan, fits):
            folds.setdefault(source, {}).update({c.rule: chosen[c.rule] for c in fold})
            test = rows.subset(~keep)
            out[~keep] = estimates(test, ruleset, _constant(chosen, len(test)))
        frames.append(pd.DataFrame({"case": rows.case, "group": group, "quantity": rows.quantity,
                                    "source": rows.source, "measured": rows.measured,
                                    "in_sample": in_sample, "out_of_sample": out}))
    table = pd.concat(frames, ignore_index=True)
    return CrossValidation(table, fitted, shipped, informed, folds)


def leave_one_source_out(rows: Rows, usable: list[Coefficient], informed: dict[str, set[str]]
                         ) -> tuple[list[str], list[tuple[np.ndarray, list[Coefficient]]]]:
    """The folds: per source, the rows kept without it and the coefficients refit. Every coefficient the
    left-out source moved is refit without it, even on one source left: kept at its all-sources value, a
    coefficient two sources inform would score one of them with a value chosen on it (MIN_SOURCES decides
    what is shipped fitted, not what a fold keeps)."""
    names, sources = sorted(set(rows.source)), np.array(rows.source)
    return names, [(sources != name, [c for c in usable if informed[c.rule] - {name}]) for name in names]


def _values(chosen: dict[str, float], coefficients: list[Coefficient]) -> list[float]:
    return [chosen[c.rule] for c in coefficients]


def _constant(values: dict[str, float], n: int) -> dict[str, np.ndarray]:
    return {k: np.full(n, v) for k, v in values.items()}


def compare(cases: list[Case], ruleset, unquotable: dict[str, str] | None = None) -> pd.DataFrame:
    """Every measured figure beside its estimate. With `unquotable`, a case this rule set cannot quote (one
    that names a GPU or a field it does not know) is left out and its first problem kept there, by case.
    Each case is planned on its own; the rules then run once over all of them as columns (an
    evaluation's cost is mostly per pass, so this is several times faster than one quote per case)."""
    planned = []
    for case in cases:
        try:
            planned.append((case, planned_values(case, ruleset)))
        except SizingError as e:
            if unquotable is None:
                raise
            unquotable[case.id] = e.problems[0].message if e.problems else str(e)
    figures = _figures(planned)
    if not figures:
        return pd.DataFrame(columns=["case", "group", "use", "quantity", "measured", "estimated", "error", "source"])
    estimated = estimates(_rows(figures), ruleset)
    return pd.DataFrame([{"case": case.id, "group": case.group, "use": case.use, "quantity": quantity,
                          "measured": measured, "estimated": float(est),
                          "error": float(est) / measured - 1 if est == est else math.nan,
                          "source": case.source.get("title", "")}
                         for (case, _, quantity, measured), est in zip(figures, estimated)])


def summarise(table: pd.DataFrame) -> dict:
    """Per group: median absolute error, shares within ±25% / ±35% / a factor of 1.5, the worst case."""
    out = {}
    for group in GROUPS:
        rows = table[table["group"] == group]
        if not rows.empty:
            out[group] = _stats(rows)
    return out


def _stats(rows: pd.DataFrame) -> dict:
    err = rows["error"].abs()
    factor = (rows["estimated"] / rows["measured"]).map(lambda r: max(r, 1 / r) if r > 0 else math.inf)
    # the worst case is the one furthest off by factor (over or under alike), so its name and factor agree
    worst = rows.loc[factor.idxmax()] if factor.notna().any() else rows.iloc[0]
    return {"cases": int(len(rows)), "median_abs_error": float(err.median()),
            "within_25pct": float((err <= 0.25).mean()), "within_35pct": float((err <= 0.35).mean()),
            "within_factor_1_5": float((factor <= 1.5).mean()), "worst_case": str(worst["case"]),
            "worst_quantity": str(worst["quantity"]), "worst_error": float(err.max()),
            "worst_factor": float(factor.max())}


def render_text(table: pd.DataFrame, summary: dict) -> str:
    shown = table.assign(error=table["error"].map(lambda e: f"{e:+.1%}"))
    with pd.option_context("display.width", 200, "display.max_colwidth", 46,
                           "display.float_format", "{:,.4g}".format):
        lines = [shown[["case", "quantity", "measured", "estimated", "error"]].to_string(index=False), ""]
    lines += [_group_line(group, s) for group, s in summary.items()]
    return "\n".join(lines)


def _group_line(group: str, s: dict, label: str = "") -> str:
    return (f"{group:9s} {label}median |error| {s['median_abs_error']:.1%}  within ±25% {s['within_25pct']:.0%}, "
            f"±35% {s['within_35pct']:.0%}, ×1.5 {s['within_factor_1_5']:.0%}  worst {s['worst_case']} "
            f"({s['worst_quantity']}) factor {s['worst_factor']:.2f}  [{s['cases']} figures]")


def cv_tables(cv: CrossValidation) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(in-sample, out-of-sample) in compare()'s shape: one row per figure with its error."""
    def table(column: str) -> pd.DataFrame:
        t = cv.table[["case", "group", "quantity", "source", "measured"]].copy()
        t["estimated"] = cv.table[column]
        t["error"] = t["estimated"] / t["measured"] - 1
        return t
    return table("in_sample"), table("out_of_sample")


def render_cv_text(cv: CrossValidation, ruleset=None) -> str:
    """Per figure and group, in-sample beside out-of-sample; per coefficient, what the fits chose."""
    ins, oos = cv_tables(cv)
    shown = ins[["case", "quantity", "source", "measured"]].assign(
        in_sample=ins["error"].map(lambda e: f"{e:+.1%}"), out_of_sample=oos["error"].map(lambda e: f"{e:+.1%}"))
    with pd.option_context("display.width", 220, "display.max_colwidth", 46):
        lines = [shown.to_string(index=False), ""]
    a, b = summarise(ins), summarise(oos)
    for group in a:
        lines.append(_group_line(group, a[group], "in sample      "))
        lines.append(_group_line(group, b[group], "out of sample  "))
    lines += ["", "coefficient                  in the rules   fitted on all sources   range without one source   sources"]
    for rule, shipped in cv.shipped.items():
        sources = cv.informed.get(rule, set())
        folds = [f[rule] for f in cv.folds.values() if rule in f]
        fitted = f"{cv.fitted[rule]:.3g}" if len(sources) >= MIN_SOURCES else "default (too few sources)"
        spread = f"{min(folds):.3g}–{max(folds):.3g}" if folds else "—"
        lines.append(f"{describe(ruleset, rule) if ruleset else rule:28s} {shipped:<14.3g} {fitted:<23s} "
                     f"{spread:<26s} {len(sources)}")
    return "\n".join(lines)


ISSUE_AIMS = {"training": 0.07, "inference": 0.10, "memory": 0.01}     # median |error| out of sample, issue 24


def fit_orders(coefficients: list[Coefficient], count: int) -> list[list[Coefficient]]:
    """The coefficients in `count` orders: the file's first, then shuffles within each group (a seeded
    generator, the same orders every run). The fits are three coordinate-descent passes, and where
    they stop depends on the order the coefficients are taken in (docs/accuracy.md, tenth stop)."""
    orders = [list(coefficients)]
    generator = np.random.default_rng(24)
    while len(orders) < count:
        shuffled = []
        for group in dict.fromkeys(c.group for c in coefficients):
            mine = [c for c in coefficients if c.group == group]
            shuffled += [mine[i] for i in generator.permutation(len(mine))]
        orders.append(shuffled)
    return orders


def order_spread(cases: list[Case], ruleset, count: int) -> list[dict]:
    """Per fitting order, each group's out-of-sample summary and figures within its aim's reach
    (within 10% for serving, 7% for training, 1% for memory: issue 24's aims)."""
    out = []
    for order in fit_orders(load_coefficients(ruleset), count):
        _, oos = cv_tables(cross_validate(cases, ruleset, order))
        summary = summarise(oos)
        for group, s in summary.items():
            aim = ISSUE_AIMS.get(group)
            rows = oos[oos["group"] == group]
            s["within_aim"] = int((rows["error"].abs() <= aim).sum()) if aim else None
        out.append(summary)
    return out


def render_order_spread(spread: list[dict]) -> str:
    lines = ["", f"out of sample, by the order the fits take the coefficients in ({len(spread)} orders; the first "
             "is validation/fitting.yaml's):"]
    for group in spread[0]:
        medians = [s[group]["median_abs_error"] for s in spread if group in s]
        within = [s[group]["within_aim"] for s in spread if group in s]
        each = ", ".join(f"{m:.2%}" + (f" ({w})" if w is not None else "") for m, w in zip(medians, within))
        lines.append(f"{group:9s} median |error| {each}; mean {float(np.mean(medians)):.2%}, "
                     f"{min(medians):.2%}–{max(medians):.2%}")
    return "\n".join(lines)


def check_limits(summary: dict, limits) -> list[str]:
    failures = []
    for kind, group, limit in limits:
        s = summary.get(group)
        if s is None:
            continue
        value = {"median": s["median_abs_error"], "worst": s["worst_error"], "factor": s["worst_factor"]}[kind]
        if value > limit:
            failures.append(f"{group} {kind} {value:.3f} exceeds {limit}")
    return failures


def band(table: pd.DataFrame, group: str) -> float:
    """The uncertainty band of a group's figures: the 80th percentile of how far off each estimate is
    as a ratio, |log(estimated / measured)|, as a factor less one, rounded up to 5%. A ratio, because a
    likely range is the estimate divided and multiplied by 1 + band: an estimate at a tenth of the
    measurement is as far off as one at ten times it, and the range never reaches zero."""
    ratios = np.abs(np.log1p(table[table["group"] == group]["error"].astype(float)))
    return math.ceil(round(math.expm1(float(ratios.quantile(0.8))) * 20, 6)) / 20


def memory_band(table: pd.DataFrame, cases, kind: str) -> float:
    """The band of the memory figures of one kind (engine/contract.py, MEMORY_KINDS): a pretraining step's
    activations, a fine-tuning step's adapters, 4-bit weights and loss, and a server's weights and KV cache each land
    their own distance off."""
    ids = {c.id for c in cases if memory_kind(c.intake.get("workload")) == kind}
    return band(table[table["case"].isin(ids)], "memory")


EVIDENCE_MIN_FIGURES = 4     # a band rests on at least this many figures
EVIDENCE_MIN_SOURCES = 2     # ... and is narrower than the wider evidence's only on at least this many sources
OUTSIDE_MARGIN = 0.10        # past all the evidence: the band of every figure, and this much more


# the inference_evidence table's columns: the model's kind (dense or mixture of experts) and the GPUs one replica
# spans, then the serving software, the GPU family and the weights' format kind
EVIDENCE_KEYS = ("model_kind", "replica_span", "serving_engine_used", "gpu_family", "weight_kind")
# the evidence a band is looked for in, nearest first: the model's shape and scale with the software, the GPU family
# and the weights' kind, then with fewer of them, then the software or the family alone
EVIDENCE_LEVELS = (EVIDENCE_KEYS, EVIDENCE_KEYS[:4], EVIDENCE_KEYS[:3], EVIDENCE_KEYS[:2] + ("gpu_family",),
                   ("serving_engine_used",), ("gpu_family",))


def evidence_keys(cases: list[Case], ruleset) -> dict[str, dict[str, str]]:
    """Each serving case's model kind, replica span, serving software, GPU family and weight format kind, as the
    bands are looked up by."""
    out = {}
    for case in cases:
        if case.group == "inference":
            got = evaluate(dict(case.intake), ruleset, only=list(EVIDENCE_KEYS)).values
            out[case.id] = {k: str(got[k]) for k in EVIDENCE_KEYS}
    return out


def first_token_bands(oos: pd.DataFrame, keys: dict[str, dict[str, str]]) -> list[dict]:
    """The bands of the first-token times alone, by the same nearest evidence (`evidence_bands`). Under load they land
    further off than throughputs and per-token times do (docs/holdout.md, closed-loop first tokens), which the serving
    band mixes in; a quote widens its first-token range to this band, never narrows it. Outside every row: every
    first-token figure's band (the serving band's own outside row already holds the widest)."""
    rows = oos[(oos["group"] == "inference") & oos["quantity"].str.startswith("ttft")]
    out = evidence_bands(rows, keys)
    out[-1]["band"] = band(rows, "inference")
    return out


def out_of_sample_errors(cv: CrossValidation, held_out: list[Case], ruleset) -> pd.DataFrame:
    """Every figure estimated without its source having informed the rules: the published runs' cross-validated
    estimates (each with its source left out of the fit), and the held-out runs' (validation/holdout.yaml), which
    no fit and no model choice saw before they were first measured. What the bands are made of: a held-out set
    marked `use: score` is measured against its first measurement but is not among them, as an input it rests on
    was assumed (validation/holdout.yaml says which and why), nor is a held-out run past the server's
    capacity (`past_capacity`; no published run is)."""
    _, oos = cv_tables(cv)
    rows = pd.concat([oos, compare(band_cases(held_out), ruleset)[list(oos.columns)]], ignore_index=True)
    return rows[~rows["case"].isin(past_capacity(held_out, ruleset))].reset_index(drop=True)


def past_capacity(cases: list[Case], ruleset) -> set[str]:
    """The runs sent requests faster than the rules find the server can answer them (`meets_throughput`): they
    measured a queue that grew for as long as the run lasted (first tokens of seconds to tens of seconds), not the
    server, and a quote past its capacity says the rate is not met rather than a time with a band. Scored like any
    other figure, they are left out of what the bands rest on."""
    rated = [c for c in cases if c.group == "inference" and c.intake.get("requests_per_second")]
    return {c.id for c in rated
            if evaluate(planned_values(c, ruleset), ruleset, only=["meets_throughput"]).values.get("meets_throughput")
            is False}


def evidence_bands(oos: pd.DataFrame, keys: dict[str, dict[str, str]]) -> list[dict]:
    """Serving bands by the nearest evidence, most specific first (EVIDENCE_LEVELS): dense or mixture-of-experts
    model on one GPU or several, with the serving software, GPU family and weight format kind (16-bit or
    quantised), then with fewer of them, then the software alone, then the family alone, wherever at least
    EVIDENCE_MIN_FIGURES figures measured it; each the 80th percentile of how far their out-of-sample estimates
    land, as a ratio either way, rounded up to 5% (`band`). Past all of them: the widest of those, and at least
    every figure's band plus OUTSIDE_MARGIN.
    A row resting on one source is never narrower than the evidence the lookup would fall to without it,
    or than every figure's band where that depends on the family asked about (`widened_by`): one source
    measures one offset, not how far the next source's lands."""
    rows = oos[oos["group"] == "inference"].copy()
    for column in EVIDENCE_KEYS:
        rows[column] = rows["case"].map(lambda c, col=column: keys[c][col])
    out = []
    for columns in map(list, EVIDENCE_LEVELS):
        for key, group in rows.groupby(columns):
            if len(group) >= EVIDENCE_MIN_FIGURES:
                out.append({"match": dict(zip(columns, key)), "band": band(group, "inference"),
                            "figures": int(len(group)), "sources": int(group["source"].nunique())})
    every = band(rows, "inference")
    for i, row in enumerate(out):
        if row["sources"] < EVIDENCE_MIN_SOURCES:
            # the next row the lookup would take for this row's configurations (its keys a subset of these);
            # where that depends on the GPU family asked about (a software-alone row), every figure's band
            wider = next((r for r in out[i + 1:] if r["sources"] >= EVIDENCE_MIN_SOURCES
                          and r["match"].items() <= row["match"].items()), {"match": {}, "band": every})
            if wider["band"] > row["band"]:
                row["band"], row["widened_by"] = wider["band"], wider["match"]
    widest = max([every + OUTSIDE_MARGIN] + [r["band"] for r in out])
    out.append({"match": {}, "band": round(widest, 6), "figures": 0, "sources": int(rows["source"].nunique())})
    return out


def _columns_of(values: list[dict], ruleset, wanted: list[str]) -> dict[str, np.ndarray]:
    """The `wanted` rules for each of several planned intakes, evaluated once as columns (one value per intake)."""
    return evaluate_columns({}, ruleset, stack_columns(values), len(values), only=wanted) if values else {}


def calibrated_held_out(cases: list[Case], ruleset) -> pd.DataFrame:
    """The held-out serving runs quoted as a customer's would be after one measurement: in each source, the first
    figure of time per token or throughput of each GPU, serving software and precision calibrates the others
    (`sizing calibrate`'s own fit, applied where it applies). One row per figure of the others: its error
    uncalibrated and calibrated, its distance from the measured configuration (e-folds), the band the quote gives it,
    whether the calibrated figure lands inside that band (as a ratio either way) and whether the calibration applied.
    What the calibrated band's slope (rules/uncertainty.yaml) and the distance over which the correction fades
    (rules/calibration.yaml) are measured on."""
    speed = ("tpot_ms", "output_tokens_per_s")
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        if case.group == "inference":
            key = (case.source["id"], case.intake.get("gpu"), case.intake.get("serving_engine"),
                   case.intake.get("precision"))
            groups.setdefault(key, []).append(case)
    others = []                     # (case, its planned values, the calibration's values for it, applied)
    for members in groups.values():
        anchor = next((c for c in members if any(q in c.measured for q in speed)), None)
        if anchor is None or len(members) < 2:
            continue
        values = planned_values(anchor, ruleset)
        got = {q: float(anchor.comparable(q, float(v))) for q, v in anchor.measured.items()
               if q in speed + ("ttft_ms",)}
        measurement = customer.Measurement("held-out", got, {})
        try:
            factors, _ = customer.fit(values, measurement, ruleset)
        except SizingError:         # the rules cannot reach it with a calibration's factors: no calibration
            continue
        calibration = customer.Calibration(*customer.describe(values, measurement, ruleset), factors)
        for case in members:
            if case is not anchor:
                base = planned_values(case, ruleset)
                extra = customer.calibration_values(base, calibration, ruleset)
                others.append((case, base, extra, "calibration_elsewhere" not in extra))
    # every member at once, uncalibrated and calibrated: the rules run as columns (two passes, not two per case)
    wanted = sorted({q for case, *_ in others for q in case.measured}
                    | {"first_token_band", "inference_band", "calibration_distance"})
    plain = _columns_of([base for _, base, _, _ in others], ruleset, wanted)
    calibrated = _columns_of([{**base, **extra} if applied else base for _, base, extra, applied in others],
                             ruleset, wanted)
    rows = []
    for i, (case, _, _, applied) in enumerate(others):
        for quantity, measured in case.measured.items():
            measured = float(case.comparable(quantity, float(measured)))
            est, cal = float(plain[quantity][i]), float(calibrated[quantity][i])
            band = calibrated["first_token_band" if quantity.startswith("ttft") else "inference_band"][i]
            rows.append({"case": case.id, "source": case.source["id"], "quantity": quantity, "applied": applied,
                         "error": est / measured - 1, "calibrated_error": cal / measured - 1,
                         "distance": float(calibrated["calibration_distance"][i] or 0) if applied else math.nan,
                         "band": float(band),
                         "inside": abs(math.log(cal / measured)) <= math.log1p(float(band))})
    return pd.DataFrame(rows)
