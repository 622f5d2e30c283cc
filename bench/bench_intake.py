"""How long reading + validating one intake workbook takes, next to openpyxl's bare load of the same file.

Run: .venv/bin/python bench/bench_intake.py [WORKBOOK] [-n N]
All timings are warm and taken in one run, interleaved round by round, so machine noise hits
every row alike; the median of N rounds is printed.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openpyxl import load_workbook  # noqa: E402

from engine.calc.catalogs import load_catalogs  # noqa: E402
from engine.intake.model import Intake
from engine.intake.read import read  # noqa: E402
from engine.intake.validate import validate  # noqa: E402
from engine.paths import SAMPLES_DIR  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workbook", nargs="?", type=Path, default=SAMPLES_DIR / "rtx4090-lora-7b.zh-TW.xlsx")
    parser.add_argument("-n", type=int, default=50, help="rounds (the median is reported)")
    args = parser.parse_args(argv)
    catalogs = load_catalogs()
    data = args.workbook.read_bytes()
    typed = read(args.workbook)

    def bare():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_workbook(io.BytesIO(data))

    def validate_only():
        validate(Intake(values=dict(typed.raw), sources=dict(typed.sources), raw=dict(typed.raw),
                        kind="xlsx", language=typed.language), catalogs)

    def read_and_validate():
        assert validate(read(args.workbook), catalogs) == []

    actions = {"openpyxl load_workbook (bare)": bare, "read_workbook": lambda: read(args.workbook),
               "validate": validate_only, "read_workbook + validate": read_and_validate}
    times = {name: [] for name in actions}
    for action in actions.values():
        action()                                   # warm: imports, form, schema and look-up caches
    for _ in range(args.n):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            times[name].append(time.perf_counter() - started)
    median = {name: statistics.median(t) * 1000 for name, t in times.items()}
    print(f"{args.workbook.name} ({len(data) / 1000:.1f} KB), median of {args.n} warm rounds")
    for name, ms in median.items():
        print(f"  {name:32s} {ms:8.2f} ms")
    ratio = median["read_workbook + validate"] / median["openpyxl load_workbook (bare)"]
    print(f"  read + validate / bare load      {ratio:8.2f} x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
