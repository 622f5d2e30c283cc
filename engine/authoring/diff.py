"""`sizing rules diff`: what an edit of the rules or catalogs moves, in the samples and the validation set."""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.calc.evaluate import friendly_number
from engine.calc.evidence import GROUPS, load_cases
from engine.job import quote_results, validate_intake
from engine.paths import PUBLISHED_CASES, RULES_DIR, SAMPLES_DIR
from engine.problems import Problem, SizingError
from engine.quote.view import KEY_FIGURES
from engine.validation import compare, summarise

HEADLINE = tuple(dict.fromkeys(("training_time_days", "gpu_hours", "cost_total", "ttft_ms", "tpot_ms",
                                "output_tokens_per_s", *KEY_FIGURES)))
SHOWN_CASES = 8          # validation figures listed one by one, the most moved first
# An alternative's figures shown when they move (the rest of its figures follow from these).
ALTERNATIVE_FIGURES = ("cost_total", "training_time_days", "output_tokens_per_s", "ttft_ms", "tpot_ms",
                       "memory_per_gpu_gb", "gpus_needed")


@dataclass
class Moved:
    """One figure before and after."""

    key: str
    before: Any
    after: Any
    unit: str = ""

    @property
    def change(self) -> float | None:
        if _number(self.before) and _number(self.after) and self.before:
            return self.after / self.before - 1
        return None


@dataclass
class SampleDiff:
    name: str
    headline: list[Moved] = field(default_factory=list)
    others: list[str] = field(default_factory=list)       # other results that moved (their names)
    warnings_added: list[str] = field(default_factory=list)
    warnings_gone: list[str] = field(default_factory=list)
    plan: list[Moved] = field(default_factory=list)        # the planner's choices that moved
    alternatives: list[str] = field(default_factory=list)  # what moved among the alternatives, in words
    problem: str = ""                                      # when one side could not quote it

    @property
    def unchanged(self) -> bool:
        return not (self.headline or self.others or self.warnings_added or self.warnings_gone or self.plan
                    or self.alternatives)


@dataclass
class GroupDiff:
    group: str
    before: float
    after: float
    moved: int
    figures: int


@dataclass
class Report:
    edits: list[str]
    samples: list[SampleDiff]
    groups: list[GroupDiff]
    cases: list[tuple[str, str, float, float, float]]      # case, quantity, measured, error before, after
    unquotable: dict[str, str] = field(default_factory=dict)  # case → why one version could not quote it


def export_git_ref(ref: str, dest: Path, home: Path | None = None) -> tuple[Path, Path]:
    """rules/ and catalogs/ as they are in a git commit, written under `dest` (the work tree is not touched)."""
    home = Path(home or RULES_DIR.parent)
    try:
        top = Path(_git(home, "rev-parse", "--show-toplevel").decode().strip())
        parts = [str(d.resolve().relative_to(top.resolve())) for d in (home / "rules", home / "catalogs")]
        archive = _git(top, "archive", "--format=tar", ref, "--", *parts)
    except (OSError, ValueError) as e:
        raise SizingError([Problem("diff.git", ref, f"cannot read `{ref}` from git ({e}); give a folder "
                                   "holding a copy of the rules instead: --against DIR.", fixer="rules")]) from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest / parts[0], dest / parts[1]


def _git(where: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", "-C", str(where), *args], capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise ValueError(proc.stderr.decode(errors="replace").strip().splitlines()[-1] if proc.stderr
                         else "git failed")
    return proc.stdout


def samples(directory: Path = SAMPLES_DIR) -> list[Path]:
    return sorted([*directory.glob("*.yaml"), *directory.glob("*.xlsx")])


