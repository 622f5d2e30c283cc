"""The HTML summary as text: order of sections, escaping, charts, languages and template overrides."""

from __future__ import annotations

import io
import json
import pickle
import re

import jinja2
import pytest
from test_render_cases import HOSTILE_CUSTOMER, HOSTILE_PROJECT, HOSTILE_WARNING, grid_for, make_job  # noqa: F401

from engine.job import write_quote
from engine.quote import view as render
from engine.quote.messages import messages


def html_for(tmp_path, workload="training", lang="en"):
    job = make_job(tmp_path, workload, lang)
    paths = write_quote(job, ("html", "json"))
    return paths[0].read_text(encoding="utf-8"), json.loads(paths[1].read_text(encoding="utf-8"))


def test_sections_follow_the_seed_003_order(tmp_path, grid_for):
    grid_for()
    html, _ = html_for(tmp_path)
    ids = re.findall(r'<section class="[^"]*" id="([a-z_]+)"', html)
    assert ids == ["answer", "model", "capacity", "compute", "bandwidth", "scaling", "targets",
                   "facility", "caveats"]


def test_hostile_text_is_escaped(tmp_path, grid_for):
    grid_for()
    html, _ = html_for(tmp_path)
    assert "<img" not in html and "<script" not in html
    assert "&lt;img src=x onerror=&#34;console.error(&#39;xss&#39;)&#34;&gt; +cmd" in html
    assert "=HYPERLINK(&#34;http://evil.example&#34;,&#34;click&#34;)" in html
    assert f'<dd class="project">{HOSTILE_PROJECT}</dd>' in html
    assert HOSTILE_CUSTOMER not in html                   # never raw, always escaped


def test_header_names_customer_and_date_but_no_rule_set_id(tmp_path, grid_for):
    grid_for()
    html, doc = html_for(tmp_path)
    assert "rs-test123456" not in html and "Rule set" not in html     # the trail's, in the audit workbook
    assert f'<time datetime="{doc["generated_at"]}">{doc["generated_at"][:10]}</time>' in html
    assert '<html lang="en">' in html


def test_key_figures_match_the_json(tmp_path, grid_for):
    grid_for("inference")
    html, doc = html_for(tmp_path, "inference")
    m = messages("en")
    shown = dict(re.findall(r'data-key="(\w+)">\s*<div class="label">[^<]*</div>\s*'
                            r'<div class="value">([^<]*)</div>', html))
    for key, unit in [("ttft_ms", "ms"), ("tpot_ms", "ms"), ("output_tokens_per_s", "tokens/s"),
                      ("max_concurrency", "requests")]:
        assert shown[key] == m.value(doc["results"][key], unit)
    # memory in GB as the GPU's name counts them: 45.7 × 10⁹ bytes ÷ 2³⁰ = 42.56 GB of the "80 GB" GPU
    assert shown["memory_per_gpu_gb"] == "42.56 GB" and shown["gpu_memory_gb"] == "80 GB"
    assert shown["cost_per_million_tokens"] == "2.48 USD"
    assert shown["meets_latency_targets"] == "No"
    assert "training_time_days" not in shown         # absent keys are not shown


def test_three_inline_svg_charts_and_no_script(tmp_path, grid_for):
    grid_for()
    html, _ = html_for(tmp_path)
    assert re.findall(r'<svg class="chart (\w+)"', html) == ["memory", "roofline", "scaling"]
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "") \
        .replace("http://evil.example", "")
    # the workload's point on the roofline and the quoted count on the scaling curve
    assert "This workload: 837.5 TFLOPS" in html
    # speedup from the fewest GPUs that hold the model (16, make_grid's first count that fits), counted as 16:
    # 16 × days(16) / days(512) = 512 × 0.9^(9/4) / 0.9^(4/4) = 512 × 0.9^(5/4) = 448.8
    assert "quoted: 512 → 448.8×" in html
    # the memory bar for the per-GPU total, and the GPU's memory as a line
    assert 'class="limit"' in html and "GPU memory 80 GB" in html


