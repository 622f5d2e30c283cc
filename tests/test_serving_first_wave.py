"""A closed-loop test run sends its first `concurrency` requests at once: their prompts queue for the prefill together,
and the run's mean time to first token carries that wave. Expected numbers are derived by hand in the comments, or
checked against a published run; each test fails if the wave is removed."""

from __future__ import annotations

import math

import pytest

from engine.calc.evaluate import evaluate

BASE = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-8b", "gpu": "H100",
        "gpu_count": 1, "precision": "bf16", "concurrency": 32, "prompt_tokens": 1024, "output_tokens": 1024}
KEYS = ["ttft_ms", "steady_ttft_s", "first_wave_ttft_s", "first_wave_share", "first_wave_passes", "first_wave_requests",
        "prefill_alone_s", "pass_fixed_s", "calibration_prefill_time", "batch_per_replica"]


def serve(ruleset, **intake):
    return evaluate({**BASE, **intake}, ruleset, only=KEYS).values


def test_users_arriving_one_by_one_have_no_wave(ruleset):
    # a quote for users (no test run's request count) and a run at a set arrival rate: the steady time alone
    for v in (serve(ruleset), serve(ruleset, requests_total=100, requests_per_second=2)):
        assert v["first_wave_share"] == 0
        assert v["ttft_ms"] == pytest.approx(v["steady_ttft_s"] * 1000)


def test_one_wave_waits_for_its_prompts_in_passes_of_the_token_budget(ruleset):
    # 32 prompts of 1,024 tokens = 32,768 tokens in passes of 8,192: 4 passes of 8 prompts. The prompts of the k-th
    # pass get their first token at k/4 of the wave's prefill, (4 + 1) / (2 x 4) = 5/8 of it on average. The wave's
    # prefill: each prompt's own arithmetic (a prompt alone less what every pass pays) x 32, plus 4 passes' fixed part
    v = serve(ruleset, requests_total=32)
    assert v["first_wave_share"] == 1 and v["first_wave_requests"] == 32 and v["first_wave_passes"] == 4
    own = v["prefill_alone_s"] * v["calibration_prefill_time"] - v["pass_fixed_s"]
    wave = 32 * own + 4 * v["pass_fixed_s"]
    assert v["first_wave_ttft_s"] == pytest.approx(wave * 5 / 8)
    assert v["ttft_ms"] == pytest.approx(max(v["first_wave_ttft_s"], v["steady_ttft_s"]) * 1000)
    # the wave is several times the steady time here: 32 prompts queue, not one
    assert v["first_wave_ttft_s"] > 3 * v["steady_ttft_s"]


def test_later_requests_arrive_as_earlier_ones_finish(ruleset):
    # 100 requests, 32 in flight: 32 of them (0.32) in the wave, the other 68 at the steady time
    one, run = serve(ruleset, requests_total=32), serve(ruleset, requests_total=100)
    assert run["first_wave_share"] == pytest.approx(0.32)
    expected = 0.32 * one["first_wave_ttft_s"] + 0.68 * run["steady_ttft_s"]
    assert run["ttft_ms"] == pytest.approx(expected * 1000)


def test_a_one_prompt_wave_is_a_prompt_alone(ruleset):
    # one request in flight: one prompt in one pass, (1 + 1) / 2 = all of it; no longer than the steady time
    v = serve(ruleset, concurrency=1, requests_total=10)
    assert v["first_wave_passes"] == 1
    assert v["first_wave_ttft_s"] == pytest.approx(v["prefill_alone_s"] * v["calibration_prefill_time"])
    assert v["ttft_ms"] == pytest.approx(v["steady_ttft_s"] * 1000)


