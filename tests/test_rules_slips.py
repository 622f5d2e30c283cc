"""Each slip of a tired rule author — a value, a unit, a word — is caught by `sizing rules check` on a real copy
of the shipped rules and catalogs: an error, or a warning that holds the edit until it is acknowledged."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from tests.test_rules_check import append_rule, rules_check


def slip(home, name: str, old: str, new: str, entry: str = "") -> int:
    """Replace the first `old` (after `- id: entry` when given) in home/name; returns its line."""
    path = home / name
    text = path.read_text(encoding="utf-8")
    start = text.index(f"- id: {entry}\n") if entry else 0
    at = text.index(old, start)
    path.write_text(text[:at] + new + text[at + len(old):], encoding="utf-8")
    return text[:at].count("\n") + 1


# the fitted training band as shipped: scripts/refresh_bands.py rewrites it as the evidence grows
BAND = float(re.search(r"coefficients: fitted, band: ([\d.]+),",
                       (ROOT / "rules" / "uncertainty.yaml").read_text(encoding="utf-8"))[1])

# (what slipped, file, entry, old text, new text, words the check prints, error or warning)
SLIPS = [
    ("a percent where a fraction is asked", "rules/compute.yaml", "",
     "formula: 0.64\n    why: Fitted on the published H100/H200 BF16", "formula: 64\n    why: Fitted on the published H100/H200 BF16",
     "Write 0.64, not 64.", "error"),
    ("a misspelt workload compared in a formula", "rules/cost.yaml", "",
     'if(workload == "online-inference", gpu_count', 'if(workload == "online-inferance", gpu_count',
     '"online-inferance" is not a value `workload` can take', "error"),
    ("a misspelt segment in a list", "rules/compute.yaml", "",
     '["consumer", "workstation", "edge"]', '["consumr", "workstation", "edge"]',
     "Did you mean `consumer`?", "error"),
    ("a misspelt family in a switch", "rules/compute.yaml", "",
     'switch(gpu_family, "ampere", gemm_share_ampere, "hopper"', 'switch(gpu_family, "ampere", gemm_share_ampere, "hoper"',
     '"hoper" is not a value `gpu_family` can take', "error"),
    ("a misspelt table key", "rules/uncertainty.yaml", "",
     "{group: training, coefficients: fitted,", "{group: training, coefficients: fited,",
     "Did you mean `fitted`?", "error"),
    ("a table value 10× off its neighbours", "rules/uncertainty.yaml", "",
     f"coefficients: fitted, band: {BAND},", f"coefficients: fitted, band: {BAND / 10:g},",
     f"coefficients fitted is {BAND / 10:g} ×, 1/", "error"),   # a tenth of the fitted training band against the
                                                                 # other bands' median (≈ 0.25–0.3): 1/10–1/15
    ("a model's size in the wrong unit (70B as 0.07 billion)", "catalogs/models.yaml", "llama-2-70b",
     "params_billion: 68.98", "params_billion: 0.06898",
     "a thousand times off (k, M, G or T)? Then write 68.98", "warning"),
    ("a GPU's display name copied from another", "catalogs/gpus.yaml", "nvidia-gb200-per-gpu",
     'name: "GB200 (per Blackwell GPU, NVL72)"', 'name: "B200 (HGX B200, per GPU)"',
     'as `nvidia-b200-hgx` does', "error"),
    ("a network rate in Gb/s where GB/s is asked", "catalogs/gpus.yaml", "nvidia-h100-sxm5-80gb",
     "network_gb_s_per_gpu: 50", "network_gb_s_per_gpu: 400",
     "bits for bytes (Gb/s for GB/s)? Then write 50", "error"),
    ("`unit: hours` on a value in days", "rules/compute.yaml", "",
     "unit: days\n    when: is_training\n    formula: training_time_hours / 24",
     "unit: hours\n    when: is_training\n    formula: training_time_hours / 24",
     "rule `training_time_days` is declared in hours, but its formula yields hours divided by 24", "error"),
    ("/1e6 for /1e9 inside a formula", "rules/model.yaml", "",
     "formula: weight_storage_bytes / 1e9", "formula: weight_storage_bytes / 1e6",
     "rule `weights_total_gb` is declared in GB, but its formula yields bytes: 1 bytes is 1e-09 GB", "error"),
    ("GiB taken for GB", "rules/capacity.yaml", "",
     'formula: gpu_spec(gpu, "memory_gb") * 1.073741824', 'formula: gpu_spec(gpu, "memory_gb")',
     "yields GiB: 1 GiB is 1.07374 GB", "error"),
    ("a price of 0", "catalogs/gpus.yaml", "nvidia-v100-sxm2-32gb",
     "price_usd_per_gpu_hour: 1.50", "price_usd_per_gpu_hour: 0",
     "`price_usd_per_gpu_hour` of `nvidia-v100-sxm2-32gb` is 0; it must be more than 0", "error"),
    ("a price of 249 per GPU-hour", "catalogs/gpus.yaml", "nvidia-v100-sxm2-32gb",
     "price_usd_per_gpu_hour: 1.50", "price_usd_per_gpu_hour: 249",
     "outside the plausible range 0.05–50 USD/GPU-hour", "warning"),
    ("FP8 typed as the BF16 rate", "catalogs/gpus.yaml", "nvidia-h100-sxm5-80gb",
     "fp8: 1979,", "fp8: 989.5,", "1× its BF16 rate (989.5)", "warning"),
    ("windowed layers typed as the window", "catalogs/models.yaml", "gemma-3-27b",
     "sliding_window_layers: 52", "sliding_window_layers: 1024",
     "`sliding_window_layers` of `gemma-3-27b` is 1024, more than its 62 layers", "error"),
    ("a window without the layers that use it", "catalogs/models.yaml", "gpt-oss-20b",
     "    sliding_window_layers: 12\n", "",
     "`gpt-oss-20b` gives `sliding_window` without `sliding_window_layers`", "error"),
]


@pytest.mark.parametrize("what, name, entry, old, new, words, kind", SLIPS, ids=[s[0] for s in SLIPS])
def test_each_slip_is_caught_at_its_line(home_copy, what, name, entry, old, new, words, kind):
    line = slip(home_copy, name, old, new, entry)
    code, out = rules_check(home_copy)
    hits = [row for row in out.splitlines() if words in row]
    assert hits, out
    where = hits[0].split(": ", 1)[0]
    assert where.startswith(name) and abs(int(where.rsplit(":", 1)[1]) - line) <= 3, (hits[0], line)
    if kind == "error":
        assert code == 1, out
    else:
        # a warning: the files are usable, but the edit is held until the value is fixed or acknowledged
        assert code == 0 and ": warning: " in hits[0] and "is held" in out, out


def test_the_shipped_files_pass_the_new_checks_without_a_held_warning(home_copy):
    code, out = rules_check(home_copy)
    assert code == 0 and "warning" not in out.split("ok:", 1)[1], out
    # what the shipped files acknowledge, each with the reason written beside the value
    accepted = [row for row in out.splitlines() if ": accepted: " in row]
    assert any("intel-gaudi3" in row and "same 1,835 TFLOPS" in row for row in accepted), out


def test_a_warning_acknowledged_beside_the_value_no_longer_holds_the_edit(home_copy):
    slip(home_copy, "catalogs/gpus.yaml", "price_usd_per_gpu_hour: 1.50",
         'price_usd_per_gpu_hour: 249\n    accept: {price_usd_per_gpu_hour: "list price for the Gulf region"}',
         "nvidia-v100-sxm2-32gb")
    code, out = rules_check(home_copy)
    assert code == 0 and "is held" not in out, out
    assert any("`price_usd_per_gpu_hour` of `nvidia-v100-sxm2-32gb` is 249" in row
               and '"list price for the Gulf region"' in row for row in out.splitlines()), out


def test_an_acknowledgement_must_say_why(home_copy):
    line = append_rule(home_copy, "cost.yaml", "  - name: rack_power\n    unit: W\n    formula: 0.7\n"
                                                "    accept: ok\n")
    code, out = rules_check(home_copy)
    assert code == 1 and f"rules/cost.yaml:{line + 3}: write why the value is right" in out, out


def test_a_rule_in_watts_with_a_value_in_kilowatts(home_copy):
    # A constant: 0.7 W for a 700 W board is a thousand times off; the hint says what to write.
    append_rule(home_copy, "cost.yaml", "  - name: rack_power\n    unit: W\n    formula: 0.7\n")
    code, out = rules_check(home_copy)
    assert code == 0 and "rule `rack_power` is 0.7 W, outside the plausible range 1–100,000 W" in out, out
    assert "write 700 (a thousand times off" in out
    # A formula: the board power read in W and divided by 1,000 is kW, not W.
    append_rule(home_copy, "cost.yaml", '  - name: board_power\n    unit: W\n    formula: gpu_spec(gpu, "tdp_w") / 1000\n')
    code, out = rules_check(home_copy)
    assert code == 1 and "rule `board_power` is declared in W, but its formula yields W divided by 1,000" in out, out
