"""Time one whole quote (read → validate → evaluate → xlsx, html, json, audit) against openpyxl's load + save floor.

Usage: .venv/bin/python bench/bench_quote.py [INTAKE.xlsx] [--runs N]

Both are measured in the same warm process, interleaved so that a busy machine slows
them alike; the medians and their ratio are printed (aim, issue 12: the quote within 2× the floor).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openpyxl  # noqa: E402

from engine.calc.ruleset import current_ruleset  # noqa: E402
from engine.job import run_job  # noqa: E402
from engine.paths import SAMPLES_DIR  # noqa: E402
from engine.quote.audit import audit_bytes  # noqa: E402
from engine.quote.workbook import workbook_bytes  # noqa: E402

DEFAULT = SAMPLES_DIR / "llama-70b-online-8xh100.xlsx"


def floor(path: Path) -> None:
    """What openpyxl alone needs to open the intake and write it back."""
    openpyxl.load_workbook(path).save(io.BytesIO())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("intake", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)

    ruleset = current_ruleset()
    with tempfile.TemporaryDirectory() as out:
        job = run_job(args.intake, Path(out), ruleset=ruleset)      # warm: imports, caches
        if not job.ok:
            print(f"{args.intake}: not quoted ({job.status}): "
                  + "; ".join(str(p) for p in job.problems), file=sys.stderr)
            return 1
        floor(args.intake)
        quote_times, floor_times, book_times, audit_times = [], [], [], []
        for _ in range(args.runs):
            started = time.perf_counter()
            run_job(args.intake, Path(out), ruleset=ruleset)
            quote_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            floor(args.intake)
            floor_times.append(time.perf_counter() - started)
            # the customer's workbook (openpyxl: our sheets in a new workbook, saved) and the
            # salesperson's audit workbook (XlsxWriter), each from the first quote's view again
            started = time.perf_counter()
            workbook_bytes(job.quote)
            book_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            audit_bytes(job.quote)
            audit_times.append(time.perf_counter() - started)

    quote_ms = statistics.median(quote_times) * 1000
    floor_ms = statistics.median(floor_times) * 1000
    book_ms = statistics.median(book_times) * 1000
    audit_ms = statistics.median(audit_times) * 1000
    print(f"intake: {args.intake.name} ({args.runs} runs each, medians)")
    print(f"whole quote (read, validate, evaluate, xlsx + html + json + audit): {quote_ms:7.1f} ms")
    print(f"openpyxl alone (load + save the intake):                           {floor_ms:7.1f} ms")
    print(f"  of which the customer's workbook (openpyxl: our sheets, save): {book_ms:7.1f} ms"
          f" = {book_ms / floor_ms:.2f}x the floor")
    print(f"  of which the audit workbook (XlsxWriter: every rule, the intake): {audit_ms:7.1f} ms"
          f" = {audit_ms / floor_ms:.2f}x the floor")
    print(f"ratio: {quote_ms / floor_ms:.2f}x (aim: at most 2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