def test_a_published_one_wave_run_is_reproduced(ruleset):
    # SGLang PR #31044 (held out, H12-I36): MiniMax-M2.7 FP8 on 8 MI300X, 4,096 requests at once, 1,000-token
    # prompts drawn from [1, 1000] (mean 501): mean TTFT 18,251 ms. Before the wave the estimate was 424 ms (-98%);
    # the wave's prompt tokens in passes of 8,192 gave it within a quarter while AMD's expert multiplies were
    # taken at the early-2025 builds' 9.4x the dense time. At the current builds' 2.0x (serving.yaml,
    # stack_moe_gemm; docs/accuracy.md, twenty-fifth stop) each pass runs faster: 7,344 ms, -60%, the wave
    # still 17 times the estimate without it; named as an early-2025 SGLang build, 14,735 ms
    intake = {"serving_engine": "sglang", "model": "custom", "params_billion": 228.69, "active_params_billion": 11.03,
              "layers": 62, "hidden_size": 3072, "attention_heads": 48, "kv_heads": 8, "vocab_size": 200064,
              "gpu": "MI300X", "gpu_count": 8, "tensor_parallel": 8, "expert_parallel": 8, "precision": "fp8",
              "kv_cache_precision": "fp8", "concurrency": 4096, "prompt_tokens": 501, "output_tokens": 501,
              "requests_total": 4096}
    v = serve(ruleset, **intake)
    assert v["first_wave_passes"] == math.ceil(v["first_wave_requests"] * 501 / 8192)
    assert v["ttft_ms"] > 10 * 424
    early = serve(ruleset, **intake, serving_engine_release="sglang-0.4.3-or-earlier")
    assert early["ttft_ms"] == pytest.approx(18251, rel=0.25)


def test_a_test_run_ends_with_fewer_requests_in_flight(ruleset):
    # 100 requests at 32 in flight, every answer the same length: 4 waves (32, 32, 32, 4) deliver 100 answers in the
    # time of 4 full ones, 100 / 32 / 4 = 0.78125 of the steady rate; 96 requests, 3 full waves: all of it
    keys = ["output_tokens_per_s", "test_run_full_share", "batch_per_replica", "decode_step_s", "calibration_duty"]
    run = evaluate({**BASE, "requests_total": 100}, ruleset, only=keys).values
    whole = evaluate({**BASE, "requests_total": 96}, ruleset, only=keys).values
    users = evaluate(BASE, ruleset, only=keys).values
    assert run["batch_per_replica"] >= 32
    assert run["test_run_full_share"] == pytest.approx(100 / 32 / 4)
    assert whole["test_run_full_share"] == 1 and users["test_run_full_share"] == 1
    assert run["output_tokens_per_s"] == pytest.approx(users["output_tokens_per_s"] * 0.78125)


def test_the_median_request_waits_for_the_wave_only_when_the_wave_is_most_of_the_run(ruleset):
    # 150 requests at 32 in flight: the wave is 32 / 150 = 21% of them, the middle request arrives alone (steady);
    # 40 requests at 32: 80% are in the wave, the middle one waits for it. The mean weighs the wave by its share
    keys = ["ttft_median_ms", "ttft_ms", "steady_ttft_s", "first_wave_ttft_s", "first_wave_share"]
    long = evaluate({**BASE, "requests_total": 150}, ruleset, only=keys).values
    short = evaluate({**BASE, "requests_total": 40}, ruleset, only=keys).values
    assert long["ttft_median_ms"] == pytest.approx(long["steady_ttft_s"] * 1000)
    assert long["ttft_ms"] > long["ttft_median_ms"]
    assert short["first_wave_share"] == pytest.approx(0.8)
    assert short["ttft_median_ms"] == pytest.approx(short["first_wave_ttft_s"] * 1000)


WAVE_KEYS = KEYS + ["repeat_waves", "repeat_wave_ttft_s", "stack_separate_prefill", "ttft_median_ms"]


