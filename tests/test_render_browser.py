"""The HTML summary in a real headless Chromium: no console errors, key figures visible, prints cleanly."""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_render_cases import HOSTILE_CUSTOMER, HOSTILE_WARNING, make_job

from engine.job import write_quote
from engine.quote import view as render

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium; .ci/run does)")


class Browser:
    """A minimal DevTools-protocol client over --remote-debugging-pipe (fd 3 in, fd 4 out)."""

    def __init__(self, profile: Path, timeout: float = 30):
        to_browser, self._out = os.pipe()
        self._in, from_browser = os.pipe()

        def wire():  # runs in the child: the pipe ends become fds 3 and 4
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", f"--user-data-dir={profile}",
             "about:blank"],
            preexec_fn=wire, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.timeout, self.events, self._buffer, self._next = timeout, [], b"", 0

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == self._next)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def wait_event(self, method: str) -> dict:
        return self._wait(lambda m: m.get("method") == method)

    def _wait(self, match) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if match(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text", "exception"))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(p["entry"]["text"])
            elif e["method"] == "Network.loadingFailed":
                out.append(f"load failed: {p.get('errorText')}")
        return out

    def close(self):
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._in)
        os.close(self._out)


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


def open_page(browser: Browser, url: str) -> str:
    """Open `url` in a fresh tab with console, log and network events on; returns the session."""
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session=session)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": 1100, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)
    browser.send("Page.navigate", {"url": url}, session)
    browser.wait_event("Page.loadEventFired")
    return session


def evaluate(browser: Browser, session: str, expression: str):
    reply = browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                         session)
    return reply["result"].get("value")


