"""Pipelines in serving: software that splits a model by layers across GPUs runs them in turn, a pipeline's stages
take their own GPUs, and a continuous-batching server keeps a micro-batch on every stage (rules/serving.yaml,
stack_layer_split, pipeline_in_flight; rules/scaling.yaml, tp and pp; engine/calc/planner.py)."""

from __future__ import annotations

import pytest

from engine.calc.planner import model_copies, planned

# Qwen2-72B (145.4 GB of BF16 weights) on two A100 80GB, one request, as the Qwen2 speed benchmark ran it
QWEN2_72B = {"customer": "Test Co.", "workload": "online-inference", "model": "qwen2-72b", "precision": "bf16",
             "gpu": "A100-80GB", "gpu_count": 2, "prompt_tokens": 1, "output_tokens": 2048, "concurrency": 1}


def test_transformers_puts_half_the_layers_on_each_gpu_and_reads_them_in_turn(ruleset):
    # device_map="auto": 145.4 GB over 85.9 GB x the 0.6 weights share = 2.8 GPUs' worth, capped at the 2 asked
    # for, so 2 stages of 40 layers, no tensor parallelism. Each token reads one stage's 72.7 GB after the other's:
    # the step's weight read is the whole 145.4 GB at one GPU's bandwidth, as on a single (larger) GPU.
    results, plan = planned({**QWEN2_72B, "serving_engine": "transformers"}, ruleset)
    got = results.values
    assert (got["tp"], got["pp"], got["dp"]) == (1, 2, 1)
    assert plan.chosen["tensor_parallel"] == 1
    assert got["tp_sync_s"] == 0                           # no all-reduces without tensor parallelism
    one_stage = planned({**QWEN2_72B, "serving_engine": "transformers", "pipeline_parallel": 1,
                         "tensor_parallel": 1}, ruleset)[0].values
    assert got["weight_read_s"] == pytest.approx(one_stage["weight_read_s"])


def test_vllm_splits_every_layer_over_both_gpus(ruleset):
    # vLLM shards each layer (tensor parallelism 2): each GPU reads half the weights per step, in parallel
    got = planned({**QWEN2_72B, "serving_engine": "vllm"}, ruleset)[0].values
    assert (got["tp"], got["pp"]) == (2, 1)
    assert got["tp_sync_s"] > 0


def test_a_pipeline_given_on_every_gpu_leaves_no_gpu_for_tensor_parallelism(ruleset):
    # vLLM asked for 2 pipeline stages on 2 GPUs: 2 / 2 = 1 GPU per stage, so tensor parallelism 1 (it was 2,
    # four GPUs' worth on two)
    results, plan = planned({**QWEN2_72B, "serving_engine": "vllm", "pipeline_parallel": 2}, ruleset)
    assert (results.values["tp"], results.values["pp"], results.values["dp"]) == (1, 2, 1)
    assert plan.chosen["tensor_parallel"] == 1
    # the layout the quote shows names the stages and who chose them, and counts one copy of the model (it said 2)
    assert (plan.chosen["pipeline_parallel"], plan.by["pipeline_parallel"]) == (2, "intake")
    assert model_copies(plan.chosen, 2) == 1
    layered = planned({**QWEN2_72B, "serving_engine": "transformers"}, ruleset)[1]
    assert (layered.chosen["pipeline_parallel"], layered.by["pipeline_parallel"]) == (2, "planner")


def test_layer_split_adds_replicas_not_speed_when_the_model_fits_on_one_gpu(ruleset):
    # Qwen2-7B (15.2 GB) fits one A100: Transformers on 8 GPUs runs 8 copies, one stage each; one request
    # streams exactly as fast as on one GPU
    small = {**QWEN2_72B, "model": "qwen2-7b", "serving_engine": "transformers"}
    eight = planned({**small, "gpu_count": 8}, ruleset)[0].values
    one = planned({**small, "gpu_count": 1}, ruleset)[0].values
    assert (eight["tp"], eight["pp"], eight["dp"]) == (1, 1, 8)
    assert eight["output_tokens_per_s"] == pytest.approx(one["output_tokens_per_s"])