def test_fixed_lengths_bring_every_later_group_back_at_once(ruleset):
    # 320 requests at 32 in flight, every one 1,024 tokens in and out (vLLM's random dataset): the wave's 32 prompts
    # take 4 passes of 8,192 tokens; vLLM folds prompts into running iterations, so the 8 prompts of a pass decode
    # while the next pass runs and come back as groups of 8, one iteration apart. A pass is the wave's prefill over
    # 4 passes = first_wave_ttft_s x 2 / (4 + 1). Each group is sent when the one before it has had its pass
    # launched, so it waits that pass and its own; the first waits a decoding iteration and its pass:
    # (1 + 2 + 2 + 2) / 4 = 7/4 passes. The mean: 32/320 in the wave, 288/320 in later groups
    v = evaluate({**BASE, "requests_total": 320, "request_lengths": "fixed"}, ruleset, only=WAVE_KEYS).values
    assert v["repeat_waves"] and not v["stack_separate_prefill"] and v["first_wave_passes"] == 4
    later = max(v["steady_ttft_s"], v["first_wave_ttft_s"] * 2 / 5 * 7 / 4)
    assert v["repeat_wave_ttft_s"] == pytest.approx(later)
    assert later > 2 * v["steady_ttft_s"]            # a pass of 8 prompts, not one prompt: the test can fail
    assert v["ttft_ms"] == pytest.approx((0.1 * v["first_wave_ttft_s"] + 0.9 * later) * 1000)
    assert v["ttft_median_ms"] == pytest.approx(later * 1000)
    # lengths drawn at random: the groups spread out, the later requests arrive one by one
    varied = evaluate({**BASE, "requests_total": 320}, ruleset, only=WAVE_KEYS).values
    assert not varied["repeat_waves"]
    assert varied["ttft_ms"] == pytest.approx((0.1 * varied["first_wave_ttft_s"] + 0.9 * varied["steady_ttft_s"]) * 1000)


def test_a_run_measured_over_a_set_time_meets_the_groups_without_a_request_count(ruleset):
    # GenAI-Perf's concurrency mode keeps 32 requests in flight for its measurement windows, every one 1,024 tokens in
    # and out: no request count, so no first wave weighs on the mean (share 0), but the groups come back as they do in
    # a run of 320: each later request waits for the pass before its own and its own, 7/4 of the wave's prefill x 2 / (4 + 1)
    v = evaluate({**BASE, "request_lengths": "fixed"}, ruleset, only=WAVE_KEYS).values
    assert v["repeat_waves"] and v["first_wave_share"] == 0 and v["first_wave_passes"] == 4
    later = max(v["steady_ttft_s"], v["first_wave_ttft_s"] * 2 / 5 * 7 / 4)
    assert later > 2 * v["steady_ttft_s"]            # a pass of 8 prompts, not one prompt: the test can fail
    assert v["ttft_ms"] == pytest.approx(later * 1000) and v["ttft_median_ms"] == pytest.approx(later * 1000)
    # the same run with lengths drawn at random: one by one
    varied = evaluate(BASE, ruleset, only=WAVE_KEYS).values
    assert not varied["repeat_waves"] and varied["ttft_ms"] == pytest.approx(varied["steady_ttft_s"] * 1000)


def test_a_stack_that_prefills_apart_brings_the_whole_wave_back(ruleset):
    # SGLang runs the wave's 4 passes before any of it decodes: the 32 start decoding together, finish together and
    # return whole, so every later request waits as a first-wave one did
    v = evaluate({**BASE, "serving_engine": "sglang", "requests_total": 320, "request_lengths": "fixed"}, ruleset,
                 only=WAVE_KEYS).values
    assert v["stack_separate_prefill"] and v["first_wave_passes"] == 4
    assert v["repeat_wave_ttft_s"] == pytest.approx(max(v["steady_ttft_s"], v["first_wave_ttft_s"]))
    assert v["ttft_ms"] == pytest.approx(max(v["steady_ttft_s"], v["first_wave_ttft_s"]) * 1000)


def test_users_at_a_rate_meet_no_waves_whatever_their_lengths(ruleset):
    v = evaluate({**BASE, "requests_total": 320, "requests_per_second": 4}, ruleset, only=WAVE_KEYS).values
    assert not v["repeat_waves"] and v["ttft_ms"] == pytest.approx(v["steady_ttft_s"] * 1000)


def _simulation():
    from support.modules import load_file
    from tests.conftest import ROOT
    return load_file(ROOT / "scripts" / "wave_simulation.py")


