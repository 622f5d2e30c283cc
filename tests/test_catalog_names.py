"""Names people paste — nvidia-smi's GPU names, Hugging Face model ids — find their catalog entry."""

from __future__ import annotations

import shutil

import pytest

from engine.calc.catalogs import load_catalogs
from engine.paths import CATALOGS_DIR


@pytest.fixture(scope="module")
def catalogs():
    return load_catalogs()


@pytest.mark.parametrize("name, gpu", [
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-sxm5-80gb"),        # nvidia-smi --query-gpu=name
    ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb"),
    ("NVIDIA A100 80GB PCIe", "nvidia-a100-pcie-80gb"),
    ("NVIDIA A100-PCIE-40GB", "nvidia-a100-pcie-40gb"),         # the 40 GB card, not the SXM4 one nor the 80 GB
    ("Tesla V100-SXM2-32GB", "nvidia-v100-sxm2-32gb"),
    ("NVIDIA GeForce RTX 4090", "nvidia-rtx-4090"),
    ("AMD Instinct MI300X", "amd-mi300x"),
])
def test_gpu_names_as_tools_print_them(catalogs, name, gpu):
    assert catalogs.resolve_gpu(name) == gpu


@pytest.mark.parametrize("name, model", [
    ("meta-llama/Llama-2-70b-chat-hf", "llama-2-70b"),          # a chat release has the base model's shape
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("Mixtral 8x7B Instruct", "mixtral-8x7b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b"),       # the release's version goes with it
    ("deepseek-ai/DeepSeek-V2-Chat", "deepseek-v2"),            # a model's own version stays
])
def test_model_releases_find_their_base_model(catalogs, name, model):
    assert catalogs.resolve_model(name) == model


@pytest.mark.parametrize("name", [
    "Qwen/Qwen2.5-72B-Instruct-AWQ",     # quantised weights change the memory: not read as the BF16 model
    "Tesla V100-PCIE-16GB",              # no 16 GB V100 in the catalog: not the 32 GB one
    "meta",                              # a publisher alone is no model
])
def test_names_that_differ_in_what_is_sized_are_not_guessed(catalogs, name):
    assert catalogs.resolve_model(name) is None and catalogs.resolve_gpu(name) is None


def test_a_loose_name_two_entries_share_finds_neither(tmp_path):
    shutil.copytree(CATALOGS_DIR, tmp_path / "catalogs")
    models = tmp_path / "catalogs" / "models.yaml"
    # Give Llama 2 7B the alias "Llama-2-13B-chat": loosely it is now both 7B and 13B.
    text = models.read_text(encoding="utf-8").replace(
        "aliases: [Llama-2-7B,", "aliases: [Llama-2-13B-chat, Llama-2-7B,", 1)
    models.write_text(text, encoding="utf-8")
    catalogs = load_catalogs(tmp_path / "catalogs")
    assert catalogs.resolve_model("Llama-2-13B-chat") == "llama-2-7b"      # the exact alias still wins
    assert catalogs.resolve_model("Llama 2 13B Instruct") is None          # loosely, two models: ask
