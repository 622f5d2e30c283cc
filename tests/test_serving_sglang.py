"""SGLang under load: its default memory share, its scheduler's admission, its separate prompt passes and the
batch above which it decodes without CUDA graphs (serving.yaml; docs/accuracy.md, serve15)."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Llama 3.3 70B in BF16 on 4 H200 at TP 4, offline, 1,000 + 1,000 tokens: the KV cache decides the batch
OFFLINE = {"customer": "Test Co.", "workload": "offline-inference", "model": "llama-3.3-70b", "precision": "bf16",
           "gpu": "H200", "gpu_count": 4, "tensor_parallel": 4, "prompt_tokens": 1000, "output_tokens": 1000,
           "requests_total": 3000}


@pytest.mark.parametrize("engine, share, kv_gb", [
    # M = 141 GiB = 151.3976 GB; W = 35.275 GB of weights per GPU; A = 0.46976 GB of working memory; 1 GB context.
    ("sglang", 0.85, 91.943),   # mem_fraction_static at TP 4: 0.85 x 151.3976 - 35.275 - 0.46976 - 1
    ("vllm", 0.90, 99.513),     # gpu_memory_utilization 0.9: 0.9 x 151.3976 - 36.745
])
def test_sglang_sets_aside_its_own_default_share_by_tensor_parallel_size(ruleset, engine, share, kv_gb):
    values = evaluate({**OFFLINE, "serving_engine": engine}, ruleset).values
    assert values["kv_memory_share"] == pytest.approx(share)
    assert values["kv_capacity_gb"] == pytest.approx(kv_gb, abs=0.002)


@pytest.mark.parametrize("tp, share", [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81)])
def test_sglang_memory_share_by_tp(ruleset, tp, share):
    # ServerArgs.__post_init__ (v0.4): 0.88 on one GPU, 0.87 at TP 2, 0.85 at TP 4, 0.81 at TP 8
    job = {**OFFLINE, "model": "llama-3.1-8b", "serving_engine": "sglang", "gpu_count": tp, "tensor_parallel": tp}
    assert evaluate(job, ruleset).values["kv_memory_share"] == pytest.approx(share)


def test_an_intake_share_replaces_the_stack_default(ruleset):
    values = evaluate({**OFFLINE, "serving_engine": "sglang", "kv_cache_memory_share": 0.9}, ruleset).values
    assert values["kv_memory_share"] == pytest.approx(0.9)


def test_sglang_admission_reserves_a_tenth_of_what_running_answers_may_still_write(ruleset):
    # 91.943 GB x 4 GPUs / 327,680 bytes a token = 1,122,353 tokens. A running request holds its prompt and, on
    # average, half its answer, and reserves new_token_ratio 0.1 of the rest: 1,000 + 1,000 x (0.5 + 0.5 x 0.1)
    # = 1,550 tokens -> floor(1,122,353 / 1,550) = 724 requests (748 with nothing reserved).
    values = evaluate({**OFFLINE, "serving_engine": "sglang"}, ruleset).values
    assert values["kv_capacity_tokens"] == 1122353
    assert values["stack_admission_reserve"] == pytest.approx(0.1)
    assert values["running_batch_capacity"] == 724 and values["batch_per_replica"] == 724


# Llama 3.1 8B in BF16 on one H100, 64 requests of 1,000 + 100 tokens
ONLINE = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-8b", "precision": "bf16",
          "gpu": "H100", "gpu_count": 1, "tensor_parallel": 1, "prompt_tokens": 1000, "output_tokens": 100,
          "concurrency": 64, "bandwidth_share_16bit": 0.8, "iteration_overhead_ms": 0.94,
          "layer_kernel_floor_ms": 0}


def test_sglang_runs_new_prompts_as_their_own_pass_which_reads_the_weights_again(ruleset):
    # 64 requests of 100 tokens: 64 / 100 = 0.64 of the iterations are followed by a prefill pass. Each reads the
    # 15.0093e9 bytes of weights again at 0.8 of 3,350 GB/s (5.6005 ms) and pays the fixed 0.94 ms (one GPU: no
    # all-reduce): 0.64 x (5.6005 + 0.94) = 4.1859 ms a decode iteration.
    sglang = evaluate({**ONLINE, "serving_engine": "sglang"}, ruleset).values
    trt = evaluate({**ONLINE, "serving_engine": "tensorrt-llm"}, ruleset).values
    assert sglang["stack_separate_prefill"] and not trt["stack_separate_prefill"]
    assert sglang["prompt_pass_s"] == pytest.approx(0.0041859, rel=1e-4)
    assert trt["prompt_pass_s"] == 0


def test_sglang_decodes_batches_above_160_without_cuda_graphs(ruleset):
    # cuda_graph_max_bs 160: at 64 requests the decode step replays a graph (0.94 ms of fixed time); at 200 it
    # launches its 32 layers eagerly, 0.047 ms each: 0.94 + 0.047 x 32 = 2.444 ms.
    small = evaluate({**ONLINE, "serving_engine": "sglang"}, ruleset).values
    large = evaluate({**ONLINE, "serving_engine": "sglang", "concurrency": 200, "output_tokens": 1000}, ruleset).values
    assert small["cuda_graphs_used"] and small["iteration_fixed_s"] == pytest.approx(0.00094)
    assert large["batch_per_replica"] == 200 and not large["cuda_graphs_used"]
    assert large["iteration_fixed_s"] == pytest.approx(0.002444)
    # vLLM keeps its graphs at that batch (no limit modelled)
    vllm = evaluate({**ONLINE, "serving_engine": "vllm", "concurrency": 200, "output_tokens": 1000}, ruleset).values
    assert vllm["cuda_graphs_used"]
