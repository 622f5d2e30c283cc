"""`sizing validate`: quote every published case and compare the estimates with what was measured."""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from engine.paths import HOME
from engine.problems import Problem, SizingError

DEFAULT_CASES = HOME / "validation" / "published.yaml"
GROUPS = ("training", "inference", "memory")


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    use: str                  # "choose" (coefficients were chosen from it) or "check" (held out)
    intake: dict
    measured: dict
    source: dict
    where: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT_CASES,
                        help="cases file (default validation/published.yaml)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--max-median-error", action="append", default=[], metavar="GROUP=FRACTION",
                        help="fail if a group's median absolute error exceeds this, e.g. training=0.10")
    parser.add_argument("--max-worst-error", action="append", default=[], metavar="GROUP=FRACTION",
                        help="fail if any case of the group is further off than this, e.g. memory=0.25")
    parser.add_argument("--max-worst-factor", action="append", default=[], metavar="GROUP=FACTOR",
                        help="fail if any case is off by more than this factor either way, e.g. inference=1.6")


def run(args) -> int:
    from engine.rules import current_ruleset
    try:
        table = compare(load_cases(args.file), current_ruleset())
        limits = _limits(args)
    except SizingError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    summary = summarise(table)
    failures = check_limits(summary, limits)
    if args.json:
        print(json.dumps({"cases": table.to_dict("records"), "groups": summary, "failures": failures},
                         indent=2, default=float))
    else:
        print(render_text(table, summary))
        for f in failures:
            print(f"FAIL: {f}")
    return 1 if failures else 0


def load_cases(path: Path) -> list[Case]:
    from engine.yamlfile import line_of, load_yaml_file, plain
    doc = load_yaml_file(path, path.name)
    items = doc.get("cases") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise SizingError([Problem("cases.shape", f"{path.name}:1", "expected `cases:` with a list of cases.",
                                   fixer="rules")])
    cases, problems = [], []
    for index, item in enumerate(items):
        where = f"{path.name}:{line_of(items, index)}"
        if not isinstance(item, dict) or not all(k in item for k in ("id", "group", "intake", "measured")):
            problems.append(Problem("cases.shape", where, "a case needs id, group, intake and measured.",
                                    fixer="rules"))
            continue
        if item["group"] not in GROUPS:
            problems.append(Problem("cases.group", where, f"group must be one of {', '.join(GROUPS)}.",
                                    fixer="rules"))
            continue
        cases.append(Case(str(item["id"]), item["group"], str(item.get("use") or "check"),
                          plain(item["intake"]), plain(item["measured"]), plain(item.get("source") or {}), where))
    if problems:
        raise SizingError(problems)
    return cases


def estimate(case: Case, ruleset) -> dict:
    """Quote one case through the same validation and rules as any intake."""
    from engine.evaluate import evaluate
    from engine.intake import Intake
    values = {"customer": f"validation {case.id}", **case.intake}
    intake = Intake(values=values, sources={k: f"{case.where} {k}" for k in values}, kind="yaml")
    try:
        from engine.validate import validate
        problems = validate(intake, ruleset.catalogs)
    except ImportError:
        problems = []
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


def _limits(args) -> list[tuple[str, str, float]]:
    out, problems = [], []
    for kind, items in (("median", args.max_median_error), ("worst", args.max_worst_error),
                        ("factor", args.max_worst_factor)):
        for item in items:
            group, _, value = item.partition("=")
            try:
                out.append((kind, group.strip(), float(value)))
            except ValueError:
                problems.append(Problem("validate.limit", item, "write limits as GROUP=NUMBER, e.g. training=0.10."))
            if group.strip() not in GROUPS:
                problems.append(Problem("validate.limit", item, f"group must be one of {', '.join(GROUPS)}."))
    if problems:
        raise SizingError(problems)
    return out


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


def checked_against(group: str, path: Path = DEFAULT_CASES) -> list[dict]:
    """The published runs a group's estimates were checked against: [{id, title, url}]."""
    try:
        cases = _cases_cached(Path(path), Path(path).stat().st_mtime_ns)
    except (SizingError, OSError):
        return []
    return [{"id": c.id, "title": c.source.get("title", ""), "url": c.source.get("url", "")}
            for c in cases if c.group == group]


@functools.lru_cache(maxsize=4)
def _cases_cached(path: Path, mtime_ns: int) -> tuple[Case, ...]:
    """Every quote names its evidence; parse the cases file once per version of it."""
    return tuple(load_cases(path))
