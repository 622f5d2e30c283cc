"""Hand-built quotes for the render tests (training and inference), and tests of the quote view."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.calc.results import Notice, Results, Step
from engine.intake.model import Intake
from engine.job import Job
from engine.paths import LANGUAGES
from engine.quote import view as render
from engine.quote.messages import messages

HOSTILE_CUSTOMER = '=HYPERLINK("http://evil.example","click")'
HOSTILE_PROJECT = "@SUM(A1:A9)"
HOSTILE_WARNING = '<img src=x onerror="console.error(\'xss\')"> +cmd'

# key: (group, unit, value)
TRAINING = {
    "model_name": ("model", "", "Llama 2 70B"),
    "gpu_name": ("model", "", "H100 SXM5 80GB"),
    "peak_tflops_per_gpu": ("compute", "TFLOPS", 989.4),
    "utilization_used": ("compute", "fraction", 0.4),
    "scaling_efficiency": ("scaling", "fraction", 0.9),
    "effective_tflops_total": ("compute", "TFLOPS", 182_362.0),
    "training_flops": ("compute", "FLOP", 8.4e23),
    "training_tokens": ("compute", "tokens", 2e12),
    "steps": ("compute", "steps", 476_837),
    "training_time_hours": ("compute", "hours", 460.8),
    "training_time_days": ("compute", "days", 19.2),
    "gpu_hours": ("cost", "GPU-hours", 235_929.6),
    "weights_gb": ("capacity", "GB", 140.0),
    "gradients_gb": ("capacity", "GB", 140.0),
    "optimizer_gb": ("capacity", "GB", 840.0),
    "activations_gb": ("capacity", "GB", 31.5),
    "memory_per_gpu_gb": ("capacity", "GB", 62.5),
    "gpu_memory_gb": ("capacity", "GB", 85.89934592),   # 80 × 2³⁰ bytes, as rules/capacity.yaml has it
    "fits_in_memory": ("capacity", "", True),
    "min_gpus_for_memory": ("capacity", "GPUs", 16),
    "arithmetic_intensity": ("bandwidth", "FLOP/byte", 250.0),
    "ridge_point": ("bandwidth", "FLOP/byte", 295.2),
    "attainable_tflops_per_gpu": ("bandwidth", "TFLOPS", 837.5),
    "bound": ("bandwidth", "", "memory"),
    "cost_total": ("cost", "currency", 589_824.0),
    "bottleneck": ("verdict", "", "compute"),
}
INFERENCE = {
    "gpu_name": ("model", "", "H100 SXM5 80GB"),
    "peak_tflops_per_gpu": ("compute", "TFLOPS", 989.4),
    "weights_gb": ("capacity", "GB", 140.0),
    "kv_cache_gb": ("capacity", "GB", 42.9),
    "kv_cache_bytes_per_token": ("capacity", "bytes", 327_680),
    "memory_per_gpu_gb": ("capacity", "GB", 45.7),
    "gpu_memory_gb": ("capacity", "GB", 85.89934592),   # 80 × 2³⁰ bytes, as rules/capacity.yaml has it
    "fits_in_memory": ("capacity", "", True),
    "max_concurrency": ("capacity", "requests", 96),
    "arithmetic_intensity": ("bandwidth", "FLOP/byte", 1.9),
    "ridge_point": ("bandwidth", "FLOP/byte", 295.2),
    "attainable_tflops_per_gpu": ("bandwidth", "TFLOPS", 6.4),
    "bound": ("bandwidth", "", "memory"),
    "ttft_ms": ("inference", "ms", 412.5),
    "tpot_ms": ("inference", "ms", 23.8),
    "output_tokens_per_s": ("inference", "tokens/s", 1345.0),
    "meets_latency_targets": ("inference", "", False),
    "cost_per_million_tokens": ("cost", "currency", 2.48),
    "bottleneck": ("verdict", "", "memory bandwidth"),
}
TRAINING_INPUTS = {"customer": HOSTILE_CUSTOMER, "project": HOSTILE_PROJECT, "language": "en",
                   "workload": "pretraining", "model": "llama-2-70b", "precision": "bf16",
                   "training_tokens_billion": 2000, "gpu": "H100", "gpu_count": 512,
                   "gpu_hour_price": 2.5}
INFERENCE_INPUTS = {"customer": "Example Co.", "project": "Chat assistant", "language": "en",
                    "workload": "online-inference", "model": "llama-2-70b", "precision": "fp8",
                    "prompt_tokens": 2000, "output_tokens": 500, "concurrency": 64,
                    "ttft_target_ms": 300, "tpot_target_ms": 50, "gpu": "H100", "gpu_count": 4}


def label(key: str) -> dict[str, str]:
    words = key.replace("_", " ")
    return {"en": words.capitalize(), "zh-TW": f"繁：{words}", "zh-CN": f"简：{words}"}


def make_results(table: dict, inputs: dict, defaults: dict | None = None) -> Results:
    trace = [Step(name=k, group=g, label=label(k), unit=u,
                  formula=f"{k}_input * 2" if k != "bottleneck" else 'if(x, "compute", "memory")',
                  inputs={f"{k}_input": v / 2 if isinstance(v, (int, float)) and
                          not isinstance(v, bool) else 1},
                  value=v, where=f"rules/{g}.yaml:{i + 3}", why=f"why {k}")
             for i, (k, (g, u, v)) in enumerate(table.items())]
    notice = Notice("utilization.high", {"en": HOSTILE_WARNING, "zh-TW": "警告：" + HOSTILE_WARNING,
                                         "zh-CN": "警告：" + HOSTILE_WARNING},
                    "rules/compute.yaml:40")
    return Results(values={k: v for k, (_, _, v) in table.items()}, trace=trace,
                   warnings=[notice], ruleset="rs-test123456",
                   inputs={**inputs, "gpu": "nvidia-h100-sxm5-80gb", **(defaults or {})})


def make_job(tmp_path: Path, workload: str = "training", lang: str = "en",
             intake: Intake | None = None) -> Job:
    table, inputs = (TRAINING, TRAINING_INPUTS) if workload == "training" else (INFERENCE,
                                                                                INFERENCE_INPUTS)
    inputs = {**inputs, "language": lang}
    source = tmp_path / f"{workload}.yaml"
    source.write_text("\n".join(f"{k}: {v!r}" for k, v in inputs.items()), encoding="utf-8")
    intake = intake or Intake(values=dict(inputs), raw=dict(inputs), origin=source, kind="yaml",
                              language=lang,
                              sources={k: f"{source.name}:{i + 1}" for i, k in enumerate(inputs)})
    outdir = tmp_path / "out"
    outdir.mkdir(exist_ok=True)
    return Job(source=source, outdir=outdir, intake=intake, language=lang, status="quoted",
               results=make_results(table, inputs, {"utilization": 0.4, "optimizer": "adam"}),
               ruleset_version="rs-test123456")


def quote_of(job: Job, grid=None) -> render.Quote:
    """The quote view of a hand-built job, as run_job builds it."""
    return render.build_quote(job.intake, job.results, grid)


def set_input(job: Job, key: str, value) -> None:
    """As the validator and evaluator leave it: the intake's value and the resolved one agree."""
    job.intake.values[key] = job.results.inputs[key] = value


