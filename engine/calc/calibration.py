"""Calibration on the customer's own benchmark: read the tool's result, fit the few factors it informs, apply them."""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.calc.evaluate import evaluate, evaluate_columns
from engine.calc.planner import plan_layout
from engine.calc.yamlfile import line_of, load_yaml_file, plain
from engine.problems import Problem, SizingError

MAX_RESULT_BYTES = 200_000_000          # a vLLM result with per-request lists of 100,000 prompts is ~50 MB
ANSI = re.compile(r"\x1b\[[0-9;]*m")     # torchtitan colours its log lines
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"
MEGATRON = re.compile(r"elapsed time per iteration \(ms\):\s*" + NUMBER)
MEGATRON_BATCH = re.compile(r"global batch size:\s*" + NUMBER)
TORCHTITAN = re.compile(r"\bstep:\s*(\d+).*?\btps:\s*" + NUMBER)
# What a quote may take from a calibration file, and the range a sane fit lands in.
FACTORS = {"calibration_speed": (0.05, 20.0), "calibration_prefill_time": (0.05, 20.0),
           "calibration_duty": (0.01, 1.5), "gemm_share": (0.01, 1.5)}
AT_KEYS = ("gpu_count", "params", "batch", "prompt_tokens", "output_tokens")
# the weights' format too: 4-bit or FP8 weights run other kernels than 16-bit ones of the same precision setting
MATCH_KEYS = ("kind", "gpu", "serving_engine", "precision", "weights")
GRID = np.exp(np.linspace(math.log(0.05), math.log(20), 241))


@dataclass
class Measurement:
    """What a benchmark result file says: the tool, the figures measured, the setup it states."""

    tool: str
    values: dict[str, float]                           # result key → measured value
    setup: dict[str, Any] = field(default_factory=dict)  # intake keys the run fixed (batch, lengths)


@dataclass
class Calibration:
    """A calibration file: where it applies, the configuration measured, and the factors."""

    measured: str
    applies_to: dict[str, str]
    at: dict[str, float]
    factors: dict[str, float]
    where: str = ""


# ----------------------------------------------------------------- reading result files

def read_result(path: Path) -> Measurement:
    """vLLM benchmark_serving.py --save-result JSON, GenAI-Perf/AIPerf profile export JSON, or a
    Megatron-LM/NeMo or torchtitan training log; SizingError naming the file and field otherwise."""
    name = Path(path).name
    try:
        data = Path(path).read_bytes()[:MAX_RESULT_BYTES + 1]
    except OSError as e:
        raise SizingError([Problem("calibrate.unreadable", name, f"cannot read the result file: {e.strerror}.")]) \
            from None
    if len(data) > MAX_RESULT_BYTES:
        raise SizingError([Problem("calibrate.too_big", name, f"the result file is over {MAX_RESULT_BYTES // 10**6} MB.")])
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            line = getattr(e, "lineno", 0)
            raise SizingError([Problem("calibrate.json", f"{name}:{line}", f"not valid JSON ({getattr(e, 'msg', e)}).")]) \
                from None
        if isinstance(doc, dict) and "output_throughput" in doc:
            return _vllm(doc, name)
        if isinstance(doc, dict) and ("output_token_throughput" in doc or "time_to_first_token" in doc):
            return _genai_perf(doc, name)
    else:
        lines = [ANSI.sub("", line) for line in text.splitlines()]
        if any(MEGATRON.search(line) for line in lines):
            return _megatron(lines, name)
        if any(TORCHTITAN.search(line) for line in lines):
            return _torchtitan(lines, name)
    raise SizingError([Problem("calibrate.format", name, "not a result file sizing calibrate reads: give vLLM's "
                               "benchmark_serving.py --save-result JSON (with output_throughput), GenAI-Perf's "
                               "profile_export_genai_perf.json or AIPerf's profile_export_aiperf.json, or a "
                               "Megatron-LM/NeMo or torchtitan training log.")])


def _positive(doc: dict, key: str, name: str, required: bool = True) -> float | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        shown = json.dumps(value)[:40] if value is not None else "nothing"
        raise SizingError([Problem("calibrate.field", f"{name}: {key}",
                                   f"`{key}` must be a positive number; the file has {shown}.")])
    return float(value)