def test_scaling_table_marks_the_quoted_row(tmp_path, grid_for):
    grid_for()
    html, _ = html_for(tmp_path)
    table = html[html.index('<table class="scaling">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr") == 12 and table.count('class="chosen"') == 1
    chosen = table[table.index('class="chosen"'):]
    # count, its layout, time (in days: 21.9 days reads as such), speedup (from 16 GPUs, the fewest that hold
    # the model: 512 × 0.9^(5/4) = 448.8), the rule's scaling efficiency
    assert re.findall(r"<td>([^<]*)</td>", chosen)[:5] == ["512", "Tensor parallel 8, ZeRO stage 1, Micro-batch size 1",
                                                          "21.9 days", "448.8", "78.9%"]
    caption = re.search(r"<caption>([^<]*)</caption>", table)[1]
    assert caption.startswith("The same workload on 1, 2, 4, …, 1,024 GPUs")


def test_print_stylesheet(tmp_path, grid_for):
    grid_for()
    html, _ = html_for(tmp_path)
    assert "@media print" in html and "@page { size: A4" in html
    assert "figure, table, tr, .key-figures, .verdicts { break-inside: avoid" in html


@pytest.mark.parametrize("lang, heads", [
    ("zh-TW", ["模型與精度", "記憶體容量", "運算", "記憶體頻寬", "擴展性", "注意事項"]),
    ("zh-CN", ["模型与精度", "显存容量", "计算", "显存带宽", "扩展性", "注意事项"]),
])
def test_chinese_summaries(tmp_path, grid_for, lang, heads):
    grid_for()
    html, _ = html_for(tmp_path, lang=lang)
    assert f'<html lang="{lang}">' in html
    positions = [html.index(f"{h}</h2>") for h in heads]
    assert positions == sorted(positions)


def test_inference_without_scaling_grid(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "scaling_grid", lambda *args: None)
    html, _ = html_for(tmp_path, "inference")
    assert '<svg class="chart scaling"' not in html and '<table class="scaling">' not in html
    assert 'id="scaling"' not in html or "Scaling efficiency" in html


def test_user_template_overrides_by_file_name(tmp_path, grid_for, monkeypatch):
    grid_for()
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "_summary.css.j2").write_text("body { color: rebeccapurple; }", encoding="utf-8")
    monkeypatch.setenv("SIZING_TEMPLATES", str(custom))
    html, _ = html_for(tmp_path)
    assert "rebeccapurple" in html and "@media print" not in html
    assert "≈ 19.2 days on 512 × H100 SXM5 80GB" in html            # the rest is the package's own


def test_a_missing_value_in_a_template_is_an_error(tmp_path, grid_for, monkeypatch):
    grid_for()
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "summary.html.j2").write_text("<p>{{ q.customer }} {{ q.no_such_field }}</p>",
                                            encoding="utf-8")
    monkeypatch.setenv("SIZING_TEMPLATES", str(custom))
    with pytest.raises(jinja2.UndefinedError):
        html_for(tmp_path)


def test_user_template_is_autoescaped_too(tmp_path, grid_for, monkeypatch):
    grid_for()
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "summary.html.j2").write_text("<h1>{{ q.customer }}</h1>{{ m.values.yes }}",
                                            encoding="utf-8")
    monkeypatch.setenv("SIZING_TEMPLATES", str(custom))
    html, _ = html_for(tmp_path)
    assert html == "<h1>=HYPERLINK(&#34;http://evil.example&#34;,&#34;click&#34;)</h1>Yes"


def test_hostile_warning_in_every_language_is_escaped(tmp_path, grid_for):
    grid_for()
    for lang in ("zh-TW", "zh-CN"):
        html, _ = html_for(tmp_path, lang=lang)
        assert HOSTILE_WARNING not in html and "&lt;img" in html


def _timeless(html: str) -> str:
    """The page without its time of writing, which moves on between two renders (the footer
    repeats it outside a <time> element)."""
    html = re.sub(r"<time[^>]*>[^<]*</time>", "<time></time>", html)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", "", html)


def _fresh_process_templates(monkeypatch, cache):
    """What a new process sees: no environment built yet, this template cache folder."""
    from engine.quote import html_page
    monkeypatch.setenv("SIZING_CACHE_DIR", str(cache))
    html_page.environment.cache_clear()


def test_compiled_templates_are_kept_and_a_changed_template_is_compiled_afresh(tmp_path, grid_for,
                                                                               monkeypatch):
    grid_for()
    custom, cache = tmp_path / "custom", tmp_path / "cache"
    custom.mkdir()
    monkeypatch.setenv("SIZING_TEMPLATES", str(custom))
    (custom / "_summary.css.j2").write_text("body { color: rebeccapurple; }", encoding="utf-8")
    _fresh_process_templates(monkeypatch, cache)
    first, _ = html_for(tmp_path)
    kept = sorted((cache / "templates").iterdir())
    assert len(kept) >= 2                  # the page and the overriding stylesheet, at least
    (custom / "_summary.css.j2").write_text("body { color: papayawhip; }", encoding="utf-8")
    _fresh_process_templates(monkeypatch, cache)
    second, _ = html_for(tmp_path)
    # Jinja compares each kept entry with its template's source: the edit shows, never the old page
    assert "rebeccapurple" in first and "papayawhip" in second and "rebeccapurple" not in second
    assert _timeless(second.replace("papayawhip", "rebeccapurple")) == _timeless(first)


def test_a_damaged_or_unusable_template_cache_only_costs_time(tmp_path, grid_for, monkeypatch):
    grid_for()
    cache = tmp_path / "cache"
    _fresh_process_templates(monkeypatch, cache)
    expected, _ = html_for(tmp_path)
    for entry in (cache / "templates").iterdir():
        # Jinja's own header and the template's checksum, then code that is not code: Jinja
        # would hand this to marshal and fail; the quote must compile the template instead
        kept = io.BytesIO(entry.read_bytes())
        assert kept.read(len(jinja2.bccache.bc_magic)) == jinja2.bccache.bc_magic
        pickle.load(kept)
        entry.write_bytes(kept.getvalue()[:kept.tell()] + b"\xff not a code object" + bytes(range(64)))
    _fresh_process_templates(monkeypatch, cache)
    assert _timeless(html_for(tmp_path)[0]) == _timeless(expected)
    blocked = tmp_path / "a-file-not-a-folder"
    blocked.write_text("x", encoding="utf-8")            # the cache folder cannot be made
    _fresh_process_templates(monkeypatch, blocked)
    assert _timeless(html_for(tmp_path)[0]) == _timeless(expected)
