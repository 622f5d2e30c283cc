"""Attention data parallelism in a quote: it shares a tensor-parallel group's requests between its GPUs
(rules/inference.yaml, attention_ranks), and a quote whose copies run on one GPU each says the setting does nothing
(rules/verdict.yaml, attention_data_parallel_idle)."""

from __future__ import annotations

from engine.calc.planner import planned

# DeepSeek-V3 in FP8 on 8 H200, offline, TensorRT-LLM with attention data parallelism asked for
DEEPSEEK = {"customer": "Test Co.", "workload": "offline-inference", "model": "deepseek-v3", "precision": "fp8",
            "gpu": "H200", "gpu_count": 8, "serving_engine": "tensorrt-llm", "attention_data_parallel": "on",
            "prompt_tokens": 800, "output_tokens": 800, "requests_total": 5000}
# Llama 3.1 8B in FP8 on 8 H200: one GPU holds a copy, so the planner keeps tensor parallelism at 1
LLAMA_8B = {**DEEPSEEK, "model": "llama-3.1-8b"}


def idle_notices(intake, ruleset):
    results = planned(intake, ruleset)[0]
    return results.values, [n for n in results.warnings if n.code == "attention_data_parallel_idle"]


def test_one_gpu_copies_are_told_the_setting_changes_nothing(ruleset):
    values, (notice,) = idle_notices(LLAMA_8B, ruleset)
    assert values["tp"] == 1 and values["attention_ranks"] == 1
    assert "changes nothing" in notice.message["en"]
    assert "不影響" in notice.message["zh-TW"] and "不影响" in notice.message["zh-CN"]
    # the same request with the setting off is the same estimate, and says nothing of it
    off_values, off_notices = idle_notices({**LLAMA_8B, "attention_data_parallel": "off"}, ruleset)
    assert off_values["output_tokens_per_s"] == values["output_tokens_per_s"] and not off_notices


def test_a_copy_over_several_gpus_shares_its_requests_and_gets_no_such_notice(ruleset):
    # TP 8 as asked: the 8 GPUs of the group each run attention for their own requests
    values, notices = idle_notices({**DEEPSEEK, "tensor_parallel": 8}, ruleset)
    assert values["tp"] == 8 and values["attention_ranks"] == 8 and not notices
