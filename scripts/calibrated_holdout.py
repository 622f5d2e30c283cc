"""How a calibrated quote does on runs no fit saw: each held-out source's first figure calibrates the rest.

Usage: .venv/bin/python scripts/calibrated_holdout.py

Prints the median error of the held-out serving figures before and after calibrating on one figure of the same
source, GPU, serving software and precision, and how many land inside the calibrated band by distance from the
measured configuration (the slope of rules/uncertainty.yaml's calibration_band_slope is measured on this).
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.calc.evidence import HELD_OUT_CASES, load_cases  # noqa: E402
from engine.calc.ruleset import current_ruleset  # noqa: E402
from engine.validation import calibrated_held_out  # noqa: E402


def main() -> None:
    table = calibrated_held_out(load_cases(HELD_OUT_CASES), current_ruleset())
    applied = table[table["applied"]]
    speed = applied[~applied["quantity"].str.startswith("ttft")]
    print(f"{len(table)} held-out serving figures beside a calibrating one; calibration applied to {len(applied)}")
    print(f"  median |error|: {table['error'].abs().median():.1%} uncalibrated, "
          f"{table['calibrated_error'].abs().median():.1%} calibrated")
    print(f"time per token and throughput: {speed['inside'].mean():.0%} of {len(speed)} inside the calibrated band")
    for low, high in ((0, 0.5), (0.5, 1), (1, 2), (2, 4), (4, math.inf)):
        near = speed[(speed["distance"] >= low) & (speed["distance"] < high)]
        if len(near):
            print(f"  {low:g}-{high:g} e-folds away: {len(near):4d} figures, median |error| "
                  f"{near['error'].abs().median():.1%} -> {near['calibrated_error'].abs().median():.1%}, "
                  f"{near['inside'].mean():.0%} inside their band")


if __name__ == "__main__":
    main()