def test_the_held_out_layer_split_row_is_quoted_within_ten_percent(ruleset):
    # Qwen2 speed benchmark (validation/holdout.yaml, H4-11): 7.45 tokens/s measured; quoted 12.1 (+62%) while
    # the two GPUs were taken as tensor parallelism
    got = planned({**QWEN2_72B, "serving_engine": "transformers", "pipeline_parallel": 2,
                   "serving_engine_release": "transformers-4.51-or-earlier"}, ruleset)[0].values
    assert got["output_tokens_per_s"] / 7.45 - 1 == pytest.approx(0, abs=0.10)


# --- a continuous-batching server keeps a micro-batch on every stage (rules/serving.yaml, pipeline_in_flight)

LLAMA_70B_OFFLINE = {"customer": "Test Co.", "workload": "offline-inference", "model": "llama-3.1-70b", "precision": "fp8",
                     "gpu": "H100", "gpu_count": 2, "pipeline_parallel": 2, "tensor_parallel": 1, "prompt_tokens": 1000,
                     "output_tokens": 1000, "requests_total": 3000}


def test_vllm_pipeline_stages_work_at_once_on_their_own_micro_batches(ruleset):
    # vLLM's two virtual engines: every stage busy, so the batch's own work (multiplies past the weight read, KV
    # reads, prompt attention, element-wise and logits) is shared by two GPUs; each stage still reads its half of
    # the weights once per micro-batch, the whole model per iteration; all-reduces (none at TP 1), the fixed time
    # and separate prompt passes stay whole
    got = planned({**LLAMA_70B_OFFLINE, "serving_engine": "vllm"}, ruleset)[0].values
    assert got["pipeline_in_flight"] == 2 and got["batch_per_replica"] > 2
    batch_work = (got["gemm_step_s"] - got["weight_read_s"] + got["kv_read_s"] + got["prompt_attention_s"]
                  + got["serving_elementwise_token_s"] * (got["batch_per_replica"] + got["prefill_tokens_per_iteration"])
                  + got["logits_token_s"] * got["batch_per_replica"])
    whole = got["weight_read_s"] + got["tp_sync_s"] + got["iteration_fixed_s"] + got["prompt_pass_s"]
    assert got["decode_step_s"] == pytest.approx(batch_work / 2 + whole)
    assert got["output_tokens_per_s"] == pytest.approx(got["batch_per_replica"] / got["decode_step_s"])


def test_layer_split_software_and_a_lone_request_keep_one_micro_batch(ruleset):
    # Transformers runs its stages in turn; one request cannot be in two stages at once
    layered = planned({**LLAMA_70B_OFFLINE, "serving_engine": "transformers", "precision": "bf16"}, ruleset)[0].values
    lone = planned({**LLAMA_70B_OFFLINE, "serving_engine": "vllm", "workload": "online-inference", "concurrency": 1},
                   ruleset)[0].values
    assert layered["pipeline_in_flight"] == 1 and lone["pipeline_in_flight"] == 1


def test_the_quote_tells_the_customer_that_layer_split_gpus_add_memory_not_speed(ruleset):
    # Transformers over two A100s for Qwen2-72B: two stages in turn, said in the quote with the stage count;
    # vLLM on the same GPUs splits every layer and says nothing of the kind
    layered = planned({**QWEN2_72B, "serving_engine": "transformers"}, ruleset)[0]
    sharded = planned({**QWEN2_72B, "serving_engine": "vllm"}, ruleset)[0]
    (notice,) = [n for n in layered.warnings if n.code == "layers_in_turn"]
    assert "2 stages" in notice.message["en"] and "memory, not speed" in notice.message["en"]
    assert "2 段" in notice.message["zh-TW"] and "2 段" in notice.message["zh-CN"]
    assert not [n for n in sharded.warnings if n.code == "layers_in_turn"]


def test_the_kv_cache_note_names_no_other_serving_software(ruleset):
    # it used to say what vLLM, TensorRT-LLM and Optimum Habana do, on a quote for Transformers too
    got = planned({**QWEN2_72B, "serving_engine": "transformers"}, ruleset)[0]
    (notice,) = [n for n in got.warnings if n.code == "kv_cache_format"]
    assert "BF16" in notice.message["en"]
    assert not any(stack in text for text in notice.message.values()
                   for stack in ("vLLM", "TensorRT-LLM", "Optimum Habana"))