def make_grid(workload: str = "training") -> pd.DataFrame:
    """What scaling_grid returns: one row per GPU count with its planned layout, a column per result key."""
    counts = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] if workload == "training" \
        else [1, 2, 4, 8]
    efficiency = [0.9 ** (i / 4) for i in range(len(counts))]
    # the planner's layout per count, as engine.calc.sweep.planned_rows gives it
    layouts = [{"tensor_parallel": min(n, 8), "zero_stage": 1, "micro_batch_size": 1} for n in counts]
    if workload == "training":
        days = [19.2 * 512 * 0.9 / (n * e) for n, e in zip(counts, efficiency)]
        return pd.DataFrame({"gpu_count": counts, "layout_values": layouts, "scaling_efficiency": efficiency,
                             "training_time_days": days,
                             "training_time_hours": [d * 24 for d in days],
                             "gpu_hours": [d * 24 * n for d, n in zip(days, counts)],
                             "cost_total": [d * 24 * n * 2.5 for d, n in zip(days, counts)],
                             "fits_in_memory": [n >= 16 for n in counts]})
    tps = [1345.0 / 4 * n * e for n, e in zip(counts, efficiency)]
    return pd.DataFrame({"gpu_count": counts, "layout_values": layouts, "output_tokens_per_s": tps,
                         "ttft_ms": [412.5 * 4 / n for n in counts],
                         "fits_in_memory": [n >= 2 for n in counts]})


