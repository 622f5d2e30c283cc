"""A group of GPUs larger than what their GPU-to-GPU link joins talks over PCIe: serving's all-reduces and
training's gradient and tensor-parallel traffic. Expected numbers are derived by hand in the comments; each test
fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

BASE = {"customer": "Test Co.", "workload": "online-inference", "model": "llama-3.1-8b", "gpu_count": 1,
        "prompt_tokens": 128, "output_tokens": 128, "precision": "bf16"}


@pytest.mark.parametrize("gpu, tp, link, latency_us, kind", [
    # A100 PCIe: one NVLink bridge joins two GPUs (600 / 2 = 300 GB/s each way); a TP-4 or TP-8 group is
    # larger than the pair, so its all-reduce crosses PCIe Gen4 x16: 64 / 2 = 32 GB/s each way
    ("A100-PCIe-80GB", 2, 300.0, 10.0, "scale-up"), ("A100-PCIe-80GB", 4, 32.0, 24.6, "pcie"),
    ("A100-PCIe-80GB", 8, 32.0, 48.6, "pcie"),
    # L40S has no GPU-to-GPU link at all: PCIe from two GPUs up. NCCL over PCIe: 6.6 µs + 3 µs per ring
    # step, 2 (n - 1) steps: 12.6 µs at TP 2, 24.6 at TP 4, 48.6 at TP 8 (8x RTX 4090 measure 42, 8x 3090 54)
    ("L40S", 2, 32.0, 12.6, "pcie"), ("L40S", 8, 32.0, 48.6, "pcie"),
    # H100 SXM behind NVSwitch: never PCIe, the one-shot kernel's 10 µs
    ("H100", 8, 450.0, 10.0, "scale-up"),
])
def test_a_group_past_its_nvlink_bridge_all_reduces_over_pcie(ruleset, gpu, tp, link, latency_us, kind):
    values = {**BASE, "model": "llama-3.1-70b", "gpu": gpu, "gpu_count": tp, "tensor_parallel": tp,
              "precision": "fp8", "concurrency": 1, "serving_engine": "vllm"}
    got = evaluate(values, ruleset, only=["tp_link", "allreduce_link_gb_s", "allreduce_latency_s"]).values
    assert got["tp_link"] == kind
    assert got["allreduce_link_gb_s"] == pytest.approx(link)
    assert got["allreduce_latency_s"] == pytest.approx(latency_us * 1e-6)


@pytest.mark.parametrize("gpu, link, kind", [
    # H100 SXM, TP 16 over two 8-GPU servers: NVSwitch joins only a server's 8, so the group's rings cross between
    # the servers through the 8 GPUs' 400 Gb/s ports, 8 x 50 = 400 GB/s together, below NVLink's 450 each way
    ("H100", 400.0, "network"),
    # A100 PCIe: inside each server the ring already runs over PCIe (32 GB/s), slower than 8 x 12.5 GB/s of ports
    ("A100-PCIe-80GB", 32.0, "network"),
    # GB200 NVL72: the NVLink domain is the 72-GPU rack, so TP 16 never leaves it (1,800 / 2 = 900 GB/s)
    ("GB200", 900.0, "scale-up"),
])
def test_a_group_larger_than_a_server_all_reduces_over_the_network(ruleset, gpu, link, kind):
    # across servers no stack's one-shot kernel runs (vLLM and SGLang log "Custom allreduce is disabled because
    # this process group spans across nodes"): NCCL's modelled 25 µs for 2 x 8 H100 (NVIDIA/nccl issue #1453)
    values = {**BASE, "model": "llama-3.1-70b", "gpu": gpu, "gpu_count": 16, "tensor_parallel": 16,
              "precision": "fp8", "concurrency": 1, "serving_engine": "vllm"}
    got = evaluate(values, ruleset, only=["tp_link", "allreduce_link_gb_s", "allreduce_latency_s", "tpot_ms"]).values
    assert got["tp_link"] == kind
    assert got["allreduce_link_gb_s"] == pytest.approx(link)
    # H100: 25 µs against the one-shot kernel's 10 inside a server (2 x 80 all-reduces a token: 2.4 ms more);
    # A100 PCIe: no less than its 8-GPU ring over PCIe inside each server, 6.6 + 14 x 3 = 48.6 µs
    assert got["allreduce_latency_s"] == pytest.approx({"H100": 25e-6, "A100-PCIe-80GB": 48.6e-6}.get(gpu, 10e-6))


def test_eight_pcie_gpus_pay_the_all_reduce_latency_nccl_tests_measure(ruleset):
    """Llama 3.1 70B at TP 8, one request, on 8x A100 PCIe: 2 x 80 all-reduces a token. Over NVLink (as the
    catalog's bridge suggested before a group larger than the pair was sent over PCIe) each waited 10 µs,
    1.6 ms a token; over PCIe 48.6 µs, 7.8 ms a token — the 6.2 ms more is most of what a 70B model's
    per-token time at TP 8 is made of (its 140 GB of weights read in 9 ms across the eight GPUs)."""
    values = {**BASE, "model": "llama-3.1-70b", "gpu": "A100-PCIe-80GB", "gpu_count": 8, "tensor_parallel": 8,
              "precision": "bf16", "concurrency": 1, "serving_engine": "vllm"}
    got = evaluate(values, ruleset, only=["allreduce_latency_s", "n_layers"]).values
    assert 2 * got["n_layers"] * got["allreduce_latency_s"] == pytest.approx(2 * 80 * 48.6e-6)
    assert 2 * got["n_layers"] * (got["allreduce_latency_s"] - 10e-6) == pytest.approx(6.18e-3, rel=1e-3)



@pytest.mark.parametrize("gpu, linked, link", [
    # H100 NVL: an NVLink bridge joins two cards (600 / 2 = 300 GB/s each way); eight data-parallel copies in one
    # server ring over PCIe Gen5 x16, 128 / 2 = 64 GB/s each way
    ("H100-NVL", 2, 64.0),
    # H100 SXM: NVSwitch joins all eight, 900 / 2 = 450 GB/s each way
    ("H100", 8, 450.0),
])
def test_training_rings_its_gradients_over_pcie_past_the_bridge(ruleset, gpu, linked, link):
    # One server of 8 GPUs, no tensor parallelism: 8 data-parallel peers reduce every gradient byte with a ring,
    # 2 x 7 / 8 of the bytes per GPU over the link at 0.8 of its rate (tp_allreduce_share)
    job = {"customer": "Test Co.", "workload": "fine-tuning", "model": "llama-3.1-8b", "gpu": gpu, "gpu_count": 8,
           "tensor_parallel": 1, "pipeline_parallel": 1, "dataset_tokens": 1e8, "epochs": 1}
    got = evaluate(job, ruleset, only=["linked_gpus", "dp_local", "grad_bytes_per_gpu", "allreduce_unit_s",
                                       "dp_servers"]).values
    assert got["linked_gpus"] == linked and got["dp_local"] == 8 and got["dp_servers"] == 1
    assert got["allreduce_unit_s"] == pytest.approx(2 * 7 / 8 * got["grad_bytes_per_gpu"] / (link * 0.8 * 1e9),
                                                    rel=1e-6)
