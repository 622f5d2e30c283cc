"""Benchmark: the published runs quoted one case at a time vs compare()'s one pass over all of them, in one run.

Usage: .venv/bin/python bench/bench_compare.py [--repeat N]

What the publication gate (engine/authoring/gate.py), `sizing validate FILE` and `sizing rules diff` pay per rule
set: every published case planned and estimated. Both ways plan each case alone; the old one then evaluated each
case's rules on its own, compare() evaluates all cases as columns. The two must give the same figures (the bench
stops if not). The last line is `speedup: X` (one case at a time ÷ compare(); higher is better).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.calc.evidence import DEFAULT_CASES, load_cases  # noqa: E402
from engine.calc.ruleset import current_ruleset  # noqa: E402
from engine.validation import compare, estimate  # noqa: E402


def one_at_a_time(cases, ruleset) -> list[float]:
    """What compare() did before: each case quoted through evaluate() on its own."""
    out = []
    for case in cases:
        results = estimate(case, ruleset)
        for quantity in case.measured:
            got = results.get(quantity)
            out.append(float(got) if isinstance(got, (int, float)) and not isinstance(got, bool) else math.nan)
    return out


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each, interleaved")
    args = parser.parse_args(argv)
    ruleset = current_ruleset()
    cases = load_cases(DEFAULT_CASES)
    old_times, new_times = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        old = one_at_a_time(cases, ruleset)
        old_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        new = list(compare(cases, ruleset)["estimated"])
        new_times.append(time.perf_counter() - start)
        if not same(old, new):
            print("compare() gave other figures than quoting each case alone", file=sys.stderr)
            return 1
    old_s, new_s = statistics.median(old_times), statistics.median(new_times)
    print(f"{len(cases)} cases, {len(new)} figures")
    print(f"one case at a time: {old_s:.2f} s; compare(): {new_s:.2f} s (the same figures; medians of {args.repeat})")
    print(f"speedup: {old_s / new_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
