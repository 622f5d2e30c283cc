"""Composing replies: threading and anti-loop headers, an email-safe body, each language."""

from __future__ import annotations

import email
import re
from email import policy
from pathlib import Path

import pytest

from engine.job import run_job
from engine.paths import LANGUAGES
from engine.services.mail.inbound import Envelope, Refusal
from engine.services.mail.reply import (Outcome, Review, catalogue, failure_note, failure_reply,
                                        quote_reply, refusal_reply, template_reply)

ROOT = Path(__file__).resolve().parent.parent
SENDER = "quotes@example.com"
REVIEW = Review("Dana in sales operations", 4)
FIGURES_NOTE = "the attached workbook shows every formula behind them"


def envelope(subject="Quote please") -> Envelope:
    return Envelope(key="<r@example.com>", message_id="<r@example.com>", sender="alice@example.com",
                    subject=subject, references=["<p@example.com>", "<r@example.com>"], auto_reason=None)


def roundtrip(message) -> email.message.EmailMessage:
    """What the recipient sees: the bytes as sent over SMTP, parsed again."""
    return email.message_from_bytes(message.as_bytes(policy=policy.SMTP), policy=policy.default)


def quote(tmp_path: Path, name: str, text: str):
    source = tmp_path / name
    source.write_text(text, encoding="utf-8")
    (tmp_path / "out").mkdir(exist_ok=True)
    return run_job(source, tmp_path / "out")


def test_reply_headers_thread_and_stop_loops():
    reply = roundtrip(template_reply(envelope(), sender=SENDER, lang="en", template=None))
    assert reply["To"] == "alice@example.com" and reply["From"] == SENDER
    assert reply["Subject"] == "Re: Quote please"
    assert reply["In-Reply-To"] == "<r@example.com>"
    assert reply["References"] == "<p@example.com> <r@example.com>"
    assert reply["Auto-Submitted"] == "auto-replied"
    assert reply["X-Auto-Response-Suppress"] == "All"
    assert reply["Message-ID"].endswith("@example.com>")
    assert {p.get_content_type() for p in reply.walk()} >= {"text/plain", "text/html"}


@pytest.mark.parametrize("subject, expected", [("RE: Quote", "RE: Quote"), ("", "Re: Sizing quote"),
                                               ("估價", "Re: 估價")])
def test_subjects_are_not_prefixed_twice(subject, expected):
    reply = roundtrip(refusal_reply(envelope(subject), sender=SENDER, lang="en"))
    assert reply["Subject"] == expected


def test_user_text_is_escaped_in_the_html(tmp_path):
    job = quote(tmp_path, "x.yaml", 'customer: "<script>alert(1)</script>"\nworkload: pretraining\n'
                                    'model: "<svg onload=alert(1)>"\ngpu: H100\ngpu_count: 8\n')
    assert job.status == "invalid"
    reply = roundtrip(quote_reply(envelope(), [Outcome("x.yaml", "invalid", job)], sender=SENDER,
                                  review=REVIEW))
    html = reply.get_body(("html",)).get_content()
    assert "<script" not in html and "<svg" not in html and "&lt;svg onload" in html


def test_a_quote_reply_lists_the_key_figures_in_the_intake_language(tmp_path):
    text = (ROOT / "samples" / "rtx4090-lora-7b.zh-TW.yaml").read_text(encoding="utf-8")
    job = quote(tmp_path, "lora.yaml", text)
    assert job.status == "quoted"
    reply = roundtrip(quote_reply(envelope(), [Outcome("lora.yaml", "quoted", job)], sender=SENDER,
                                  review=REVIEW))
    body = reply.get_body(("plain",)).get_content()
    assert reply["Content-Language"] == "zh-TW"
    assert "估價完成" in body and "以下是您需求表的估價。" in body
    for figure in job.quote.key_figures:
        assert f"{figure.label}: {figure.text}" in body
    assert catalogue("zh-TW")["figures_note"] in body
    assert {p.get_filename() for p in reply.iter_attachments()} == {"lora.quote.xlsx", "lora.quote.html"}