def _vllm(doc: dict, name: str) -> Measurement:
    values = {"output_tokens_per_s": _positive(doc, "output_throughput", name)}
    for key, quantity in (("mean_tpot_ms", "tpot_ms"), ("mean_ttft_ms", "ttft_ms")):
        if (v := _positive(doc, key, name, required=False)) is not None:
            values[quantity] = v
    setup = {}
    completed = _positive(doc, "completed", name, required=False)
    if completed:
        for key, intake_key in (("total_input_tokens", "prompt_tokens"), ("total_output_tokens", "output_tokens")):
            if (v := _positive(doc, key, name, required=False)) is not None:
                setup[intake_key] = max(round(v / completed), 1)
    if doc.get("max_concurrency") is not None:
        setup["concurrency"] = int(_positive(doc, "max_concurrency", name))
        # A closed-loop run (no arrival rate): its first `concurrency` requests went out at once, and with
        # every request the same lengths each later group did too; the time to first token holds those waits.
        if completed and doc.get("request_rate") in (None, "inf", math.inf):
            setup["requests_total"] = int(completed)
            if lengths := _lengths(doc):
                setup["request_lengths"] = lengths
    return Measurement("vLLM benchmark_serving.py", values, setup)


def _lengths(doc: dict) -> str | None:
    """"fixed" when every request had the same prompt and answer lengths, "varied" when not, None when
    the file does not list them (benchmark_serving.py writes input_lens and output_lens per request)."""
    lists = [doc.get(key) for key in ("input_lens", "output_lens")]
    if not all(isinstance(v, list) and len(v) > 1 for v in lists):
        return None
    return "fixed" if all(len(set(map(str, v))) == 1 for v in lists) else "varied"


def _stat(doc: dict, key: str, name: str, required: bool = False) -> float | None:
    """GenAI-Perf and AIPerf write each metric as {"unit": ..., "avg": ..., "p50": ...}."""
    metric = doc.get(key)
    if metric is None and not required:
        return None
    if not isinstance(metric, dict):
        raise SizingError([Problem("calibrate.field", f"{name}: {key}",
                                   f"`{key}` must be an object with an `avg`; the file has {json.dumps(metric)[:40]}.")])
    return _positive(metric, "avg", f"{name}: {key}")


def _genai_perf(doc: dict, name: str) -> Measurement:
    values = {}
    for key, quantity in (("output_token_throughput", "output_tokens_per_s"), ("time_to_first_token", "ttft_ms"),
                          ("inter_token_latency", "tpot_ms")):
        if (v := _stat(doc, key, name)) is not None:
            values[quantity] = v
    if "output_tokens_per_s" not in values and "tpot_ms" not in values:
        raise SizingError([Problem("calibrate.field", f"{name}: output_token_throughput",
                                   "the profile export has neither output_token_throughput nor inter_token_latency.")])
    setup = {}
    for key, intake_key in (("input_sequence_length", "prompt_tokens"), ("output_sequence_length", "output_tokens")):
        if (v := _stat(doc, key, name)) is not None:
            setup[intake_key] = max(round(v), 1)
    config = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
    loadgen = config.get("loadgen") if isinstance(config.get("loadgen"), dict) else {}
    concurrency = config.get("concurrency", loadgen.get("concurrency"))      # GenAI-Perf; AIPerf
    if isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency > 0:
        setup["concurrency"] = concurrency
    tool = "AIPerf" if "loadgen" in config else "GenAI-Perf"
    return Measurement(tool, values, setup)


def _steady(samples: list[float]) -> float:
    """The median of the logged steps after the first (which holds the warm-up and compilation)."""
    return statistics.median(samples[1:] if len(samples) > 1 else samples)


def _megatron(lines: list[str], name: str) -> Measurement:
    times, batches = [], []
    for line in lines:
        if m := MEGATRON.search(line):
            times.append(float(m.group(1).replace(",", "")))
            if b := MEGATRON_BATCH.search(line):
                batches.append(int(float(b.group(1).replace(",", ""))))
    if not all(t > 0 for t in times):
        raise SizingError([Problem("calibrate.field", f"{name}: elapsed time per iteration (ms)",
                                   "an iteration time of 0 ms cannot be a measurement.")])
    setup = {"global_batch_size": statistics.mode(batches)} if batches else {}
    return Measurement("Megatron-LM log", {"step_time_s": _steady(times) / 1000}, setup)


def _torchtitan(lines: list[str], name: str) -> Measurement:
    rates = [float(m.group(2).replace(",", "")) for line in lines if (m := TORCHTITAN.search(line))]
    if not all(r > 0 for r in rates):
        raise SizingError([Problem("calibrate.field", f"{name}: tps", "a throughput of 0 tokens/s cannot be a measurement.")])
    return Measurement("torchtitan log", {"tokens_per_s_per_gpu": _steady(rates)})


# ----------------------------------------------------------------- fitting the factors

def measured_values(values: dict, measurement: Measurement, ruleset) -> dict:
    """The intake as it ran: the result file's batch and lengths replace the intake's, the
    planner fills the rest of the layout as a quote would."""
    run = {**values, **measurement.setup}
    return {**run, **plan_layout(run, ruleset).chosen}