@pytest.fixture
def grid_for(monkeypatch):
    """Stand in for view.scaling_grid (the sweep's planned rows) with a hand-built frame."""
    def use(workload: str = "training"):
        monkeypatch.setattr(render, "scaling_grid", lambda *args: make_grid(workload))
    return use


# ----- the quote view itself -------------------------------------------------------------

def test_headline_training_in_days(tmp_path):
    quote = quote_of(make_job(tmp_path))
    assert quote.headline == "≈ 19.2 days on 512 × H100 SXM5 80GB"


@pytest.mark.parametrize("hours, expected", [(460.8, "≈ 19.2 days on 8 × V100"),
                                             (5.5, "≈ 5.5 hours on 8 × V100"),
                                             (0.5, "≈ 30 minutes on 8 × V100")])
def test_headline_picks_a_readable_unit(hours, expected):
    m = messages("en")
    values = {"training_time_hours": hours, "training_time_days": hours / 24}
    assert render._headline(m, values, "V100", 8) == expected


def test_headline_inference_and_languages(tmp_path):
    assert quote_of(make_job(tmp_path, "inference")).headline == \
        "1,345 output tokens/s, first token in 412.5 ms, on 4 × H100 SXM5 80GB"
    assert quote_of(make_job(tmp_path, lang="zh-TW")).headline == \
        "約 19.2 天，使用 512 × H100 SXM5 80GB"
    assert quote_of(make_job(tmp_path, lang="zh-CN")).headline == \
        "约 19.2 天，使用 512 × H100 SXM5 80GB"


def test_only_result_keys_that_exist_are_shown(tmp_path):
    quote = quote_of(make_job(tmp_path, "inference"))
    shown = {f.key for s in quote.sections for f in s.figures} | {f.key for f in quote.key_figures}
    assert "training_time_days" not in shown and "gradients_gb" not in shown
    assert {"ttft_ms", "tpot_ms", "max_concurrency", "cost_per_million_tokens"} <= shown
    assert [s.key for s in quote.sections] == ["model", "capacity", "compute", "bandwidth",
                                               "scaling", "targets"]


def test_verdicts_warnings_and_assumptions(tmp_path):
    quote = quote_of(make_job(tmp_path, "inference"))
    assert quote.verdicts[0].startswith("Memory bandwidth:")
    assert quote.verdicts[-1] == "Misses the latency targets."
    assert quote.warnings == [HOSTILE_WARNING]
    # defaults the engine used but the intake did not give
    assert [f.key for f in quote.assumptions] == ["utilization", "optimizer"]
    assert quote.figure("cost_per_million_tokens").text == "2.48 USD"
    assert quote.figure("bound").text == "memory-bandwidth-bound"


def test_not_fitting_is_said_plainly(tmp_path):
    job = make_job(tmp_path)
    # 120.5 and 85.9 GB of 10⁹ bytes are 112.2 and 80 GB as the GPU's name counts them (÷ 2³⁰/10⁹ = 1.0737)
    job.results.values.update(fits_in_memory=False, memory_per_gpu_gb=120.5)
    assert "Does not fit: 112.2 GB needed per GPU, the GPU has 80 GB — at least 16 GPUs" \
        in " ".join(quote_of(job).verdicts)


def test_scaling_columns_layout_speedup_and_the_estimates_own_efficiency(tmp_path):
    quote = quote_of(make_job(tmp_path), make_grid())
    columns = {c.key: c for c in quote.scaling}
    assert list(columns) == ["gpu_count", "layout", "training_time_days", "speedup", "scaling_efficiency",
                             "gpu_hours", "cost_total", "fits_in_memory"]
    assert columns["layout"].values[4] == "Tensor parallel 8, ZeRO stage 1, Micro-batch size 1"
    # the four counts that cannot hold the model do not run: no time, speedup or cost is shown for them
    # (issue 22: nothing quoted as if it ran); where the model fits, the speedup is as before
    assert columns["training_time_days"].values[:4] == [None] * 4 and columns["cost_total"].values[:4] == [None] * 4
    assert columns["speedup"].values[:4] == [None] * 4
    # the base is the first count that runs, counted as its GPUs (a row that cannot run is no base):
    # speedup at n = 16 × time(16) ÷ time(n)
    times = columns["training_time_days"].values
    assert columns["speedup"].values[4] == pytest.approx(16)
    assert columns["speedup"].values[5:] == pytest.approx([16 * times[4] / t for t in times[5:]])
    # the efficiency column is the rule's scaling_efficiency per count (0.9 at 16 GPUs in make_grid),
    # not a second efficiency worked out from the speedup
    assert columns["scaling_efficiency"].values[4] == pytest.approx(0.9)
    assert columns["fits_in_memory"].values[:5] == [False, False, False, False, True]