def diff(before, after, sample_paths: list[Path], cases_path: Path = PUBLISHED_CASES) -> Report:
    """Quote every sample and validation case with both rule sets and say what moved."""
    report = Report(edits(before, after), [], [], [])
    for path in sample_paths:
        report.samples.append(_sample(path, before, after))
    (old, old_missing), (new, new_missing) = compared_cases(before, cases_path), compared_cases(after, cases_path)
    # a case only one version can quote (it names a GPU or a field the other lacks) is compared by neither
    report.unquotable = {**new_missing, **old_missing}
    old, new = (t[~t["case"].isin(list(report.unquotable))].reset_index(drop=True) for t in (old, new))
    old_summary, new_summary = summarise(old), summarise(new)
    for group in GROUPS:
        if group in old_summary and group in new_summary:
            rows_old, rows_new = old[old["group"] == group], new[new["group"] == group]
            moved = int((~_close(rows_old["estimated"].values, rows_new["estimated"].values)).sum())
            report.groups.append(GroupDiff(group, old_summary[group]["median_abs_error"],
                                           new_summary[group]["median_abs_error"], moved, len(rows_old)))
    for (_, o), (_, n) in zip(old.iterrows(), new.iterrows()):
        if not _close([o["estimated"]], [n["estimated"]]).all():
            report.cases.append((o["case"], o["quantity"], o["measured"], o["error"], n["error"]))
    report.cases.sort(key=lambda c: -abs(_finite(c[4]) - _finite(c[3])))
    return report


def compared_cases(ruleset, cases_path: Path):
    """(every figure beside its estimate, the cases this rule set cannot quote) — once per rule set and file a process."""
    return _compared(ruleset.version, str(cases_path), _stamp(cases_path), _Keep(ruleset))


@dataclass(frozen=True)
class _Keep:
    """Carries the rule set into a cached call without being part of its key (the version is)."""

    ruleset: Any = field(compare=False, hash=False)


@functools.lru_cache(maxsize=8)
def _compared(version: str, path: str, stamp: tuple, keep: _Keep):
    # The unchanged side of a diff is the same rule set run after run: quote it once per process.
    missing: dict[str, str] = {}
    return compare(load_cases(Path(path)), keep.ruleset, missing), missing


def _stamp(path: Path) -> tuple:
    st = Path(path).stat()
    return st.st_mtime_ns, st.st_size


def _close(a, b):
    import numpy as np
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.isclose(a, b, rtol=1e-9, atol=0) | (np.isnan(a) & np.isnan(b))


def _finite(x: float) -> float:
    return x if isinstance(x, float) and math.isfinite(x) else 0.0


def _sample(path: Path, before, after) -> SampleDiff:
    out = SampleDiff(path.name)
    try:
        old, new = _quoted(path, before), _quoted(path, after)
    except SizingError as e:
        out.problem = "; ".join(str(p) for p in e.problems[:3])
        return out
    (old_values, old_warnings, old_plan, old_options), (new_values, new_warnings, new_plan, new_options) = old, new
    currency = new_values.get("cost_currency") or "USD"
    units = {name: currency if rule.unit == "currency" else rule.unit for name, rule in after.rules.items()}
    for key in dict.fromkeys([*old_values, *new_values]):
        a, b = old_values.get(key), new_values.get(key)
        if _same(a, b):
            continue
        if key in HEADLINE:
            out.headline.append(Moved(key, a, b, units.get(key, "")))
        else:
            out.others.append(key)
    out.headline.sort(key=lambda m: HEADLINE.index(m.key))
    out.warnings_added = sorted(set(new_warnings) - set(old_warnings))
    out.warnings_gone = sorted(set(old_warnings) - set(new_warnings))
    out.plan = [Moved(key, old_plan.get(key), new_plan.get(key)) for key in dict.fromkeys([*old_plan, *new_plan])
                if not _same(old_plan.get(key), new_plan.get(key))]
    out.alternatives = _alternatives(old_options, new_options, after)
    return out