def fit(values: dict, measurement: Measurement, ruleset) -> tuple[dict[str, float], dict]:
    """(factors, the figures the rules give with them at the measured configuration)."""
    run = measured_values(values, measurement, ruleset)
    got, factors = measurement.values, {}
    training = "step_time_s" in got or "tokens_per_s_per_gpu" in got
    if training == bool(evaluate(run, ruleset, only=["is_inference"]).values.get("is_inference")):
        kind = ("a training run", "serving") if training else ("serving", "a training run")
        raise SizingError([Problem("calibrate.mismatch", "workload", f"the {measurement.tool} result measures "
                                   f"{kind[0]}, but the intake describes {kind[1]}: give the intake of the "
                                   "system the benchmark ran on.")])
    if training:
        quantity = "step_time_s" if "step_time_s" in got else "tokens_per_s_per_gpu"
        base = float(evaluate(run, ruleset, only=["gemm_share"]).values["gemm_share"])
        share = _solve(run, ruleset, "gemm_share", base * GRID, quantity, got[quantity])
        factors["gemm_share"] = min(max(share, FACTORS["gemm_share"][0]), FACTORS["gemm_share"][1])
    else:
        speed_on = "tpot_ms" if "tpot_ms" in got else "output_tokens_per_s"
        factors["calibration_speed"] = _solve(run, ruleset, "calibration_speed", GRID, speed_on, got[speed_on])
        if "ttft_ms" in got:
            factors["calibration_prefill_time"] = _solve({**run, **factors}, ruleset, "calibration_prefill_time",
                                                         GRID, "ttft_ms", got["ttft_ms"])
        if speed_on == "tpot_ms" and "output_tokens_per_s" in got:
            rate = _value({**run, **factors}, ruleset, "output_tokens_per_s")
            factors["calibration_duty"] = got["output_tokens_per_s"] / rate
        for name, (low, high) in FACTORS.items():
            if name in factors:
                factors[name] = min(max(factors[name], low), high)
    reproduced = {q: _value({**run, **factors}, ruleset, q) for q in got}
    missed = [q for q, v in reproduced.items() if not abs(v / got[q] - 1) <= 0.05]
    if missed:
        raise SizingError([Problem("calibrate.unreachable", q, f"the rules cannot reach the measured {got[q]:,.4g} "
                                   f"with the factors a calibration may set (at best {reproduced[q]:,.4g}): check "
                                   "that the intake describes the system, model and precision the benchmark ran on.")
                           for q in missed])
    return factors, reproduced


def _value(values: dict, ruleset, quantity: str) -> float:
    return float(evaluate(values, ruleset, only=[quantity]).values[quantity])


def _solve(values: dict, ruleset, name: str, grid: np.ndarray, quantity: str, target: float) -> float:
    """The value of `name` where `quantity` meets `target`: the best point of `grid`, then twice
    of a finer grid between its neighbours (all points of a grid in one array pass)."""
    for _ in range(3):
        column = evaluate_columns(values, ruleset, {name: grid}, len(grid), only=[quantity])[quantity]
        miss = np.abs(np.log(np.asarray(column, dtype=float) / target))
        best = int(np.argmin(np.where(np.isfinite(miss), miss, np.inf)))
        chosen = float(grid[best])
        grid = np.linspace(grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)], 41)
    return chosen


def describe(values: dict, measurement: Measurement, ruleset) -> tuple[str, dict[str, str], dict[str, float]]:
    """(the measurement in words, where the calibration applies, the configuration measured)."""
    run = measured_values(values, measurement, ruleset)
    shape = evaluate(run, ruleset, only=["gpu_name", "model_name", "active_params", "is_inference",
                                         "serving_engine_used", "batch_per_replica", "peak_basis",
                                         "weight_format"]).values
    inference = bool(shape.get("is_inference"))
    figures = {"output_tokens_per_s": "{:,.0f} tokens/s", "tpot_ms": "TPOT {:,.1f} ms", "ttft_ms": "TTFT {:,.0f} ms",
               "step_time_s": "{:,.2f} s per step", "tokens_per_s_per_gpu": "{:,.0f} tokens/s per GPU"}
    said = ", ".join(figures[q].format(v) for q, v in measurement.values.items())
    load = (f", {run['concurrency']:,} × {run['prompt_tokens']:,}/{run['output_tokens']:,} tokens"
            if inference and run.get("concurrency") else "")
    words = (f"{shape.get('model_name') or values.get('model')}, {run.get('gpu_count', 1)} × "
             f"{shape.get('gpu_name') or values.get('gpu')}, {measurement.tool}{load}: {said}")
    applies = _configuration(values, shape)
    at = {"gpu_count": float(run.get("gpu_count") or 1), "params": round(float(shape.get("active_params") or 0), -6)}
    if inference:
        at |= {"batch": float(shape.get("batch_per_replica") or 1), "prompt_tokens": float(run["prompt_tokens"]),
               "output_tokens": float(run["output_tokens"])}
    return words, applies, at


