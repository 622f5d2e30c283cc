"""Benchmark: a sweep of over a million scenarios (layouts × GPUs × counts × precisions) against one at a time.

Usage: .venv/bin/python bench/bench_sweep.py [--sample N]

The sweep is what `sizing sweep` runs: for every GPU × count × precision, every layout the
planner weighs, evaluated as arrays, and the best kept. Beside it, in the same run, a sample
of the same scenarios is evaluated one at a time (the planner's chosen layout for a random
configuration), and its figures are compared with the sweep's. Peak memory is the process's
peak resident set. The last line is `scenarios_per_s: N`.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.calc.evaluate import evaluate  # noqa: E402
from engine.calc.planner import plan_outputs  # noqa: E402
from engine.calc.ruleset import current_ruleset  # noqa: E402
from engine.calc.sweep import FIGURES, sweep  # noqa: E402

BASE = {"customer": "Bench Co.", "workload": "pretraining", "model": "llama-2-70b", "precision": "bf16",
        "training_tokens_billion": 2000, "gpu": "nvidia-h100-sxm5-80gb", "gpu_count": 1024, "deadline_days": 60}
COUNTS = [64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048]
PRECISIONS = ["bf16", "fp16", "fp8"]
AIM_SECONDS, AIM_GB = 2.0, 2.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=200, help="scenarios evaluated one at a time")
    args = parser.parse_args(argv)
    ruleset = current_ruleset()
    gpus = [g for g, e in ruleset.catalogs.gpus.items() if e.get("price_usd_per_gpu_hour")]
    grid = {"gpu": gpus, "gpu_count": COUNTS, "precision": PRECISIONS}
    sweep(BASE, ruleset, {"gpu": gpus[:1], "gpu_count": COUNTS[:1], "precision": PRECISIONS[:1]})   # warm

    started = time.perf_counter()
    result = sweep(BASE, ruleset, grid)
    swept = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9

    rows = random.Random(0).sample(range(len(result.table)), min(args.sample, len(result.table)))
    outputs = tuple(o for o in dict.fromkeys(plan_outputs("pretraining") + FIGURES) if o in ruleset.rules)
    times, worst = [], 0.0
    for i in rows:
        row = result.table.iloc[i]
        scenario = {**BASE, "gpu": row["gpu"], "gpu_count": int(row["gpu_count"]), "precision": row["precision"]}
        begun = time.perf_counter()
        one = evaluate(scenario, ruleset, layout=row["layout_values"], only=outputs).values
        times.append(time.perf_counter() - begun)
        for key in ("step_time_s", "memory_per_gpu_gb", "cost_total"):
            a, b = float(one[key]), float(row[key])
            worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
    one_at_a_time = statistics.median(times)
    per_scenario = swept / result.scenarios
    rate = result.scenarios / swept

    print(f"grid: {len(gpus)} GPUs × {len(COUNTS)} counts × {len(PRECISIONS)} precisions "
          f"= {len(gpus) * len(COUNTS) * len(PRECISIONS)} configurations, {len(result.left_out)} left out "
          f"(a precision the GPU lacks)")
    print(f"layouts evaluated (scenarios): {result.scenarios:,}; configurations ranked: {len(result.table)}")
    print(f"sweep: {swept:.2f} s, {per_scenario * 1e6:.2f} µs per scenario; peak memory {peak_gb:.2f} GB")
    print(f"one at a time (median of {len(rows)} sampled): {one_at_a_time * 1000:.2f} ms per scenario "
          f"→ the sweep is {one_at_a_time / per_scenario:,.0f}× cheaper per scenario")
    print(f"sampled scenarios agree with the sweep to {worst:.1e} (largest relative difference)")
    print(f"aim: {AIM_SECONDS:.0f} s and {AIM_GB:.0f} GB for 1,000,000 scenarios: "
          f"{'met' if result.scenarios / rate <= AIM_SECONDS * result.scenarios / 1e6 and peak_gb < AIM_GB else 'MISSED'}"
          f" ({1e6 / rate:.2f} s per million)")
    print(f"scenarios_per_s: {rate:.0f}")
    return 0 if worst < 1e-9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