def _alternatives(old: list[tuple], new: list[tuple], ruleset) -> list[str]:
    """What moved among a quote's alternatives: added, gone, reordered, and figures of those on both sides."""
    def name(key: tuple) -> str:
        gpu, count, precision = key
        return f"{count} × {ruleset.catalogs.name_of(gpu) or gpu} {ruleset.catalogs.name_of(precision) or precision}"
    before, after = dict(old), dict(new)
    def figure(figures: dict) -> str:
        shown = next((f for f in ALTERNATIVE_FIGURES if _number(figures.get(f))), None)
        return f" ({shown} {_show(figures[shown])})" if shown else ""
    lines = [f"alternative added: {name(k)}{figure(after[k])}" for k in after if k not in before]
    lines += [f"alternative gone: {name(k)}" for k in before if k not in after]
    kept_before, kept_after = [k for k in before if k in after], [k for k in after if k in before]
    if kept_before != kept_after:
        lines.append("alternatives reordered: " + ", ".join(name(k) for k in kept_after))
    for key in kept_after:
        for figure in ALTERNATIVE_FIGURES:
            a, b = before[key].get(figure), after[key].get(figure)
            if not _same(a, b):
                change = f" ({b / a - 1:+.1%})" if _number(a) and _number(b) and a else ""
                lines.append(f"alternative {name(key)}: {figure} {_show(a)} → {_show(b)}{change}")
    return lines


def _quoted(path: Path, ruleset) -> tuple[dict, list[str], dict, list[tuple]]:
    return _quote_cached(str(path), _stamp(path), ruleset.version, _Keep(ruleset))


@functools.lru_cache(maxsize=64)
def _quote_cached(path: str, stamp: tuple, version: str, keep: _Keep) -> tuple[dict, list[str], dict, list[tuple]]:
    intake = _read(path, stamp)
    intake = dataclasses.replace(intake, values=dict(intake.values), sources=dict(intake.sources),
                                 raw=dict(intake.raw), book=None)     # each side validates its own copy
    problems = validate_intake(intake, keep.ruleset)
    if problems:
        raise SizingError(problems)
    results = quote_results(intake, keep.ruleset)      # as a quote has them: the planner's layout, the alternatives
    options = [((o.gpu, o.gpu_count, o.precision), o.figures) for o in results.alternatives or []]
    plan = dict(results.plan.chosen) if results.plan is not None else {}
    return results.values, [n.code for n in results.warnings], plan, options


@functools.lru_cache(maxsize=32)
def _read(path: str, stamp: tuple):
    from engine.intake.read import read
    intake = read(Path(path))
    intake.book = None
    return intake


def _same(a: Any, b: Any) -> bool:
    if _number(a) and _number(b):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0) or (math.isnan(a) and math.isnan(b))
    return a == b


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def edits(before, after) -> list[str]:
    """What differs in the files themselves: rules, tables and catalog fields, each with its file:line."""
    out = []
    for name in sorted(set(before.rules) | set(after.rules), key=lambda n: (after.rules.get(n) or before.rules[n]).where):
        old, new = before.rules.get(name), after.rules.get(name)
        if old is None:
            out.append(f"{new.where}: rule `{name}` added: {new.formula.text}")
        elif new is None:
            out.append(f"{old.where}: rule `{name}` removed")
        else:
            for part, a, b in (("formula", old.formula.text, new.formula.text),
                               ("when", old.when.text if old.when else "", new.when.text if new.when else ""),
                               ("unit", old.unit, new.unit)):
                if a != b:
                    a, b = _changed_part(a, b)
                    out.append(f"{new.formula_where or new.where}: rule `{name}` {part}: {a or '(none)'} → {b or '(none)'}")
    for name in sorted(set(before.tables) | set(after.tables)):
        old, new = before.tables.get(name), after.tables.get(name)
        if old is None or new is None:
            out.append(f"{(new or old).where}: table `{name}` {'added' if old is None else 'removed'}")
            continue
        for index, row in enumerate(new.rows):
            prior = old.rows[index] if index < len(old.rows) else None
            if prior is None or (prior.match, prior.value) != (row.match, row.value):
                was = f"{prior.value:g} → " if prior is not None and prior.match == row.match else ""
                out.append(f"{row.where}: table `{name}` row {row.case()}: {was}{row.value:g}")
    for catalog in ("gpus", "models", "precisions", "optimizers"):
        old_table, new_table = before.catalogs.table(catalog), after.catalogs.table(catalog)
        for eid in dict.fromkeys([*old_table, *new_table]):
            a, b = old_table.get(eid), new_table.get(eid)
            where = (after.catalogs.where if b is not None else before.catalogs.where).get((catalog, eid), "")
            if a is None or b is None:
                out.append(f"{where}: {catalog} `{eid}` {'added' if a is None else 'removed'}")
                continue
            flat_a, flat_b = _flat(a), _flat(b)
            for path in dict.fromkeys([*flat_a, *flat_b]):
                if flat_a.get(path) != flat_b.get(path) and path not in ("notes", "source"):
                    at = after.catalogs.field_where(catalog, eid, path)
                    out.append(f"{at}: {catalog} `{eid}` {path}: {_show(flat_a.get(path))} → {_show(flat_b.get(path))}")
    return out


