"""Benchmark: the leave-one-source-out folds of `sizing validate --cv` fitted in step against one fit each.

Usage: .venv/bin/python bench/bench_cv.py [--sources N]

On the inference figures of the N sources with the most of them, every fold (one source left out)
is fitted twice in the same run: by fit_folds, as --cv does, and by one fit() per fold, as it did
before. The two must choose the same values (the bench stops if not). The last line is
`speedup: X` (one fit each ÷ in step; higher is better).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.calc.evidence import DEFAULT_CASES, load_cases  # noqa: E402
from engine.calc.fitting import fit, fit_folds, informed_by, load_coefficients  # noqa: E402
from engine.calc.ruleset import current_ruleset  # noqa: E402
from engine.validation import leave_one_source_out, rows_of, shipped_coefficients  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=16, help="sources (folds) to fit")
    args = parser.parse_args(argv)
    ruleset = current_ruleset()
    cases = [c for c in load_cases(DEFAULT_CASES) if c.group == "inference"]
    chosen = {s for s, _ in Counter(c.source.get("id") for c in cases).most_common(args.sources)}
    rows = rows_of([c for c in cases if c.source.get("id") in chosen], ruleset)["inference"]
    coefficients = [c for c in load_coefficients(ruleset) if c.group == "inference"]
    shipped = shipped_coefficients(ruleset, load_coefficients(ruleset))
    informed = informed_by(rows, ruleset, coefficients, shipped)
    usable = [c for c in coefficients if informed[c.rule]]
    _, plan = leave_one_source_out(rows, usable, informed)

    start = time.perf_counter()
    each = [fit(rows.subset(keep), ruleset, fold, shipped) for keep, fold in plan]
    one_each = time.perf_counter() - start
    start = time.perf_counter()
    in_step = fit_folds(rows, ruleset, usable, shipped, plan)
    together = time.perf_counter() - start
    if in_step != each:
        print("fit_folds chose other values than one fit per fold", file=sys.stderr)
        return 1
    print(f"{len(plan)} folds, {len(rows)} figures, {len(usable)} coefficients")
    print(f"one fit per fold: {one_each:.1f} s; in step: {together:.1f} s (the same values)")
    print(f"speedup: {one_each / together:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
