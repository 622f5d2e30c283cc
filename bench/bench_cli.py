"""Cold start: `sizing quote one.yaml` as a fresh process against a bare openpyxl load + save of the same intake.

Usage: .venv/bin/python bench/bench_cli.py [INTAKE.yaml] [--runs N] [--imports]

Every run is a new process, as a user's command is; the three kinds are interleaved so a
busy machine slows them alike, and the medians are compared (aim: the quote within 1.5×
the floor). The rule-set cache (engine/calc/rulecache.py) lives in a temporary folder:
warmed once, as by a user's first quote, and also switched off, to show what it saves.
`--imports` adds the modules that cost most to import in one quote (python -X importtime).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "samples" / "seed002-bert-base-8xv100.yaml"


def timed(command: list[str], env: dict) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def import_costs(command: list[str], env: dict, count: int = 8) -> list[tuple[float, str]]:
    """(ms, what) for the packages that cost most to import in one run (python -X importtime),
    plus the engine's own modules together."""
    proc = subprocess.run([command[0], "-X", "importtime", *command[1:]], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    packages, own = {}, 0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        if not self_us.strip().isdigit():
            continue                                   # the header line
        name = name.strip()
        if name.split(".")[0] == "engine":
            own += int(self_us)
        elif "." not in name and not name.startswith("_"):
            packages.setdefault(name, int(cumulative_us))   # a package counts with what it imports
    rows = sorted(((us / 1000, f"import {name}") for name, us in packages.items()), reverse=True)[:count]
    return rows + [(own / 1000, "the engine's own modules (self time)")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("intake", nargs="?", type=Path, default=DEFAULT,
                        help="a YAML intake with an .xlsx twin beside it (default: the seed-002 sample)")
    parser.add_argument("--runs", type=int, default=9, help="fresh processes of each kind (default: 9)")
    parser.add_argument("--imports", action="store_true", help="also list the costliest imports of one quote")
    args = parser.parse_args(argv)
    twin = args.intake.with_suffix(".xlsx")
    if not twin.is_file():
        print(f"{args.intake}: no .xlsx twin beside it for the openpyxl floor", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        # Python keeps compiled bytecode beside the modules unless PYTHONDONTWRITEBYTECODE says
        # not to (some sandboxes and CI images set it): measure what a user's machine does.
        environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached = {**environ, "SIZING_CACHE_DIR": str(Path(tmp) / "cache")}
        uncached = {**environ, "SIZING_CACHE_DIR": "off"}
        quote = [sys.executable, "-m", "engine", "quote", str(args.intake), "-o", str(Path(tmp) / "out")]
        floor = [sys.executable, "-c", "import io, sys, openpyxl; "
                 "openpyxl.load_workbook(sys.argv[1]).save(io.BytesIO())", str(twin)]
        timed(quote, cached)                      # the first quote fills the cache; the OS caches the files
        timed(floor, cached)
        times: dict[str, list[float]] = {"quote": [], "uncached": [], "floor": []}
        for _ in range(args.runs):
            times["quote"].append(timed(quote, cached))
            times["floor"].append(timed(floor, cached))
            times["uncached"].append(timed(quote, uncached))
        imports = import_costs(quote, cached) if args.imports else []

    median = {kind: statistics.median(values) * 1000 for kind, values in times.items()}
    print(f"intake: {args.intake.name}; floor: {twin.name} ({args.runs} fresh processes each, medians)")
    print(f"sizing quote (rule-set cache warm):      {median['quote']:7.0f} ms")
    print(f"sizing quote (no rule-set cache):        {median['uncached']:7.0f} ms")
    print(f"python -c 'openpyxl load + save':        {median['floor']:7.0f} ms")
    print(f"ratio: {median['quote'] / median['floor']:.2f}x (aim: at most 1.5x); "
          f"without the cache {median['uncached'] / median['floor']:.2f}x")
    if imports:
        print("where one quote's imports go:")
    for ms, what in imports:
        print(f"  {what:<40} {ms:6.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