def _changed_part(a: str, b: str, context: int = 18) -> tuple[str, str]:
    """Only the part of two long texts that differs, with a little on either side: …"edge"], 0.40, if(…"""
    if len(a) + len(b) < 100:
        return a, b
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    while start > 0 and (a[start - 1].isalnum() or a[start - 1] in "._"):
        start -= 1                       # whole numbers and names, not 0.4|0 → 0.4|5
    while end > 0 and (a[len(a) - end].isalnum() or a[len(a) - end] in "._"):
        end -= 1
    lo = max(start - context, 0)

    def cut(text: str) -> str:
        hi = min(len(text) - end + context, len(text))
        return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")
    return cut(a), cut(b)


def _flat(entry: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in entry.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, path + "."))
        else:
            out[path] = value
    return out


def _show(value: Any) -> str:
    if value is None:
        return "(blank)"
    if _number(value):
        return friendly_number(float(value))
    return str(value)


def render(report: Report, before_label: str, after_label: str) -> str:
    """The report as text: edits, samples, validation."""
    lines = [f"Comparing {after_label} with {before_label}.", ""]
    lines.append("What the files say differently:" if report.edits else "The rules and catalogs say the same.")
    lines += [f"  {e}" for e in report.edits]
    lines += ["", "Samples — headline figures, the planner's layout and the alternatives, before → after:"]
    width = max([len(m.key) for s in report.samples for m in s.headline] or [10])
    for s in report.samples:
        if s.problem:
            lines.append(f"  {s.name}: not quoted with one of the versions: {s.problem}")
            continue
        if s.unchanged:
            lines.append(f"  {s.name}: unchanged")
            continue
        lines.append(f"  {s.name}:")
        for m in s.headline:
            change = f"  ({m.change:+.1%})" if m.change is not None else ""
            unit = f" {m.unit}" if m.unit and m.unit != "fraction" else ""
            lines.append(f"    {m.key:<{width}}  {_show(m.before)} → {_show(m.after)}{unit}{change}")
        if s.others:
            shown = ", ".join(s.others[:6]) + (f" and {len(s.others) - 6} more" if len(s.others) > 6 else "")
            lines.append(f"    {len(s.others)} other result{'s' * (len(s.others) != 1)} moved: {shown}")
        for m in s.plan:
            lines.append(f"    layout {m.key}: {_show(m.before)} → {_show(m.after)}")
        lines += [f"    {line}" for line in s.alternatives]
        for code in s.warnings_added:
            lines.append(f"    new warning: {code}")
        for code in s.warnings_gone:
            lines.append(f"    warning gone: {code}")
    lines += ["", "Validation (validation/published.yaml) — median |error| per group, before → after:"]
    for g in report.groups:
        moved = f"{g.moved} of {g.figures} figures moved" if g.moved else "no figure moved"
        lines.append(f"  {g.group:<10} {g.before:.1%} → {g.after:.1%}  ({moved})")
    for case, quantity, measured, old, new in report.cases[:SHOWN_CASES]:
        lines.append(f"    {case} {quantity}: error {old:+.1%} → {new:+.1%} (measured {_show(measured)})")
    if len(report.cases) > SHOWN_CASES:
        lines.append(f"    … and {len(report.cases) - SHOWN_CASES} more figures")
    if report.unquotable:
        first, why = next(iter(report.unquotable.items()))
        lines.append(f"  {len(report.unquotable)} case{'s' * (len(report.unquotable) != 1)} left out: one of the "
                     f"versions cannot quote {'them' if len(report.unquotable) > 1 else 'it'} "
                     f"(e.g. {first}: {why})")
    return "\n".join(lines)
