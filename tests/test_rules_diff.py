"""`rules diff` shows everything an edit moves in a sample: headline figures, the planner's layout and the
alternatives — a sample whose alternatives moved is never "unchanged"."""

from __future__ import annotations

from engine.authoring.diff import diff, render
from engine.calc.ruleset import load_ruleset
from tests.conftest import ROOT
from tests.test_rules_slips import slip

SAMPLE = ROOT / "samples" / "llama-70b-online-8xh100.yaml"      # Llama 2 70B served on 8 × H100


def test_a_price_that_moves_only_the_alternatives_is_shown(home_copy):
    before = load_ruleset(home_copy / "rules", home_copy / "catalogs")
    # The H200 at 1.10 instead of 3.50 per GPU-hour: the requested H100 quote is the same, but the
    # H200 becomes one of the cheapest alternatives.
    slip(home_copy, "catalogs/gpus.yaml", "price_usd_per_gpu_hour: 3.50", "price_usd_per_gpu_hour: 1.10",
         "nvidia-h200-sxm-141gb")
    after = load_ruleset(home_copy / "rules", home_copy / "catalogs")
    report = diff(before, after, [SAMPLE])
    sample = report.samples[0]
    assert not sample.headline and not sample.unchanged
    assert any(line.startswith("alternative added: 8 × H200 SXM 141GB") for line in sample.alternatives), \
        sample.alternatives
    text = render(report, "before", "after")
    assert "unchanged" not in text and "alternative added: 8 × H200 SXM 141GB" in text
    assert "training   " in text and "→" in text            # the validation medians before → after


def test_a_layout_the_planner_changes_is_shown(home_copy):
    before = load_ruleset(home_copy / "rules", home_copy / "catalogs")
    # H100 with 24 GB instead of 80: Llama 3 8B's training memory no longer fits one GPU per replica,
    # so the planner splits the model (tensor parallel 1 → 2, pipeline 1 → 4 with the shipped rules)
    slip(home_copy, "catalogs/gpus.yaml", "memory_gb: 80", "memory_gb: 24", "nvidia-h100-sxm5-80gb")
    after = load_ruleset(home_copy / "rules", home_copy / "catalogs")
    sample = diff(before, after, [ROOT / "samples" / "llama-8b-pretraining-256xh100.zh-CN.yaml"]).samples[0]
    moved = {m.key: (m.before, m.after) for m in sample.plan}
    assert moved.get("tensor_parallel", (1, 1))[1] > 1, sample.plan

