"""QLoRA leaves the embedding and output head unquantised, and PEFT's preparation casts them to FP32.
Expected numbers are derived by hand in the comments; each test fails if its mechanism is removed."""

from __future__ import annotations

import pytest

from engine.calc.evaluate import evaluate

# Qwen-1.8B's shape: untied embedding and head, 2 x 151,936 x 2,048 = 622,329,856 parameters of 1.837 billion
BASE = {"customer": "Test Co.", "workload": "fine-tuning", "model": "custom", "params_billion": 1.837, "layers": 24,
        "hidden_size": 2048, "attention_heads": 16, "kv_heads": 16, "vocab_size": 151936, "gpu": "A100-80GB",
        "gpu_count": 1, "precision": "bf16", "finetune_method": "qlora", "seq_len": 2048, "micro_batch_size": 1,
        "global_batch_size": 8, "activation_checkpointing": True, "training_tokens_billion": 0.1}
KEYS = ["weights_gb", "qlora_kept_params", "qlora_kept_bytes", "embedding_params", "lora_params"]
EMBEDDING = 2 * 151936 * 2048


def weights(ruleset, **intake):
    return evaluate({**BASE, **intake}, ruleset, only=KEYS).values


def test_peft_keeps_the_embedding_and_head_in_fp32_beside_the_4_bit_weights(ruleset):
    # The Hugging Face stack (hf-transformers): 1.837e9 - 622.3M = 1.2147e9 weights in NF4 at 0.516 bytes = 0.6268 GB, the
    # embedding and head at 4 bytes = 2.4893 GB, LoRA's own in 16 bits; torchtune keeps the two at 2 bytes
    peft, torchtune = weights(ruleset, training_framework="hf-transformers"), weights(ruleset, training_framework="torchtune")
    assert peft["qlora_kept_params"] == EMBEDDING and (peft["qlora_kept_bytes"], torchtune["qlora_kept_bytes"]) == (4, 2)
    lora = peft["lora_params"] * 2 / 1e9
    assert peft["weights_gb"] == pytest.approx((1.837e9 - EMBEDDING) * 0.516 / 1e9 + EMBEDDING * 4 / 1e9 + lora)
    assert peft["weights_gb"] - torchtune["weights_gb"] == pytest.approx(EMBEDDING * 2 / 1e9)


def test_lora_on_16_bit_weights_keeps_nothing_apart(ruleset):
    # plain LoRA stores every weight at 16 bits already: no parameter is set apart
    lora = weights(ruleset, finetune_method="lora", training_framework="hf-transformers")
    assert lora["qlora_kept_params"] == 0
    assert lora["weights_gb"] == pytest.approx(1.837e9 * 2 / 1e9 + lora["lora_params"] * 2 / 1e9)