def _configuration(values: dict, shape: dict) -> dict[str, str]:
    """What a calibration must match (MATCH_KEYS), the same for the measured system and a quote: the workload's kind,
    the GPU and precision, and when serving the software and the weights' format."""
    out = {"kind": "inference" if shape.get("is_inference") else "training", "gpu": str(values.get("gpu", "")),
           "precision": str(values.get("precision", shape.get("peak_basis", "")))}
    if shape.get("is_inference"):
        out |= {"serving_engine": str(shape.get("serving_engine_used", "")),
                "weights": str(shape.get("weight_format", ""))}
    return out


# ----------------------------------------------------------------- calibration files

def load_calibration(path: Path) -> Calibration:
    """A calibration file written by `sizing calibrate`; SizingError with file:line and field otherwise."""
    name = Path(path).name
    doc = load_yaml_file(Path(path), name)
    body = doc.get("calibration") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        raise SizingError([Problem("calibration.shape", f"{name}:1", "expected `calibration:` with `measured`, "
                                   "`applies_to`, `at` and `factors` — the file `sizing calibrate` writes.",
                                   fixer="sales")])
    problems: list[Problem] = []

    def where(node, key) -> str:
        return f"{name}:{line_of(node, key) or getattr(node, 'line', 1)}"

    measured = body.get("measured")
    if not isinstance(measured, str) or not measured.strip() or len(measured) > 400:
        problems.append(Problem("calibration.field", where(body, "measured"),
                                "`measured` must say in words what was measured (at most 400 characters)."))
    sections = {}
    for key in ("applies_to", "at", "factors"):
        node = body.get(key)
        if not isinstance(node, dict):
            problems.append(Problem("calibration.field", where(body, key), f"`{key}` must be a mapping."))
            node = {}
        sections[key] = node
    applies = {}
    for key, value in sections["applies_to"].items():
        if key not in MATCH_KEYS or not isinstance(value, str) or len(value) > 100:
            problems.append(Problem("calibration.field", where(sections["applies_to"], key),
                                    f"`applies_to.{key}`: keys are {', '.join(MATCH_KEYS)}, each a name."))
        else:
            applies[key] = value
    at, factors = {}, {}
    for key, value in sections["at"].items():
        if key not in AT_KEYS or not _number(value) or value <= 0:
            problems.append(Problem("calibration.field", where(sections["at"], key),
                                    f"`at.{key}`: keys are {', '.join(AT_KEYS)}, each a positive number."))
        else:
            at[key] = float(value)
    for key, value in sections["factors"].items():
        span = FACTORS.get(key)
        if span is None:
            problems.append(Problem("calibration.field", where(sections["factors"], key),
                                    f"`factors.{key}` is not a factor a calibration sets ({', '.join(FACTORS)})."))
        elif not _number(value) or not span[0] <= value <= span[1]:
            problems.append(Problem("calibration.field", where(sections["factors"], key),
                                    f"`factors.{key}` must be a number from {span[0]:g} to {span[1]:g}; "
                                    f"the file has {str(plain(value))[:40]}."))
        else:
            factors[key] = float(value)
    if not factors and not problems:
        problems.append(Problem("calibration.field", where(body, "factors"), "`factors` is empty: nothing to apply."))
    if problems:
        raise SizingError(problems)
    return Calibration(measured.strip(), applies, at, factors, name)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def calibration_values(values: dict, calibration: Calibration, ruleset) -> dict:
    """The values a quote of this intake takes from the calibration: its factors and the measured
    configuration where the intake matches what was measured; otherwise only a note that it did not."""
    shape = evaluate(values, ruleset,
                     only=["is_inference", "serving_engine_used", "peak_basis", "weight_format"]).values
    mine = _configuration(values, shape)
    if any(mine.get(k) != v for k, v in calibration.applies_to.items()):
        return {"calibration_elsewhere": calibration.measured}
    at = {f"calibration_{k}": v for k, v in calibration.at.items()}
    return {**calibration.factors, **at, "calibration_measured": calibration.measured,
            "calibration_first_token": "calibration_prefill_time" in calibration.factors}


def calibration_document(words: str, applies: dict, at: dict, factors: dict, measured: dict,
                         reproduced: dict, tool: str, sources: dict[str, str]) -> dict:
    """What `sizing calibrate` writes (and `load_calibration` reads back)."""
    return {"calibration": {"measured": words, "tool": tool, "from": sources, "applies_to": applies, "at": at,
                            "factors": {k: round(v, 4) for k, v in factors.items()},
                            "measurement": measured, "reproduced": {k: round(v, 4) for k, v in reproduced.items()}}}
