"""Benchmark: one warm scenario evaluation vs. 100,000 scenarios evaluated as numpy arrays, in one run."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.calc.evaluate import evaluate, evaluate_columns  # noqa: E402
from engine.calc.ruleset import load_ruleset  # noqa: E402

SCENARIO = {
    "customer": "Bench Co.", "workload": "pretraining", "model": "llama-2-7b", "precision": "bf16",
    "training_tokens_billion": 2000, "gpu": "nvidia-a100-sxm4-80gb", "gpu_count": 256,
    "zero_stage": 1, "activation_checkpointing": True, "flash_attention": True,
}
COUNT = 100_000


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    ruleset = load_ruleset()
    evaluate(SCENARIO, ruleset)                          # warm caches
    one = statistics.median(timed(lambda: evaluate(SCENARIO, ruleset), 200))

    rng = np.random.default_rng(0)
    gpus = np.array(list(ruleset.catalogs.gpus))
    columns = {
        "gpu": rng.choice(gpus, COUNT),
        "gpu_count": rng.choice([1, 2, 4, 8, 16, 64, 256, 1024], COUNT).astype(float),
        "precision": rng.choice(["bf16", "fp16", "fp8"], COUNT),
        "zero_stage": rng.integers(0, 4, COUNT).astype(float),
    }
    evaluate_columns(SCENARIO, ruleset, columns, COUNT)  # warm
    many = statistics.median(timed(lambda: evaluate_columns(SCENARIO, ruleset, columns, COUNT), 5))

    print(f"rules: {len(ruleset.rules)}")
    print(f"one scenario (warm, median of 200): {one * 1000:.2f} ms")
    print(f"{COUNT:,} scenarios as arrays (median of 5): {many * 1000:.0f} ms")
    print(f"per scenario in the array pass: {many / COUNT * 1e6:.2f} µs "
          f"→ {one / (many / COUNT):,.0f}× cheaper than one at a time")
    print(f"aim: one < 5 ms ({'met' if one < 0.005 else 'MISSED'}), "
          f"{COUNT:,} < 1 s ({'met' if many < 1 else 'MISSED'})")


if __name__ == "__main__":
    main()
