"""The server's settings the intake states: its batch limit (max_batch_size), CUDA graphs (cuda_graphs) and KV memory share."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate
from engine.calc.planner import plan_layout

# Llama 3.1 8B on one H100 under vLLM, online, the batch left to the planner
ONLINE = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-8b", "precision": "bf16",
          "gpu": "H100", "gpu_count": 1, "prompt_tokens": 512, "output_tokens": 256, "serving_engine": "vllm",
          "tpot_target_ms": 200}


def _quote(values, ruleset):
    return evaluate({**values, **plan_layout(values, ruleset).chosen}, ruleset).values


def test_the_planner_keeps_the_batch_within_the_servers_limit(ruleset):
    # vLLM's default cap is 256 (serving.yaml); the planner fills it when the 200 ms target allows.
    # With max_num_seqs 32 it may not batch more than 32 requests on the one replica.
    free = _quote(ONLINE, ruleset)
    assert free["stack_max_batch"] == 256 and free["concurrency_used"] > 32
    capped = _quote({**ONLINE, "max_batch_size": 32}, ruleset)
    assert capped["stack_max_batch"] == 32
    assert 1 <= capped["concurrency_used"] <= 32 and capped["batch_per_replica"] <= 32
    assert capped["output_tokens_per_s"] < free["output_tokens_per_s"]


def test_a_limit_above_the_default_lets_an_offline_job_batch_more(ruleset):
    # Offline, no concurrency given: min(what the KV cache holds, the cap) per replica. An H100 holds far more
    # than 256 requests of 128 + 64 tokens for an 8B model, so the cap decides: 256 by default, 1,000 when set.
    job = {**ONLINE, "workload": "offline-inference", "prompt_tokens": 128, "output_tokens": 128,
           "requests_total": 10000, "tensor_parallel": 1}
    job.pop("tpot_target_ms")
    default = evaluate(job, ruleset).values
    raised = evaluate({**job, "max_batch_size": 1000}, ruleset).values
    assert default["batch_per_replica"] == 256
    assert raised["batch_per_replica"] == 1000


@pytest.mark.parametrize("engine, per_layer, launch", [("vllm", 0.047, 0.2), ("sglang", 0.047, 0.2), ("tgi", 0.047, 0.2),
                                                       ("tensorrt-llm", 0.0, 0.0), ("transformers", 0.0, 0.0)])
def test_eager_mode_adds_launches_per_layer_only_where_graphs_were_on(ruleset, engine, per_layer, launch):
    # Llama 3.1 8B has 32 layers: eager mode adds 0.047 ms x 32 = 1.504 ms to each iteration of vLLM, SGLang
    # and TGI (vLLM PR #1440), nothing to TensorRT-LLM (C++ launches) or Transformers (already eager); and the
    # Python-launched three take no less than their launches, 0.2 ms x 32 = 6.4 ms, plus the fixed time
    base = {**ONLINE, "serving_engine": engine, "concurrency": 1, "tensor_parallel": 1}
    base.pop("tpot_target_ms")
    on = evaluate({**base, "cuda_graphs": "on"}, ruleset).values
    blank = evaluate(base, ruleset).values
    off = evaluate({**base, "cuda_graphs": "off"}, ruleset).values
    assert on["iteration_fixed_s"] == pytest.approx(blank["iteration_fixed_s"])
    assert (off["iteration_fixed_s"] - on["iteration_fixed_s"]) * 1000 == pytest.approx(per_layer * 32, abs=1e-6)
    floor_ms = (launch * 32 + off["iteration_fixed_s"] * 1000) if launch else 0
    assert off["eager_launch_floor_s"] * 1000 == pytest.approx(floor_ms)
    assert off["tpot_ms"] == pytest.approx(max(on["tpot_ms"] + per_layer * 32, floor_ms), rel=1e-3, abs=1e-6)


# Llama 2 70B (64 query heads, 8 KV heads) on one H200, FP8, TensorRT-LLM, a long answer: the cache is large
RELEASE = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-2-70b", "precision": "fp8",
           "gpu": "H200", "gpu_count": 1, "tensor_parallel": 1, "prompt_tokens": 128, "output_tokens": 2048,
           "concurrency": 64, "serving_engine": "tensorrt-llm"}


def test_an_old_tensorrt_llm_release_reads_a_grouped_query_cache_once_per_query_head(ruleset):
    # Before 0.7 the generation kernel ran one thread block per query head (gpt-attention.md), so the KV read
    # of each iteration is 64 / 8 = 8 times today's; everything else in the iteration is unchanged.
    now = evaluate(RELEASE, ruleset).values
    later = evaluate({**RELEASE, "serving_engine_release": "tensorrt-llm-0.7-or-later"}, ruleset).values
    old = evaluate({**RELEASE, "serving_engine_release": "tensorrt-llm-0.5"}, ruleset).values
    assert later["tpot_ms"] == pytest.approx(now["tpot_ms"])
    assert old["decode_kv_rereads"] == 8 and now["decode_kv_rereads"] == 1
    assert old["kv_read_s"] == pytest.approx(8 * now["kv_read_s"])
    assert old["decode_step_s"] - now["decode_step_s"] == pytest.approx(7 * now["kv_read_s"], rel=1e-6)
    assert old["tpot_ms"] > now["tpot_ms"]


def test_an_old_release_changes_nothing_for_a_model_without_grouped_queries(ruleset):
    # Llama 2 13B has 40 query and 40 KV heads: one block per head reads each cache once in any release
    mha = {**RELEASE, "model": "llama-2-13b"}
    now = evaluate(mha, ruleset).values
    old = evaluate({**mha, "serving_engine_release": "tensorrt-llm-0.5"}, ruleset).values
    assert old["decode_kv_rereads"] == 1 and old["tpot_ms"] == pytest.approx(now["tpot_ms"])


def test_the_quote_names_the_release_and_server_settings_it_was_given(tmp_path, ruleset):
    # A release typed as the bare number TensorRT-LLM's notes use ("0.5") is accepted, and the quote's
    # compute section names it beside the stack, with the batch limit and CUDA graphs the intake gave.
    from engine.job import run_job

    intake = tmp_path / "old-release.yaml"
    intake.write_text("customer: Test Co.\nworkload: online-inference\nmodel: llama-2-70b\ngpu: H200\n"
                      "gpu_count: 1\nprecision: fp8\nserving_engine: tensorrt-llm\nserving_engine_release: '0.5'\n"
                      "max_batch_size: 64\ncuda_graphs: 'off'\nprompt_tokens: 128\noutput_tokens: 2048\n"
                      "concurrency: 1\n", encoding="utf-8")
    job = run_job(intake, tmp_path / "out", ruleset=ruleset, formats=("html",))
    assert job.ok, job.problems
    page = " ".join((tmp_path / "out" / "old-release.quote.html").read_text(encoding="utf-8").split())
    assert "TensorRT-LLM 0.5" in page
    assert "Off (eager mode)" in page
    assert "Serving software&#39;s release" in page or "Serving software&#x27;s release" in page


# Llama 3.1 70B in FP8 on one H200, offline: the KV cache decides the batch
KV_MEMORY = {"customer": "Test Co.", "workload": "offline-inference", "model": "llama-3.1-70b", "precision": "fp8",
             "gpu": "H200", "gpu_count": 1, "tensor_parallel": 1, "prompt_tokens": 1000, "output_tokens": 1000,
             "requests_total": 3000}


@pytest.mark.parametrize("engine, share, kv_gb", [
    # M = 141 GiB = 151.398 GB; W = 72.651 GB of weights (capacity.yaml); A = 8,192 tokens x 8 bytes x 28,672
    # FFN units = 1.879 GB of working memory; 1 GB of CUDA context.
    ("vllm", None, 60.727),          # share of the whole card: 0.9 x 151.398 - 72.651 - 1.879 - 1
    ("vllm", 0.95, 68.297),          # 0.95 x 151.398 - 75.530
    ("tensorrt-llm", None, 68.280),  # share of what is free: 0.9 x (151.398 - 75.530)
    ("tensorrt-llm", 0.95, 72.074),  # 0.95 x 75.868
])
def test_the_kv_memory_share_is_taken_as_each_software_takes_it(ruleset, engine, share, kv_gb):
    job = {**KV_MEMORY, "serving_engine": engine, **({"kv_cache_memory_share": share} if share else {})}
    values = evaluate(job, ruleset).values
    assert values["kv_capacity_gb"] == pytest.approx(kv_gb, abs=0.002)


def test_more_kv_memory_holds_a_larger_batch_offline(ruleset):
    # TensorRT-LLM keeps an FP8 cache (163,840 bytes a token): 72.074 GB / 163,840 = 439,903 tokens at 0.95 against
    # 416,750 at 0.9; a request holds 1,000 + 1,000 / 2 tokens, so 293 requests instead of 277.
    job = {**KV_MEMORY, "serving_engine": "tensorrt-llm"}
    default = evaluate(job, ruleset).values
    raised = evaluate({**job, "kv_cache_memory_share": 0.95}, ruleset).values
    assert (default["batch_per_replica"], raised["batch_per_replica"]) == (277, 293)
    assert raised["output_tokens_per_s"] > default["output_tokens_per_s"]


def test_an_offline_batch_the_planner_fills_the_cache_with_fits_in_memory(ruleset):
    # The batch of 293 was sized on what a running request holds on average, 1,000 + 1,000 / 2 = 1,500 tokens:
    # its cache is 163,840 x 1,500 x 293 / 1e9 = 72.008 GB, and 72.651 GB of weights + 72.008 + 1 GB of context =
    # 145.66 GB of the card's 151.398. Counting every request at its full 2,000 tokens (96.01 GB, 169.66 GB in all)
    # told the customer that one H200 "cannot run this" - the job NVIDIA's perf overview ran at 2,823 tokens/s.
    values = evaluate({**KV_MEMORY, "serving_engine": "tensorrt-llm", "kv_cache_memory_share": 0.95}, ruleset).values
    assert values["running_request_tokens"] == 1500
    assert values["kv_cache_gb"] == pytest.approx(72.008, abs=0.001)
    assert values["memory_per_gpu_gb"] == pytest.approx(145.659, abs=0.002)
    assert values["fits_in_memory"]
    # online, every admitted request still counts at its full length (the seed's KV formula)
    online = evaluate({**KV_MEMORY, "workload": "online-inference", "serving_engine": "tensorrt-llm",
                       "concurrency": 293}, ruleset).values
    assert online["kv_cache_gb"] == pytest.approx(163_840 * 2_000 * 293 / 1e9, rel=1e-6)
