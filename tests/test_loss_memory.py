"""The loss's copies of the logits in a training step's memory, by training software.
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Qwen-1.8B's shape (151,936-token vocabulary), LoRA at 2,048 tokens, micro-batch 1, every layer checkpointed
BASE = {"customer": "Test Co.", "workload": "fine-tuning", "model": "custom", "params_billion": 1.837, "layers": 24,
        "hidden_size": 2048, "attention_heads": 16, "kv_heads": 16, "vocab_size": 151936, "gpu": "A100-80GB",
        "gpu_count": 1, "precision": "bf16", "finetune_method": "lora", "seq_len": 2048, "micro_batch_size": 1,
        "global_batch_size": 8, "activation_checkpointing": True, "training_tokens_billion": 0.1}
KEYS = ["activations_gb", "loss_bytes_per_logit", "memory_per_gpu_gb"]


def software(ruleset, name, **intake):
    return evaluate({**BASE, "training_framework": name, **intake}, ruleset, only=KEYS).values


def test_a_plain_pytorch_loss_holds_twice_megatrons_logits(ruleset):
    # 2,048 tokens x 151,936 = 311.2 M logits. A plain PyTorch loop (fsdp) runs F.cross_entropy(logits.float()):
    # 12 bytes each at the backward's peak = 3.734 GB; Megatron-Core's in-place loss 6 bytes = 1.867 GB. The rest of
    # the activations are the same, so the two differ by 6 x 311.2 M = 1.867 GB
    trainer, megatron = software(ruleset, "fsdp"), software(ruleset, "megatron")
    assert (trainer["loss_bytes_per_logit"], megatron["loss_bytes_per_logit"]) == (12, 6)
    assert trainer["activations_gb"] - megatron["activations_gb"] == pytest.approx(6 * 2048 * 151936 / 1e9)
    assert trainer["memory_per_gpu_gb"] - megatron["memory_per_gpu_gb"] == pytest.approx(1.867, abs=1e-3)


def test_fused_losses_hold_less(ruleset):
    # Unsloth's fused kernel keeps only the 16-bit logits (2 bytes); llm-foundry's flash-attention loss the logits and
    # a 16-bit gradient (4); torchtune's chunked loss the logits and its FP32 log-softmax (6)
    by_software = {name: software(ruleset, name)["loss_bytes_per_logit"] for name in ("unsloth", "llm-foundry", "torchtune")}
    assert by_software == {"unsloth": 2, "llm-foundry": 4, "torchtune": 6}
    assert software(ruleset, "unsloth")["activations_gb"] == pytest.approx(software(ruleset, "fsdp")["activations_gb"] - 10 * 2048 * 151936 / 1e9)


def test_the_loss_follows_the_vocabulary(ruleset):
    # A 32,000-token vocabulary (a custom model's default) at the same length: 12 x 2,048 x 32,000 = 0.786 GB of loss
    # under a plain PyTorch loss, against 3.734 GB at 151,936 tokens; the difference is 12 x 2,048 x 119,936 = 2.947 GB
    small = software(ruleset, "fsdp", vocab_size=32000)
    assert software(ruleset, "fsdp")["activations_gb"] - small["activations_gb"] == pytest.approx(2.947, abs=1e-3)
