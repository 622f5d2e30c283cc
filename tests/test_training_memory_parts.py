"""A training step's memory by what the software keeps: activations of layers run as PyTorch modules, the LoRA
adapters' layers, and the three figures a run can report (tensors allocated, memory reserved, the card's use).
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# TinyLlama 1.1B (catalog): 22 layers, h 2,048, 32 query heads of 64 (attention 2,048), 4 KV heads, gated MLP f 5,632,
# vocabulary 32,000; 512 tokens, micro-batch 8, no checkpointing, flash attention
BASE = {"customer": "Test Co.", "workload": "fine-tuning", "model": "tinyllama-1.1b", "gpu": "A100-80GB",
        "gpu_count": 1, "precision": "bf16", "finetune_method": "lora", "lora_rank": 32, "seq_len": 512,
        "micro_batch_size": 8, "global_batch_size": 8, "activation_checkpointing": False, "flash_attention": True,
        "optimizer": "adamw-bf16", "training_tokens_billion": 0.001, "training_framework": "hf-transformers"}
KEYS = ["module_bytes_per_token", "activation_bytes_per_layer", "activations_gb", "lora_params", "peak_allocated_gb",
        "peak_reserved_gb", "device_memory_gb", "memory_per_gpu_gb", "allocator_reserve_share", "sequence_lengths_used",
        "training_framework_used", "framework_overhead_gb"]
H, Q, F = 2048, 2048, 5632


def run(ruleset, **intake):
    return evaluate({**BASE, **intake}, ruleset, only=KEYS).values


def test_lora_on_every_linear_layer_keeps_the_fp32_norms_the_gated_mlp_and_each_adapters_dropped_input(ruleset):
    # two RMSNorms' FP32 inputs 2 x 4h; q, k and v repeated to 32 heads and the output 8 x 2,048; the gate's, up's
    # and activation's outputs 6f; seven adapters' dropped inputs and masks 3 x (3h for q, k, v + 2,048 for o + 2h for
    # gate and up + f for down): 8h + 8Q + 6f + 15h + 3Q + 3f = 23h + 11Q + 9f = 120,320 bytes a token and layer
    v = run(ruleset)
    assert v["module_bytes_per_token"] == 23 * H + 11 * Q + 9 * F == 120320
    # 512 x 8 tokens a layer
    assert v["activation_bytes_per_layer"] == pytest.approx(512 * 8 * 120320)


def test_qlora_also_keeps_every_multiplys_input_and_full_training_the_norms_outputs(ruleset):
    # QLoRA: bitsandbytes' 4-bit multiply saves its input whatever trains: + 4h + 2Q + 2f = 23,552 -> 143,872.
    # Full fine-tuning: no adapters; the norms keep their 16-bit output too (2 x 6h), the multiplies their inputs:
    # 12h + 8Q + 6f + 4h + 2Q + 2f = 16h + 10Q + 8f = 98,304
    assert run(ruleset, finetune_method="qlora")["module_bytes_per_token"] == 120320 + 4 * H + 2 * Q + 2 * F == 143872
    assert run(ruleset, finetune_method="full")["module_bytes_per_token"] == 16 * H + 10 * Q + 8 * F == 98304


def test_adapters_on_query_and_value_only_drop_out_two_inputs_and_are_smaller(ruleset):
    # 8h + 8Q + 6f + 3 x 2h = 14h + 8Q + 6f = 78,848 bytes; adapters r x (in + out): q 2h, v h + 4 x 64 = 2,304:
    # 32 x 22 x (4,096 + 2,304) = 4,505,600 against every linear layer's 32 x 22 x (4 x 2,048 + 2 x 2,304 + 3 x 7,680)
    # = 32 x 22 x 35,840 = 25,231,360
    qv, every = run(ruleset, lora_targets="query-value"), run(ruleset)
    assert qv["module_bytes_per_token"] == 14 * H + 8 * Q + 6 * F == 78848
    assert (qv["lora_params"], every["lora_params"]) == (4505600, 25231360)
    assert run(ruleset, lora_targets="attention")["lora_params"] == 32 * 22 * (4 * H + 2 * 2304)


def test_megatron_keeps_korthikantis_count(ruleset):
    # Megatron-Core's fused layers: s·b·h·34 bytes (no sequence parallelism, one GPU) = 4,096 x 2,048 x 34
    v = run(ruleset, training_framework="megatron")
    assert v["activation_bytes_per_layer"] == pytest.approx(512 * 8 * H * 34)


def test_the_proposal_is_sized_on_the_tensors_and_the_reserved_peak_follows_the_batch_shapes(ruleset):
    # memory_per_gpu_gb = the tensors + the 1 GB context; a fine-tuning stack pads batch by batch: reserved = 1.26 x
    # allocated; packed: 1.07 x; the card shows the reserved peak and the context
    varied, packed = run(ruleset), run(ruleset, sequence_lengths="fixed")
    assert varied["sequence_lengths_used"] == "varied" and packed["sequence_lengths_used"] == "fixed"
    assert varied["memory_per_gpu_gb"] == pytest.approx(varied["peak_allocated_gb"] + 1.0)
    assert varied["peak_reserved_gb"] == pytest.approx(1.26 * varied["peak_allocated_gb"])
    assert packed["peak_reserved_gb"] == pytest.approx(1.07 * packed["peak_allocated_gb"])
    assert varied["device_memory_gb"] == pytest.approx(varied["peak_reserved_gb"] + 1.0)
    assert run(ruleset, training_framework="megatron")["sequence_lengths_used"] == "fixed"


def test_the_allocator_never_holds_more_than_the_card_leaves(ruleset):
    # TinyLlama LoRA at 512 x 12 tokens on an RTX 4090 (24 GiB = 25.77 GB): the tensors take about 21 GB, 1.26 x that
    # would pass the card; reserved stops at what the card leaves beside the 1 GB context, and never below the tensors
    v = run(ruleset, gpu="RTX 4090", micro_batch_size=12, global_batch_size=12)
    card = evaluate({**BASE, "gpu": "RTX 4090"}, ruleset, only=["gpu_memory_gb"]).values["gpu_memory_gb"]
    assert v["peak_allocated_gb"] * 1.26 > card - 1.0 > v["peak_allocated_gb"]
    assert v["peak_reserved_gb"] == pytest.approx(card - 1.0)



def test_a_fine_tuning_intake_that_names_no_software_is_quoted_on_the_hugging_face_stack(ruleset):
    # fine-tuning without training_framework: the Hugging Face stack and its module activations (120,320 bytes a
    # token and layer, as above); pretraining without one: Megatron-Core's fused layers
    unnamed = {k: v for k, v in BASE.items() if k != "training_framework"}
    fine_tuning = evaluate(unnamed, ruleset, only=KEYS).values
    assert fine_tuning["training_framework_used"] == "hf-transformers" and fine_tuning["module_bytes_per_token"] == 120320
    pretraining = {k: v for k, v in unnamed.items() if k not in ("finetune_method", "lora_rank")}
    assert evaluate({**pretraining, "workload": "pretraining"}, ruleset,
                    only=["training_framework_used"]).values["training_framework_used"] == "megatron"


def test_fp32_training_keeps_every_activation_at_four_bytes(ruleset):
    # the same layer in FP32 without mixed precision: every saved tensor at 4 bytes instead of 2, twice the bytes
    half, full = run(ruleset, precision="bf16"), run(ruleset, precision="fp32")
    assert full["activation_bytes_per_layer"] == pytest.approx(2 * half["activation_bytes_per_layer"])

