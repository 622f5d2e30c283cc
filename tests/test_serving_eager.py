"""Serving without CUDA graphs: the host launches every layer from Python, and a small iteration waits for it.
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

BASE = {"customer": "Test Co.", "workload": "online-inference", "gpu": "H100", "gpu_count": 1, "tensor_parallel": 1,
        "prompt_tokens": 128, "output_tokens": 512, "precision": "bf16", "serving_engine": "vllm"}
KEYS = ["decode_step_s", "eager_launch_floor_s", "iteration_fixed_s", "n_layers", "cuda_graphs_used"]


def test_a_small_model_in_eager_mode_runs_at_the_hosts_pace(ruleset):
    # Qwen2.5 1.5B has 28 layers. Eager, the host launches each in 0.2 ms (stack_eager_launch_ms) and the iteration's
    # fixed time is 0.47 ms + 28 x (0.023 + 0.047) ms = 2.43 ms (the iteration, each layer's kernels, eager mode's
    # addition): no iteration is shorter than 28 x 0.2 + 2.43 = 8.03 ms.
    # The GPU's own work is about 3 GB of weights read at 0.8 of 3,350 GB/s, a little over 1 ms: the floor is the step
    eager = evaluate({**BASE, "model": "qwen2.5-1.5b", "cuda_graphs": "off", "concurrency": 1}, ruleset, only=KEYS).values
    graphs = evaluate({**BASE, "model": "qwen2.5-1.5b", "concurrency": 1}, ruleset, only=KEYS).values
    assert eager["n_layers"] == 28 and not eager["cuda_graphs_used"]
    assert eager["iteration_fixed_s"] == pytest.approx(2.43e-3, rel=1e-3)
    assert eager["eager_launch_floor_s"] == pytest.approx(8.03e-3, rel=1e-3)
    assert eager["decode_step_s"] == pytest.approx(eager["eager_launch_floor_s"])
    # with graphs there is no floor, and the step is the GPU's: under 3 ms
    assert graphs["eager_launch_floor_s"] == 0 and graphs["decode_step_s"] < 3e-3


def test_a_large_batch_hides_the_launches_behind_the_gpus_work(ruleset):
    # Llama 3.1 70B at TP 8 with 128 requests: 80 layers x 0.2 ms + 0.47 + 80 x (0.023 + 0.047) = 22.07 ms of launches, under the
    # GPU's iteration (the weights alone are 141 GB / 8 read at 0.8 of 3,350 GB/s, 6.6 ms, and 128 tokens' multiplies
    # and their KV reads come on top): eager mode costs only its added 0.047 ms a layer, the floor does not bind
    values = {**BASE, "model": "llama-3.1-70b", "gpu_count": 8, "tensor_parallel": 8, "concurrency": 128,
              "cuda_graphs": "off", "prompt_tokens": 2000, "output_tokens": 2000}
    eager = evaluate(values, ruleset, only=KEYS).values
    assert eager["eager_launch_floor_s"] == pytest.approx(80 * 0.2e-3 + 0.47e-3 + 80 * (0.023e-3 + 0.047e-3), rel=1e-3)
    assert eager["decode_step_s"] > eager["eager_launch_floor_s"]


def test_stacks_that_launch_from_cpp_have_no_floor(ruleset):
    # TensorRT-LLM launches from C++ (stack_eager_launch_ms 0): turning graphs off sets no floor
    trt = evaluate({**BASE, "model": "qwen2.5-1.5b", "cuda_graphs": "off", "concurrency": 1,
                    "serving_engine": "tensorrt-llm"}, ruleset, only=KEYS).values
    assert trt["eager_launch_floor_s"] == 0
    assert trt["decode_step_s"] < 3e-3


def test_eager_tgi_over_several_gpus_waits_for_each_all_reduce_call_from_python(ruleset):
    # CodeLlama 34B has 48 layers. TGI 1.x in eager mode issues each layer's two all-reduces through torch.distributed:
    # 0.18 ms of host time each (stack_eager_allreduce_ms, from TGI issue #1315). On 4 H100 the floor is
    # 48 x (0.2 + 2 x 0.18) = 26.88 ms of launches plus the fixed 0.47 + 48 x (0.023 + 0.047) = 3.83 ms -> 30.71 ms
    # (TGI #1315 measured 31.8 ms a token); on one GPU no all-reduce: 48 x 0.2 + 3.83 = 13.43 ms
    values = {**BASE, "model": "codellama-34b", "serving_engine": "tgi", "cuda_graphs": "off", "concurrency": 1,
              "precision": "fp16", "prompt_tokens": 128, "output_tokens": 100}
    four = evaluate({**values, "gpu_count": 4, "tensor_parallel": 4}, ruleset, only=KEYS + ["stack_eager_allreduce_ms"]).values
    one = evaluate(values, ruleset, only=KEYS + ["stack_eager_allreduce_ms"]).values
    assert four["stack_eager_allreduce_ms"] == pytest.approx(0.18)
    assert four["eager_launch_floor_s"] == pytest.approx(30.71e-3, rel=1e-3)
    assert one["eager_launch_floor_s"] == pytest.approx(13.43e-3, rel=1e-3)


def test_vllms_custom_all_reduce_adds_no_host_time_except_over_pcie_beyond_two_gpus(ruleset):
    # vLLM's custom all-reduce is one kernel among the layer's (inside an NVLink server); on more than two GPUs without
    # NVLink vLLM turns it off and calls NCCL from Python, at TGI's 0.18 ms a call
    values = {**BASE, "model": "llama-3.1-8b", "cuda_graphs": "off", "concurrency": 1, "gpu_count": 4, "tensor_parallel": 4}
    nvlink = evaluate(values, ruleset, only=KEYS + ["stack_eager_allreduce_ms", "tp_link"]).values
    pcie = evaluate({**values, "gpu": "L40S"}, ruleset, only=KEYS + ["stack_eager_allreduce_ms", "tp_link"]).values
    assert nvlink["tp_link"] == "scale-up" and nvlink["stack_eager_allreduce_ms"] == 0
    assert pcie["tp_link"] == "pcie" and pcie["stack_eager_allreduce_ms"] == pytest.approx(0.18)
    # with graphs on, nothing is issued from Python
    graphs = evaluate({**values, "gpu": "L40S", "cuda_graphs": "on"}, ruleset, only=KEYS + ["stack_eager_allreduce_ms"]).values
    assert graphs["stack_eager_allreduce_ms"] == 0 and graphs["eager_launch_floor_s"] == 0