def test_the_scaling_efficiency_in_the_table_is_the_one_the_quote_states(tmp_path):
    """Issue 22: the table said 85.2% (speedup ÷ GPUs) and the line under it "Scaling efficiency 100%"."""
    job = make_job(tmp_path)
    grid = make_grid()
    at = list(grid["gpu_count"]).index(512)
    grid.loc[at, "scaling_efficiency"] = job.results.values["scaling_efficiency"]   # the quote's row is the quote
    quote = quote_of(job, grid)
    table = {c.key: c.values for c in quote.scaling}
    stated = quote.figure("scaling_efficiency")
    assert table["scaling_efficiency"][at] == stated.value == 0.9
    assert "efficiency" not in table          # no second, differently computed efficiency beside it


def test_the_scaling_caption_names_the_counts_the_table_shows(tmp_path):
    quote = quote_of(make_job(tmp_path, "inference"), make_grid("inference"))
    assert [c.values for c in quote.scaling if c.key == "gpu_count"] == [[1, 2, 4, 8]]
    assert quote.scaling_note.startswith("The same workload on 1, 2, 4, 8 GPUs, each count on the layout")
    quote = quote_of(make_job(tmp_path), make_grid())       # 11 counts: the first three and the last
    assert quote.scaling_note.startswith("The same workload on 1, 2, 4, …, 1,024 GPUs")


def test_a_serving_tables_efficiency_is_its_speedup_over_its_gpus(tmp_path):
    """A serving quote's table said "Scaling efficiency 100%" on every row, even where its own speedup
    column gave 12.3 on 16 GPUs: serving has no efficiency rule, so the column is speedup ÷ GPUs."""
    quote = quote_of(make_job(tmp_path, "inference"), make_grid("inference"))
    table = {c.key: c.values for c in quote.scaling}
    # make_grid("inference"): n GPUs give 1345/4 · n · 0.9^(i/4) tokens/s (i = 0…3 for 1, 2, 4, 8) and
    # only 2 GPUs or more hold the model, so the base is 2 GPUs: speedup(n) = 2 · tps(n) / tps(2), and
    # efficiency(n) = speedup(n) / n = 0.9^(i/4) / 0.9^(1/4) — 1 at 2 GPUs, 0.9^(1/2) = 0.9487 at 8
    assert table["scaling_efficiency"][0] is None                  # 1 GPU does not hold the model
    assert table["scaling_efficiency"][1:] == pytest.approx([1, 0.9 ** 0.25, 0.9 ** 0.5])
    assert [s / n for s, n in zip(table["speedup"][1:], table["gpu_count"][1:])] == \
        pytest.approx(table["scaling_efficiency"][1:])
    assert "scaling_efficiency" not in {f.key for s in quote.sections for f in s.figures}


def test_a_serving_rows_layout_names_its_copies_of_the_model(tmp_path):
    """16 GPUs at tensor parallel 8 are two copies of the model, each serving its own requests: the row
    says so, since that is why its speedup falls short of 16. Training rows name no copies."""
    job = make_job(tmp_path, "inference")
    job.results.values["is_inference"] = True
    grid = make_grid("inference")
    grid["layout_values"] = [{"tensor_parallel": min(n, 2)} for n in grid["gpu_count"]]    # 1, 2, 2, 2
    layout = next(c.values for c in quote_of(job, grid).scaling if c.key == "layout")
    # copies = GPUs ÷ tensor parallel: 1, 1, 2, 4 — shown only above one
    assert layout == ["", "Tensor parallel 2", "Tensor parallel 2, Copies of the model (replicas) 2",
                      "Tensor parallel 2, Copies of the model (replicas) 4"]
    training = next(c.values for c in quote_of(make_job(tmp_path), make_grid()).scaling if c.key == "layout")
    assert not any("Copies" in text for text in training)


