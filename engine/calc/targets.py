"""What each evaluated configuration misses (memory, deadline, latency, request rate), by what factor, and its score."""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

# In the order a customer would fix them; "layout": a layout the intake fixed does not divide the GPUs.
CRITERIA = ("layout", "memory", "deadline", "latency", "throughput")


def shortfalls(table: Mapping, values: dict) -> dict[str, np.ndarray]:
    """Per criterion, the factor by which each row misses it (1 where it is met or does not apply).

    `table` maps result keys to equal-length arrays (a DataFrame will do). Rules that did not
    apply are blank, so a target counts only where its own figures are there: a latency target
    only where a target was used, a deadline only where the intake gave one.
    """
    n = _rows(table)
    out = {}
    with np.errstate(all="ignore"):
        divides = np.asarray(table["divides"], dtype=bool) if "divides" in table else np.ones(n, dtype=bool)
        out["layout"] = np.where(divides, 1.0, np.inf)
        # a proposal keeps memory headroom (rules/capacity.yaml, memory_limit_gb) where the rules give it
        if "memory_limit_gb" in table:
            ratio = _column(table, "memory_per_gpu_gb") / _column(table, "memory_limit_gb")
            fits = ratio <= 1
        else:
            ratio = _column(table, "memory_per_gpu_gb") / _column(table, "gpu_memory_gb")
            fits = np.asarray(table["fits_in_memory"], dtype=bool) if "fits_in_memory" in table else ratio <= 1
        # a row that does not fit misses by at least a hair, even where rounding puts the ratio at 1
        out["memory"] = np.where(fits, 1.0, np.maximum(np.nan_to_num(ratio, nan=np.inf), 1.0 + 1e-6))
        deadline = positive(values.get("deadline_days"))
        hours = _column(table, "job_hours")
        out["deadline"] = np.where(np.isfinite(hours), hours / (deadline * 24), 1.0) if deadline else np.ones(n)
        latency = np.fmax(_column(table, "ttft_ms") / _column(table, "ttft_target_used"),
                          _column(table, "tpot_ms") / _column(table, "tpot_target_used"))
        out["latency"] = np.where(np.isfinite(latency), latency, 1.0)
        needed = _column(table, "throughput_needed")
        out["throughput"] = np.where(np.isfinite(needed), needed / _column(table, "output_tokens_per_s"), 1.0)
        out["throughput"] = np.nan_to_num(out["throughput"], nan=np.inf)
    return out


def misses(table: Mapping, values: dict) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(criterion → rows that miss it, the largest factor each row misses by; 1 for a row that meets all)."""
    factors = shortfalls(table, values)
    failed = {c: factors[c] > 1 + 1e-9 for c in CRITERIA}
    worst = np.max(np.vstack([np.where(failed[c], factors[c], 1.0) for c in CRITERIA]), axis=0) \
        if factors["layout"].size else np.ones(0)
    return failed, worst


def objective_score(table, objective: str) -> np.ndarray:
    """Lower is better: total cost, GPUs or time; where a job has no total (an open-ended batch),
    the cost per million tokens, and for time in serving, throughput."""
    if objective == "gpus":
        return _column(table, "gpu_count")
    if objective == "time":
        hours = _column(table, "job_hours")
        return hours if np.isfinite(hours).any() else -np.nan_to_num(_column(table, "output_tokens_per_s"), nan=0.0)
    cost = _column(table, "cost_total")
    if not np.isfinite(cost).any():
        cost = _column(table, "cost_per_million_tokens")
    return np.where(np.isfinite(cost), cost, np.inf)


TIE_SHARE = 0.03           # scores within 3% of each other are a tie, settled toward fewer GPUs


def fewer_gpus_first(scores, gpu_counts, tie: float = TIE_SHARE) -> list[int]:
    """Indexes best score first, except that among scores within `tie` of the best left, the
    fewest GPUs go first: eight GPUs for 1% less than one is not worth proposing."""
    key = np.asarray(scores, dtype=float)
    key = np.where(np.isfinite(key), key, np.inf)
    counts = np.asarray(gpu_counts, dtype=float)
    ranked = np.lexsort((counts, key))                 # by score, then by GPUs
    key, counts = key[ranked], counts[ranked]
    left = np.ones(len(ranked), dtype=bool)
    order, head = [], 0
    while head < len(ranked):
        best = key[head]
        if not np.isfinite(best):
            order += ranked[head:][left[head:]].tolist()
            break
        end = int(np.searchsorted(key, best + abs(best) * tie, side="right"))
        near = np.where(left[head:end], counts[head:end], np.inf)      # the near ties still left
        pick = head + int(np.argmin(near))
        left[pick] = False
        order.append(int(ranked[pick]))
        while head < len(ranked) and not left[head]:
            head += 1
    return order


def _rows(table: Mapping) -> int:
    return len(table[next(iter(table))]) if len(list(table)) else 0


def _column(table: Mapping, key: str) -> np.ndarray:
    """A result column as floats; all blank where the rules did not produce it."""
    return np.asarray(table[key], dtype=float) if key in table else np.full(_rows(table), np.nan)


def positive(value) -> float:
    """A finite positive number from an intake value, else 0 (blank, text, NaN, zero or below)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0
