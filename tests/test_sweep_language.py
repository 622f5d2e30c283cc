"""`sizing sweep` on a Chinese intake speaks its language — what it prints, its workbook and its
page — with one punctuation style: real processes on the shipped zh-CN sample and a tight intake."""

import re
import subprocess
import sys

from openpyxl import load_workbook

from tests.conftest import ROOT

CJK = r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]"
HALF_WIDTH_NEXT_TO_CHINESE = re.compile(rf"(?<={CJK})[,;:?!()]|[,;:?!()](?={CJK})")
ENGLISH_WORDS = re.compile(r"\b(configurations?|evaluated|layouts?|Recommended|Nothing|Nearest|Left out|"
                           r"lowest|qualif\w+|deadline|memory|fits?|miss\w*|yes|no|Sweep|Precision|GPUs)\b")


def sweep(*args):
    return subprocess.run([sys.executable, "-m", "engine", "sweep", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=180)


def test_a_zh_cn_sweep_prints_writes_and_recommends_in_chinese(tmp_path):
    proc = sweep(ROOT / "samples" / "llama-8b-pretraining-256xh100.zh-CN.yaml", "--gpu", "H100,A100",
                 "--gpu-count", "8,64", "--precision", "bf16,fp8", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("共评估 6 种配置（") and "略过：A100 SXM4 80GB 上的 fp8（" in out
    # Megatron-Core's loss keeps 6 bytes a logit (training_software.yaml), so the plan without a pipeline no longer
    # leaves its headroom on 80 GB; two pipeline stages of six interleaved chunks are the cheapest that do
    assert "\n推荐：64 × H100 SXM5 80GB，fp8（流水线并行 2 · 交错流水线分块数 6 · ZeRO 阶段 1 · 微批大小 1）（成本最低）。" in out
    assert "否：赶不上期限" in out and "训练时间（天）" in out
    assert ENGLISH_WORDS.findall(out) == [] and HALF_WIDTH_NEXT_TO_CHINESE.findall(out) == []
    stem = "llama-8b-pretraining-256xh100.zh-CN"
    wb = load_workbook(tmp_path / f"{stem}.sweep.xlsx")
    assert wb.sheetnames == ["配置比较"]
    headings = [c.value for c in wb["配置比较"][1]]
    assert headings[:4] == ["GPU", "GPU 数量", "精度", "运行配置"] and "全部达标" in headings
    html = (tmp_path / f"{stem}.sweep.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in html and f"<title>配置比较：{stem}</title>" in html
    text = re.sub(r"<[^>]+>", " ", html.split("<body>")[1])
    assert ENGLISH_WORDS.findall(text) == [] and HALF_WIDTH_NEXT_TO_CHINESE.findall(text) == []


def test_a_zh_tw_sweep_that_finds_nothing_says_why_in_chinese(tmp_path):
    base = tmp_path / "tight.yaml"
    base.write_text("customer: 測試公司\nlanguage: zh-TW\nworkload: pretraining\nmodel: llama-2-7b\n"
                    "precision: bf16\ntraining_tokens_billion: 2000\ngpu: A100\ngpu_count: 8\n"
                    "deadline_days: 30\n", encoding="utf-8")
    proc = sweep(base, "--gpu", "A100,H100NVL", "--gpu-count", "8,16", "--precision", "bf16")
    assert proc.returncode == 1, proc.stderr
    assert "\n沒有符合條件的配置：4 種趕不上 30 天的期限。" in proc.stdout
    nearest = proc.stdout.split("最接近：", 1)[1]
    assert "H100 NVL（每張 GPU）" in nearest and "天，期限為 30 天（差 " in nearest
    assert ENGLISH_WORDS.findall(proc.stdout) == [] and HALF_WIDTH_NEXT_TO_CHINESE.findall(proc.stdout) == []