def test_serving_has_no_scaling_efficiency_result(ruleset):
    """The rule is training's (rules/scaling.yaml): a serving evaluation gives no figure that could be
    shown as 100% beside a speedup that says otherwise; training's seed 000 still gives 80%."""
    from engine.calc.evaluate import evaluate
    serving = evaluate({"workload": "online-inference", "model": "llama-3.1-70b", "gpu": "H100", "gpu_count": 16,
                        "precision": "bf16", "prompt_tokens": 1000, "output_tokens": 200, "concurrency": 64}, ruleset)
    assert "scaling_efficiency" not in serving.values and "output_tokens_per_s" in serving.values
    training = evaluate({"gpu": "4090", "gpu_count": 2, "workload": "pretraining"}, ruleset)
    assert training.values["scaling_efficiency"] == pytest.approx(0.8)     # 1.6× on 2 GPUs over PCIe


def test_a_given_value_does_not_bring_back_a_rule_its_when_turns_off(ruleset):
    """An intake's scaling_efficiency stands for training (it overrides the rule) but gives serving no
    figure: it once showed 80% on every serving row beside speedups of 8, 12.3 and 16.9."""
    from engine.calc.evaluate import evaluate, evaluate_columns
    serving = {"workload": "online-inference", "model": "llama-3.1-70b", "gpu": "H100", "gpu_count": 16,
               "precision": "bf16", "prompt_tokens": 1000, "output_tokens": 200, "concurrency": 64}
    assert "scaling_efficiency" not in evaluate({**serving, "scaling_efficiency": 0.8}, ruleset).values
    training = {"gpu": "4090", "gpu_count": 2, "workload": "pretraining", "scaling_efficiency": 0.7}
    assert evaluate(training, ruleset).values["scaling_efficiency"] == pytest.approx(0.7)
    # the same in a scenario column: given for both workloads, it stands only where the rule applies
    columns = evaluate_columns({**serving, "training_tokens_billion": 1}, ruleset,
                               {"workload": np.array(["pretraining", "online-inference"]),
                                "scaling_efficiency": np.array([0.7, 0.7])}, 2, only=["scaling_efficiency"])
    assert columns["scaling_efficiency"][0] == pytest.approx(0.7) and np.isnan(columns["scaling_efficiency"][1])


@pytest.mark.parametrize("chosen, expected", [
    (512, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]),
    (6, [1, 2, 4, 6, 8]),
    (1, [1, 2, 4, 8]),
])
def test_gpu_counts(chosen, expected):
    assert render.gpu_counts(chosen) == expected


@pytest.mark.parametrize("value, unit, expected", [
    (19.2, "days", "19.2 days"), (1_234_567, "", "1,234,567"), (8.4e23, "FLOP", "8.4 × 10²³ FLOP"),
    (0.4, "fraction", "40%"), (True, "", "Yes"), (None, "GB", "—"), (0.0123, "", "0.0123"),
    (float("nan"), "ms", "—"), (2.0, "GB", "2 GB"), (412.5, "ms", "412.5 ms"),
    ("compute", "", "compute"),
])
def test_numbers_read_well(value, unit, expected):
    assert messages("en").value(value, unit) == expected


def test_numbers_in_chinese_units():
    assert messages("zh-TW").value(19.2, "days") == "19.2 天"
    assert messages("zh-CN").value(3, "hours") == "3 小时"


def _paths(node, prefix=""):
    if isinstance(node, dict):
        return {p for k, v in node.items() for p in _paths(v, f"{prefix}{k}.")}
    return {prefix.rstrip(".")}


def test_every_language_has_every_message():
    from ruamel.yaml import YAML

    from engine.paths import TEMPLATES_DIR
    from engine.quote.messages import _table
    own = {lang: YAML(typ="safe").load((TEMPLATES_DIR / "messages" / f"{lang}.yaml")
                                       .read_text(encoding="utf-8")) for lang in LANGUAGES}
    assert _paths(own["zh-TW"]) == _paths(own["en"]) == _paths(own["zh-CN"])
    assert _table("en", (TEMPLATES_DIR,))["title"] == "Compute sizing quote"


def test_user_messages_override_single_entries(tmp_path, monkeypatch):
    (tmp_path / "messages").mkdir()
    (tmp_path / "messages" / "en.yaml").write_text("title: ACME sizing\n", encoding="utf-8")
    monkeypatch.setenv("SIZING_TEMPLATES", str(tmp_path))
    m = messages("en")
    assert m("title") == "ACME sizing" and m("sections.capacity") == "Memory capacity"
