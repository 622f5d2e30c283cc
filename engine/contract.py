"""The fixed contract of DESIGN.md §4: canonical input keys (with their value types) and result keys."""

# Input key → "number" | "text" | "bool". rules/intake.yaml declares the same keys
# (a test checks it), and may add more; the rule engine reads both.
INPUT_TYPES = {
    # quote
    "customer": "text", "project": "text", "contact_email": "text", "language": "text",
    "currency": "text",
    # workload and model
    "workload": "text", "model": "text", "params_billion": "number", "layers": "number",
    "hidden_size": "number", "attention_heads": "number", "kv_heads": "number",
    "vocab_size": "number", "seq_len": "number", "active_params_billion": "number",
    # precision
    "precision": "text", "weight_precision": "text", "kv_cache_precision": "text",
    # training
    "training_tokens_billion": "number", "dataset_gb": "number", "sample_kb": "number",
    "samples": "number", "epochs": "number", "flops_per_sample": "number",
    "global_batch_size": "number", "finetune_method": "text", "optimizer": "text",
    "activation_checkpointing": "bool", "zero_stage": "number", "tensor_parallel": "number",
    "pipeline_parallel": "number",
    # inference
    "prompt_tokens": "number", "output_tokens": "number", "concurrency": "number",
    "requests_per_second": "number", "ttft_target_ms": "number", "tpot_target_ms": "number",
    "serving_engine": "text",
    # hardware and commercial
    "gpu": "text", "gpu_count": "number", "gpus_per_node": "number", "utilization": "number",
    "scaling_efficiency": "number", "deadline_days": "number", "gpu_hour_price": "number",
}

# Added keys the rules use (DESIGN.md §4: "Add keys freely; do not rename these").
EXTRA_INPUT_TYPES = {
    "micro_batch_size": "number", "lora_rank": "number", "lora_targets": "text", "sequence_lengths": "text",
    "flash_attention": "bool",
    "requests_total": "number", "tokens_per_sample": "number", "network_gb_s_per_gpu": "number",
    "virtual_pipeline_stages": "number", "context_parallel": "number", "expert_parallel": "number",
    "optimize_for": "text", "pipeline_schedule": "text", "training_framework": "text",
    "sequence_parallel": "text", "recompute_policy": "text",
    "max_batch_size": "number", "cuda_graphs": "text", "attention_data_parallel": "text", "serving_engine_release": "text", "request_lengths": "text",
    "kv_cache_memory_share": "number", "experts_total": "number", "experts_active": "number", "gpu_power_limit_w": "number",
}

# Layout fields the planner chooses when an intake leaves them blank (DESIGN.md §4, `plan`).
TRAINING_LAYOUT = ("zero_stage", "tensor_parallel", "pipeline_parallel", "virtual_pipeline_stages",
                   "context_parallel", "expert_parallel", "micro_batch_size", "activation_checkpointing")
INFERENCE_LAYOUT = ("tensor_parallel", "pipeline_parallel", "expert_parallel", "concurrency")

RESULT_KEYS = (
    "peak_tflops_per_gpu", "utilization_used", "scaling_efficiency", "effective_tflops_total",
    "training_flops", "training_tokens", "steps", "training_time_hours", "training_time_days",
    "gpu_hours", "tokens_per_s_per_gpu", "gpus_for_deadline", "weights_gb", "gradients_gb",
    "optimizer_gb", "activations_gb", "kv_cache_gb", "kv_cache_bytes_per_token",
    "memory_per_gpu_gb", "gpu_memory_gb", "fits_in_memory", "min_gpus_for_memory",
    "arithmetic_intensity", "ridge_point", "attainable_tflops_per_gpu", "bound", "ttft_ms",
    "tpot_ms", "output_tokens_per_s", "max_concurrency", "meets_latency_targets",
    "cost_total", "cost_per_million_tokens", "bottleneck",
)

WORKLOADS = ("pretraining", "fine-tuning", "online-inference", "offline-inference")
TRAINING_WORKLOADS = WORKLOADS[:2]      # the workloads that train (rules/model.yaml, is_training)
# memory estimates land differently for a pretraining step, a fine-tuning step (adapters, 4-bit weights, a
# Trainer's loss) and a server: each kind has its own band (rules/uncertainty.yaml) and its own evidence
MEMORY_KINDS = ("pretraining", "fine-tuning", "serving")


def memory_kind(workload: str | None) -> str:
    """Which kind of memory estimate a workload gets (its band and evidence are keyed by it)."""
    return workload if workload in TRAINING_WORKLOADS else "serving"