def test_refused_and_failed_attachments_say_why(tmp_path):
    failed = quote(tmp_path, "junk.xlsx", "not a workbook")
    outcomes = [Outcome("junk.xlsx", "failed", failed),
                Outcome("big.yaml", "refused", refusal=Refusal("big.yaml", "too_big",
                                                               {"mb": "12", "limit_mb": "10"}))]
    reply = roundtrip(quote_reply(envelope(), outcomes, sender=SENDER, review=REVIEW))
    body = reply.get_body(("plain",)).get_content()
    assert "== junk.xlsx: Could not be quoted ==" in body and failed.problems[0].message in body
    assert "The file is 12 MB; files up to 10 MB are read." in body
    assert "Dana in sales operations has been told and will look at it within 4 hours" in body
    assert "Failed" not in body                      # a folder name means nothing to the sender
    assert FIGURES_NOTE not in body                  # no figures given, no note about them
    assert list(reply.iter_attachments()) == []


@pytest.mark.parametrize("code", ["too_big", "structure", "internal"])
def test_message_failures_read_in_every_language(code):
    for lang in LANGUAGES:
        reply = roundtrip(failure_reply(envelope(), code, {"mb": "30", "limit_mb": "25", "detail": "x"},
                                        sender=SENDER, lang=lang, review=REVIEW))
        body = reply.get_body(("plain",)).get_content()
        assert catalogue(lang)["message_failures"][code].split("{")[0][:8] in body


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_figures_note_is_only_on_replies_with_figures(lang):
    """Template, refusal and failure replies carry no figures, so no word about their formulas."""
    note = catalogue(lang)["figures_note"]
    for reply in (template_reply(envelope(), sender=SENDER, lang=lang, template=None),
                  refusal_reply(envelope(), sender=SENDER, lang=lang),
                  failure_reply(envelope(), "structure", {}, sender=SENDER, lang=lang, review=REVIEW)):
        shown = roundtrip(reply)
        assert note not in shown.get_body(("plain",)).get_content()
        assert note not in shown.get_body(("html",)).get_content()


def test_a_failed_intake_in_chinese_gets_a_chinese_wrapper_when_nothing_was_read(tmp_path):
    """No intake could be read: the wrapper follows the service's language, not English."""
    outcomes = [Outcome("估價.xlsx", "failed", detail="MemoryError")]
    reply = roundtrip(quote_reply(envelope(), outcomes, sender=SENDER, review=REVIEW, lang="zh-CN"))
    body = reply.get_body(("plain",)).get_content()
    assert reply["Content-Language"] == "zh-CN"
    assert catalogue("zh-CN")["intro"]["failed"] in body and "4 小时内" in body


def test_catalogues_have_the_same_entries_and_fields():
    def shape(node):
        if isinstance(node, dict):
            return {k: shape(v) for k, v in node.items()}
        return sorted(re.findall(r"{(\w+)}", node))
    english = shape(catalogue("en"))
    for lang in LANGUAGES:
        assert shape(catalogue(lang)) == english, lang


def test_the_failure_note_names_the_request_and_reason():
    note = email.message_from_bytes(failure_note(envelope(), "seed.yaml: refused", sender=SENDER),
                                    policy=policy.default)
    assert note["In-Reply-To"] == "<r@example.com>"
    assert "Reason:   seed.yaml: refused" in note.get_content()


def test_a_deployment_can_reword_replies_by_file_name(tmp_path, monkeypatch):
    from engine.services.mail import reply as mail_reply
    override = tmp_path / "mail"
    override.mkdir()
    english = (ROOT / "templates" / "mail" / "messages.en.yaml").read_text(encoding="utf-8")
    (override / "messages.en.yaml").write_text(english.replace("greeting: Hello,", "greeting: Hi team,"))
    monkeypatch.setenv("SIZING_TEMPLATES", str(tmp_path))
    mail_reply.catalogue.cache_clear()
    mail_reply._environment.cache_clear()
    try:
        reply = roundtrip(refusal_reply(envelope(), sender=SENDER, lang="en"))
        assert reply.get_body(("plain",)).get_content().startswith("Hi team,")
    finally:
        monkeypatch.delenv("SIZING_TEMPLATES")
        mail_reply.catalogue.cache_clear()
        mail_reply._environment.cache_clear()
