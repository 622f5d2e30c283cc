"""Every model in catalogs/models.yaml: its parameter count agrees with its own architecture fields."""

from __future__ import annotations

import pytest

from engine.calc.catalogs import load_catalogs

MODELS = list(load_catalogs().models.values())
TOLERANCE = 0.015    # biases, norms and learned positions are left out of the count below


def counted(m: dict) -> tuple[float, float, float]:
    """(total with the output head counted once, the same with a separate output head, active per token).

    Per layer: query and output projections h·H·d each, key and value h·K·d each, the MLP
    ffn_matrices·h·ffn (every routed and shared expert for the total, the routed ones a token
    visits for the active count) and the router h·E; the embedding V·h once or twice."""
    h, heads, kv = m["hidden_size"], m["attention_heads"], m["kv_heads"]
    d = m.get("head_dim") or h // heads
    mlp = m["ffn_matrices"] * h * m["ffn_size"]
    experts = m.get("experts") or {}
    attention = 2 * h * heads * d + 2 * h * kv * d
    every = (experts.get("total", 1) + experts.get("shared", 0)) * mlp + (h * experts["total"] if experts else 0)
    visited = (experts.get("active", 1) + experts.get("shared", 0)) * mlp
    embedding = m["vocab_size"] * h
    body = m["layers"] * (attention + every)
    return body + embedding, body + 2 * embedding, m["layers"] * (attention + visited) + embedding


# Multi-head Latent Attention (kv_cache_dim) has projections the formula above does not describe.
STANDARD = [m for m in MODELS if not m.get("kv_cache_dim")]


@pytest.mark.parametrize("model", STANDARD, ids=[m["id"] for m in STANDARD])
def test_parameter_count_matches_the_architecture(model):
    once, twice, _ = counted(model)
    stated = model["params_billion"] * 1e9
    # A tied output head is counted once; an untied one twice — or once more "as stored" when a
    # checkpoint keeps a separate copy of a tied head (Falcon): either reading must match.
    readings = (once, twice) if model.get("tied_embeddings") else (twice,)
    assert min(abs(stated / r - 1) for r in readings) <= TOLERANCE, (
        f"{model['id']}: params_billion {model['params_billion']} but the fields give "
        + " or ".join(f"{r / 1e9:.3f}" for r in readings))


MOE = [m for m in STANDARD if m.get("experts")]


@pytest.mark.parametrize("model", MOE, ids=[m["id"] for m in MOE])
def test_active_parameters_match_the_experts_a_token_visits(model):
    _, _, active = counted(model)
    embedding = model["vocab_size"] * model["hidden_size"]
    stated = model["active_params_billion"] * 1e9
    # Model cards differ on whether the output head counts as active: accept either.
    assert min(abs(stated / a - 1) for a in (active, active + embedding)) <= 0.02, (
        f"{model['id']}: active_params_billion {model['active_params_billion']}, the fields give "
        f"{active / 1e9:.2f} (or {(active + embedding) / 1e9:.2f} with the output head)")


def test_the_check_can_fail():
    # LLaMA 65B with one layer fewer in its fields is 1.2% smaller — inside the tolerance; with
    # the FFN of LLaMA 33B (17,920 instead of 22,016) it is 8% smaller, and must be caught.
    llama = next(m for m in MODELS if m["id"] == "llama-65b")
    wrong = {**llama, "ffn_size": 17920}
    assert abs(llama["params_billion"] * 1e9 / counted(wrong)[1] - 1) > TOLERANCE
