"""Quote every published case and compare the estimates with what was measured (`sizing validate`)."""

from __future__ import annotations

import math

import pandas as pd

from engine.calc.evaluate import evaluate
from engine.calc.evidence import GROUPS, Case
from engine.intake.model import Intake
from engine.job import validate_intake
from engine.problems import Problem, SizingError


def estimate(case: Case, ruleset) -> dict:
    """Quote one case through the same validation and rules as any intake."""
    values = {"customer": f"validation {case.id}", **case.intake}
    intake = Intake(values=values, sources={k: f"{case.where} {k}" for k in values}, kind="yaml")
    problems = validate_intake(intake, ruleset)
    if problems:
        raise SizingError([Problem(p.code, f"{case.id}: {p.where}", p.message) for p in problems])
    return evaluate(intake, ruleset).values


def compare(cases: list[Case], ruleset) -> pd.DataFrame:
    rows = []
    for case in cases:
        results = estimate(case, ruleset)
        for quantity, measured in case.measured.items():
            got = results.get(quantity)
            est = float(got) if isinstance(got, (int, float)) and not isinstance(got, bool) else math.nan
            rows.append({"case": case.id, "group": case.group, "use": case.use, "quantity": quantity,
                         "measured": float(measured), "estimated": est,
                         "error": est / float(measured) - 1 if est == est else math.nan,
                         "source": case.source.get("title", "")})
    return pd.DataFrame(rows)


def summarise(table: pd.DataFrame) -> dict:
    """Per group (and per use): median absolute error, share within ±25%, worst case, worst factor."""
    out = {}
    for group in GROUPS:
        rows = table[table["group"] == group]
        if rows.empty:
            continue
        out[group] = _stats(rows)
        for use in ("choose", "check"):
            part = rows[rows["use"] == use]
            if not part.empty:
                out[group][use] = _stats(part)
    return out


def _stats(rows: pd.DataFrame) -> dict:
    err = rows["error"].abs()
    factor = (rows["estimated"] / rows["measured"]).map(lambda r: max(r, 1 / r) if r > 0 else math.inf)
    worst = rows.loc[err.idxmax()] if err.notna().any() else rows.iloc[0]
    return {"cases": int(len(rows)), "median_abs_error": float(err.median()),
            "within_25pct": float((err <= 0.25).mean()), "worst_case": str(worst["case"]),
            "worst_quantity": str(worst["quantity"]), "worst_error": float(err.max()),
            "worst_factor": float(factor.max())}


def render_text(table: pd.DataFrame, summary: dict) -> str:
    shown = table.assign(error=table["error"].map(lambda e: f"{e:+.1%}"))
    with pd.option_context("display.width", 200, "display.max_colwidth", 46,
                           "display.float_format", "{:,.4g}".format):
        lines = [shown[["case", "quantity", "measured", "estimated", "error", "use"]].to_string(index=False), ""]
    for group, s in summary.items():
        lines.append(f"{group:9s}  median |error| {s['median_abs_error']:.1%}  within ±25% {s['within_25pct']:.0%}  "
                     f"worst {s['worst_case']} ({s['worst_quantity']}) {s['worst_error']:.1%}, "
                     f"factor {s['worst_factor']:.2f}  [{s['cases']} figures]")
        for use, label in (("choose", "chosen from"), ("check", "held out")):
            if use in s:
                u = s[use]
                lines.append(f"           {label:11s} median {u['median_abs_error']:.1%}, worst {u['worst_error']:.1%} "
                             f"[{u['cases']}]")
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
    """The uncertainty band of a group: 80th percentile of |error|, rounded up to 5%."""
    errors = table[table["group"] == group]["error"].abs()
    return math.ceil(round(float(errors.quantile(0.8)) * 20, 6)) / 20