def test_the_probe_sees_console_errors(browser, tmp_path):
    """The check below can fail: a page that logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><p>x</p><script>console.error('boom')</script>")
    open_page(browser, page.as_uri())
    time.sleep(0.2)
    browser.send("Target.getTargets")     # flush events that arrived with the load
    assert any("boom" in e for e in browser.errors())


@pytest.mark.parametrize("workload, lang, expected", [
    ("training", "en", ["≈ 19.2 days on 512 × H100 SXM5 80GB", "235,930 GPU-hours", "589,824 USD",
                        "62.5 GB", "Model & precision", "Scaling"]),
    ("inference", "en", ["412.5 ms", "23.8 ms", "1,345 tokens/s", "2.48 USD",
                         "Misses the latency targets."]),
    ("training", "zh-TW", ["約 19.2 天，使用 512 × H100 SXM5 80GB", "模型與精度", "記憶體容量"]),
    ("inference", "zh-CN", ["每秒输出 1,345 tokens", "模型与精度", "显存容量"]),
])
def test_summary_in_chromium(browser, tmp_path, monkeypatch, workload, lang, expected):
    from test_render_cases import make_grid
    monkeypatch.setattr(render, "scaling_grid", lambda *args: make_grid(workload))
    job = make_job(tmp_path, workload, lang)
    html = next(p for p in write_quote(job, ("html",)) if p.suffix == ".html")
    session = open_page(browser, html.as_uri())

    text = evaluate(browser, session, "document.body.innerText")
    for figure in expected:
        assert figure in text, figure
    if workload == "training":
        assert HOSTILE_CUSTOMER in text                 # shown as text, not a link or formula
    assert HOSTILE_WARNING.split(" +")[0] in text or "警告" in text
    assert evaluate(browser, session, "document.querySelectorAll('img, script').length") == 0
    heights = evaluate(browser, session, "[...document.querySelectorAll('svg.chart')]"
                                         ".map(s => s.getBoundingClientRect().height)")
    assert len(heights) == 3 and all(h > 100 for h in heights)   # memory, roofline, scaling

    shot = browser.send("Page.captureScreenshot",
                        {"format": "png", "captureBeyondViewport": True}, session)
    (tmp_path / f"summary-{workload}-{lang}.png").write_bytes(base64.b64decode(shot["data"]))
    # "Print to PDF" on the page's own A4 set-up: a few clean pages, not one per section
    pdf = base64.b64decode(browser.send("Page.printToPDF", {"printBackground": True,
                                                            "preferCSSPageSize": True},
                                        session)["data"])
    (tmp_path / f"summary-{workload}-{lang}.pdf").write_bytes(pdf)
    assert pdf.startswith(b"%PDF") and 2 <= len(re.findall(rb"/Type\s*/Page\b", pdf)) <= 4

    requested = [e["params"]["request"]["url"] for e in browser.events
                 if e["method"] == "Network.requestWillBeSent"]
    assert all(u.startswith(("file:", "data:", "about:")) for u in requested), requested
    assert browser.errors() == []


# ---------------------------------------------------------------- Chinese glyphs, not boxes

# Draws each Chinese character of the page in the font the page gives its text, and the same for
# a code point no font may map (U+0378 is unassigned): a character drawn exactly as that one is
# a missing-glyph box. Chromium's canvas falls back through the same fonts as the page.
MISSING_GLYPHS = r"""
(() => {
  const font = '32px ' + getComputedStyle(document.body).fontFamily;
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 48;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (ch) => {
    ctx.clearRect(0, 0, 48, 48);
    ctx.font = font;
    ctx.fillText(ch, 4, 36);
    return Array.from(ctx.getImageData(0, 0, 48, 48).data).join(',');
  };
  const box = draw('\u0378');
  const chars = [...new Set(document.body.innerText.match(PATTERN) || [])];
  return {checked: chars.length, missing: chars.filter(ch => draw(ch) === box)};
})()
"""
CHINESE = r"/[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]/gu"


def missing_glyphs(browser: Browser, session: str, pattern: str = CHINESE) -> dict:
    return evaluate(browser, session, MISSING_GLYPHS.replace("PATTERN", pattern))


def test_the_glyph_probe_sees_a_box(browser, tmp_path):
    """The check below can fail: characters no font has (two other unassigned code points) are
    found drawn as the box, and Latin letters are not."""
    page = tmp_path / "boxes.html"
    page.write_text("<!doctype html><meta charset=utf-8><body>Quote \u0379\u0380</body>", encoding="utf-8")
    session = open_page(browser, page.as_uri())
    assert missing_glyphs(browser, session, r"/[\u0379\u0380Q]/gu") == {"checked": 3, "missing": ["\u0379", "\u0380"]}


@pytest.mark.parametrize("lang", ["zh-TW", "zh-CN"])
def test_chinese_quote_pages_draw_every_character_not_a_box(browser, tmp_path, monkeypatch, lang):
    """On a machine without a CJK font (scripts/system-packages installs fonts-noto-cjk) every
    Chinese character of the quote and of the sweep page is drawn as the same empty box."""
    from test_render_cases import make_grid
    monkeypatch.setattr(render, "scaling_grid", lambda *args: make_grid("training"))
    job = make_job(tmp_path, "training", lang)
    html = next(p for p in write_quote(job, ("html",)) if p.suffix == ".html")
    result = missing_glyphs(browser, open_page(browser, html.as_uri()))
    assert result["checked"] > 50 and result["missing"] == [], \
        f"{len(result['missing'])} of {result['checked']} Chinese characters drawn as boxes: no CJK font?"


def test_a_chinese_sweep_page_draws_every_character_not_a_box(browser, tmp_path):
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    sample = root / "samples" / "llama-8b-pretraining-256xh100.zh-CN.yaml"
    proc = subprocess.run([sys.executable, "-m", "engine", "sweep", str(sample), "--gpu", "H100,A100",
                           "--gpu-count", "64", "-o", str(tmp_path)], capture_output=True, text=True,
                          cwd=root, timeout=180)
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / f"{sample.stem}.sweep.html"
    result = missing_glyphs(browser, open_page(browser, page.as_uri()))
    assert result["checked"] > 30 and result["missing"] == [], result
