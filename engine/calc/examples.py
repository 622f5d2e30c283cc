"""Run the `examples:` written inside rule files: given some values, expect others."""

from __future__ import annotations

import math

from engine.calc.evaluate import evaluate
from engine.problems import SizingError


def run_examples(ruleset) -> tuple[list[str], int]:
    """Every example of every rule file; returns (failure lines as file:line: message, count)."""
    failures = []
    for ex in ruleset.examples:
        try:
            results = evaluate(ex.given, ruleset, only=list(ex.expect))
        except SizingError as e:
            failures.extend(f"{ex.where}: example `{ex.name}`: {p}" for p in e.problems)
            continue
        for name, want in ex.expect.items():
            got = results.values.get(name)
            if not _close(got, want, ex.tolerance):
                failures.append(f"{ex.where}: example `{ex.name}`: expected {name} = {want!r}, got {got!r}")
    return failures, len(ruleset.examples)


def _close(got, want, tolerance: float) -> bool:
    if isinstance(want, bool) or isinstance(want, str) or got is None:
        return got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return math.isclose(float(got), float(want), rel_tol=tolerance, abs_tol=1e-12)
    return got == want
