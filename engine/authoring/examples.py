"""Run the `examples:` written inside rule files: given some values, expect others."""

from __future__ import annotations

import math

from engine.calc.evaluate import evaluate
from engine.problems import SizingError

# Warnings whose code starts so mark a physical limit crossed (rules/sanity.yaml): an example
# that crosses one fails, whatever it expects, because the rules have gone wrong, not the hardware.
IMPOSSIBLE = "impossible_"


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
        for notice in evaluate(ex.given, ruleset).warnings:
            if notice.code.startswith(IMPOSSIBLE):
                failures.append(f"{ex.where}: example `{ex.name}`: past a physical limit ({notice.where}): "
                                f"{notice.text('en')}")
    return failures, len(ruleset.examples)


def _close(got, want, tolerance: float) -> bool:
    if isinstance(want, bool) or isinstance(want, str) or got is None:
        return got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return math.isclose(float(got), float(want), rel_tol=tolerance, abs_tol=1e-12)
    return got == want