def test_the_scheduler_simulation_shows_what_repeat_waves_assumes():
    # scripts/wave_simulation.py, 32 requests of 1,024 + 1,024 tokens, steps of 8,192 tokens (docs/accuracy.md's table):
    # fixed lengths, a scheduler folding prompts in gets back groups one iteration apart, each waiting the pass before
    # its own and its own: between one pass and the rule's 7/4 of one at 4 passes (far above a prompt alone), one
    # prefilling apart the whole wave. Answers drawn from 80-100% of their length dissolve both groups: a request then
    # waits out the iteration launched as it was sent (the client's round trip) and its prompt, under two steps alone
    sim = _simulation()
    alone, one_pass = sim.step_s(1024), sim.step_s(sim.BUDGET)
    first, later = sim.simulate(32, 1024, 1024, 0.0, separate_prefill=False)
    assert 1.3 * one_pass < later < 1.75 * one_pass and later < 0.7 * first
    first, later = sim.simulate(32, 1024, 1024, 0.0, separate_prefill=True)
    assert later == pytest.approx(first, rel=0.02)
    for separate in (False, True):
        first, later = sim.simulate(32, 1024, 1024, 0.2, separate_prefill=separate)
        assert 1.1 * alone < later < 2 * alone < first


QUEUE_KEYS = WAVE_KEYS + ["batch_queue_s", "later_ttft_s", "tpot_ms", "requests_in_flight", "running_batch_capacity",
                          "requests_per_replica", "closed_loop_test_run"]
LONG_PROMPTS = {**BASE, "model": "llama-3-8b", "gpu": "H200", "serving_engine": "tensorrt-llm", "max_batch_size": 64,
                "kv_cache_memory_share": 0.95, "seq_len": 51002, "concurrency": 64, "prompt_tokens": 50002,
                "output_tokens": 1000, "request_lengths": "fixed"}


def test_a_test_run_holding_more_than_the_cache_queues_for_a_place(ruleset):
    # 64 requests of 50,002 + 1,000 tokens kept in flight on one H200, the cache holding fewer: the rest queue. Little's
    # law: each request is in the system 64 / throughput, the batch serves k at a time for a lifetime of its first token
    # plus 999 tokens, so it waits (64 / k - 1) lifetimes for a place; 1,024 requests, the first wave 1/16 of them
    # waiting half that. TensorRT-LLM's gptManagerBenchmark of that run (H58-24, held out): mean TTFT 194,107 ms
    v = evaluate({**LONG_PROMPTS, "requests_total": 1024}, ruleset, only=QUEUE_KEYS).values
    k = v["requests_in_flight"]
    assert v["closed_loop_test_run"] and 1 <= v["running_batch_capacity"] < 64 and k == v["running_batch_capacity"]
    lifetime = v["later_ttft_s"] + 999 * v["tpot_ms"] / 1000
    assert v["batch_queue_s"] == pytest.approx((64 / k - 1) * lifetime)
    share = 64 / 1024
    expected = (1 - share) * (v["later_ttft_s"] + v["batch_queue_s"]) + share * (
        max(v["steady_ttft_s"], v["first_wave_ttft_s"]) + v["batch_queue_s"] / 2)
    assert v["ttft_ms"] == pytest.approx(expected * 1000)
    assert v["ttft_ms"] == pytest.approx(194107, rel=0.15)
    assert v["ttft_ms"] > 20 * v["later_ttft_s"] * 1000                  # the queue, not the prompt, sets it


def test_no_queue_for_users_a_stack_cap_or_a_cache_with_room(ruleset):
    # users arriving on their own (no test run) are not queued by the rules; nor a run the cache holds whole (4
    # requests); nor one whose stack's default batch cap, not its cache, holds it back (vLLM's 256 default, 300 short
    # requests: its V1 engine admits 1,024 on large GPUs)
    users = evaluate({k: v for k, v in LONG_PROMPTS.items() if k != "request_lengths"}, ruleset, only=QUEUE_KEYS).values
    roomy = evaluate({**LONG_PROMPTS, "concurrency": 4, "requests_total": 64}, ruleset, only=QUEUE_KEYS).values
    capped = evaluate({**BASE, "gpu": "H200", "concurrency": 300, "requests_total": 3000, "prompt_tokens": 128,
                       "output_tokens": 128}, ruleset, only=QUEUE_KEYS).values
    assert not users["closed_loop_test_run"] and users["batch_queue_s"] == 0
    assert roomy["requests_in_flight"] == 4 and roomy["batch_queue_s"] == 0
    assert capped["requests_in_flight"] < 300 and capped["running_batch_capacity"] >= 300 and capped["batch_queue_s"] == 0
