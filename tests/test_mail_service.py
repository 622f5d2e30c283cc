"""The mail service against a real Dovecot and a real SMTP server: replies, folders, hostile mail."""

from __future__ import annotations

import base64
import io
import re
from email.message import EmailMessage
from pathlib import Path

import pytest
from openpyxl import load_workbook

from engine.job import run_job

pytest_plugins = ["support.mailservers"]      # the dovecot, smtp_sink and mailbox fixtures

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SEED_YAML = (SAMPLES / "seed002-bert-base-8xv100.yaml").read_bytes()
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
MIME = {".yaml": "application/yaml", ".json": "application/json", ".xlsx": XLSX, ".xls": XLSX}


def request(*attachments, sender="Alice Example <alice@example.com>", subject="Quote please",
            msgid="<req-1@example.com>", headers=None, body="Please quote the attached.") -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = "quotes@example.com"
    msg["Subject"] = subject
    if msgid:
        msg["Message-ID"] = msgid
    for name, value in (headers or {}).items():
        msg[name] = value
    msg.set_content(body)
    for name, data in attachments:
        maintype, subtype = MIME.get(Path(name).suffix, "application/octet-stream").split("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return msg


def only_reply(box):
    assert len(box.sink.received) == 1, [r["message"]["Subject"] for r in box.sink.received]
    return box.sink.received[0]


def files(msg) -> dict[str, bytes]:
    return {part.get_filename(): part.get_payload(decode=True) for part in msg.iter_attachments()}


def text(msg) -> str:
    return msg.get_body(("plain",)).get_content()


def html(msg) -> str:
    body = msg.get_body(("html",)).get_content()
    # Email-safe: what mail clients strip or block must not be needed.
    for banned in ("<script", "<svg", "<style", "<link", "<img", "javascript:", " on"):
        assert not re.search(re.escape(banned) + (r"\w+=" if banned == " on" else ""), body, re.I), banned
    assert "<table" in body and 'style="' in body
    return body


def assert_threaded_reply(record, original: EmailMessage, to: str = "alice@example.com"):
    reply = record["message"]
    assert record["to"] == [to] and reply["To"] == to
    assert record["from"] == "quotes@example.com" and reply["From"] == "quotes@example.com"
    assert reply["Subject"] == f"Re: {original['Subject']}"
    assert reply["In-Reply-To"] == original["Message-ID"]
    assert original["Message-ID"] in reply["References"]
    assert reply["Auto-Submitted"] == "auto-replied"
    assert reply["Message-ID"] and reply["Message-ID"] != original["Message-ID"]


def workbook_bytes(path: Path, **changes) -> bytes:
    """A sample workbook with some cells changed through their defined names."""
    wb = load_workbook(path)
    for key, value in changes.items():
        sheet, cell = next(iter(wb.defined_names[key].destinations))
        wb[sheet][cell.replace("$", "")].value = value
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def fetched_items(monkeypatch) -> list:
    """Record the data items of every IMAP FETCH the service makes."""
    from imapclient import IMAPClient
    calls, real = [], IMAPClient.fetch

    def spy(self, messages, data, *args, **kwargs):
        calls.append((list(messages), list(data)))
        return real(self, messages, data, *args, **kwargs)
    monkeypatch.setattr(IMAPClient, "fetch", spy)
    return calls


# -- quotes ------------------------------------------------------------------------------------

def test_a_yaml_intake_is_quoted_by_reply(mailbox):
    original = request(("seed.yaml", SEED_YAML))
    mailbox.deliver(original)
    assert mailbox.poll() == 1
    record = only_reply(mailbox)
    assert_threaded_reply(record, original)
    reply = record["message"]
    attached = files(reply)
    assert sorted(attached) == ["seed.quote.html", "seed.quote.xlsx"]
    assert load_workbook(io.BytesIO(attached["seed.quote.xlsx"])).sheetnames      # a real workbook
    body, page = text(reply), html(reply)
    for figure in ("Training time", "GPU-hours", "Fits in GPU memory"):
        assert figure in body and figure in page
    assert "Quote ready" in body
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_a_workbook_intake_is_answered_in_its_language(mailbox):
    sample = SAMPLES / "rtx4090-lora-7b.zh-TW.xlsx"
    original = request((sample.name, sample.read_bytes()), subject="估價 請")
    mailbox.deliver(original)
    mailbox.poll()
    record = only_reply(mailbox)
    assert_threaded_reply(record, original)
    reply = record["message"]
    assert reply["Content-Language"] == "zh-TW"
    assert "估價完成" in text(reply) and "估價完成" in html(reply)
    assert sorted(files(reply)) == ["rtx4090-lora-7b.zh-TW.quote.html", "rtx4090-lora-7b.zh-TW.quote.xlsx"]


def test_several_attachments_get_one_reply_covering_each(mailbox):
    zh = SAMPLES / "qwen-7b-offline-4xl40s.zh-CN.xlsx"
    original = request(("seed.yaml", SEED_YAML), (zh.name, zh.read_bytes()),
                       ("wrong.yaml", b"customer: X\nworkload: pretraining\ngpu: H100\ngpu_count: -3\n"))
    mailbox.deliver(original)
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    body = text(reply)
    assert "3 intake files" in body
    assert "== seed.yaml: Quote ready ==" in body and f"== {zh.name}: Quote ready ==" in body
    assert re.search(r"== wrong.yaml: \d+ problem\(s\) to fix ==", body)
    assert "wrong.yaml:4" in body                        # the YAML line of gpu_count
    assert sorted(files(reply)) == sorted(["seed.quote.xlsx", "seed.quote.html",
                                           zh.stem + ".quote.xlsx", zh.stem + ".quote.html"])
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_an_invalid_workbook_gets_every_problem_with_its_cell(mailbox, tmp_path):
    sample = SAMPLES / "llama-8b-pretraining-256xh100.zh-CN.xlsx"
    data = workbook_bytes(sample, gpu_count=-3, utilization=7)
    (tmp_path / "bad.xlsx").write_bytes(data)
    (tmp_path / "out").mkdir()
    expected = run_job(tmp_path / "bad.xlsx", tmp_path / "out")
    assert expected.status == "invalid" and len(expected.problems) >= 2
    original = request(("bad.xlsx", data))
    mailbox.deliver(original)
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    body, page = text(reply), html(reply)
    assert reply["Content-Language"] == "zh-CN" and "个问题待修改" in body
    for problem in expected.problems:
        assert f"{problem.where}: {problem.message}" in body
        assert problem.where in page
    annotated = files(reply)["bad.errors.xlsx"]
    assert load_workbook(io.BytesIO(annotated)).sheetnames
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_a_mail_without_intake_gets_the_blank_template_without_being_downloaded(mailbox, monkeypatch):
    calls = fetched_items(monkeypatch)
    original = request(subject="How do I ask for a quote?")
    mailbox.deliver(original)
    mailbox.poll(quote=lambda *a: pytest.fail("nothing to quote"))
    record = only_reply(mailbox)
    assert_threaded_reply(record, original)
    reply = record["message"]
    assert "blank intake template is attached" in text(reply)
    template = files(reply)["intake.xlsx"]
    assert "customer" in load_workbook(io.BytesIO(template)).defined_names
    assert not any("BODY.PEEK[]" in items for _, items in calls)       # headers were enough
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_other_files_alone_get_the_template_and_are_named(mailbox):
    mailbox.deliver(request(("logo.png", b"\x89PNG\r\n"), ("notes.pdf", b"%PDF-1.4")))
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    assert "logo.png, notes.pdf" in text(reply) and "intake.xlsx" in files(reply)


# -- who may ask -------------------------------------------------------------------------------

def test_outsiders_get_silence_by_default(mailbox):
    mailbox.deliver(request(("seed.yaml", SEED_YAML), sender="eve@competitor.test"))
    mailbox.poll()
    assert mailbox.sink.received == []
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_outsiders_can_get_a_polite_refusal_without_pricing(mailbox):
    mailbox.configure(outsiders="refuse")
    original = request(("seed.yaml", SEED_YAML), sender="eve@competitor.test")
    mailbox.deliver(original)
    mailbox.poll()
    record = only_reply(mailbox)
    assert_threaded_reply(record, original, to="eve@competitor.test")
    reply = record["message"]
    assert files(reply) == {}
    assert "registered sales addresses" in text(reply)
    assert "Training time" not in text(reply) and "Training time" not in html(reply)


def test_pricing_never_follows_reply_to_or_a_display_name(mailbox):
    mailbox.configure(outsiders="refuse")
    mailbox.deliver(request(("seed.yaml", SEED_YAML), msgid="<a@example.com>",
                            headers={"Reply-To": "eve@competitor.test"}))
    mailbox.deliver(request(("seed.yaml", SEED_YAML), msgid="<b@example.com>",
                            sender='"alice@example.com" <eve@competitor.test>'))
    mailbox.poll()
    records = mailbox.sink.wait(2)
    by_recipient = {r["to"][0]: r["message"] for r in records}
    assert set(by_recipient) == {"alice@example.com", "eve@competitor.test"}
    assert "seed.quote.xlsx" in files(by_recipient["alice@example.com"])
    assert files(by_recipient["eve@competitor.test"]) == {}


@pytest.mark.parametrize("headers, sender", [
    ({"Auto-Submitted": "auto-replied"}, "alice@example.com"),
    ({"Precedence": "bulk"}, "alice@example.com"),
    ({"List-Id": "<sales.example.com>"}, "alice@example.com"),
    ({"Return-Path": "<>"}, "alice@example.com"),
    ({}, "MAILER-DAEMON@example.com"),
    ({}, "quotes@example.com"),
])
def test_machine_mail_gets_no_reply(mailbox, headers, sender):
    mailbox.deliver(request(("seed.yaml", SEED_YAML), sender=sender, headers=headers,
                            subject="Automatic reply: Quote please"))
    mailbox.poll()
    assert mailbox.sink.received == []
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_a_duplicate_message_id_is_answered_once(mailbox):
    original = request(("seed.yaml", SEED_YAML))
    mailbox.deliver(original)
    mailbox.deliver(original)
    mailbox.poll()
    mailbox.deliver(original)               # and again after the first was filed
    mailbox.poll()
    only_reply(mailbox)
    assert mailbox.counts() == {"INBOX": 0, "Processed": 3, "Failed": 0}


def test_the_rate_limit_defers_without_downloading_again(mailbox, monkeypatch):
    mailbox.configure(rate_limit_per_hour=2)
    for n in range(4):
        mailbox.deliver(request(msgid=f"<r{n}@example.com>", subject=f"question {n}"))
    mailbox.poll()
    assert [r["message"]["Subject"] for r in mailbox.sink.wait(2)] == ["Re: question 0", "Re: question 1"]
    assert mailbox.counts() == {"INBOX": 2, "Processed": 2, "Failed": 0}
    calls = fetched_items(monkeypatch)
    mailbox.poll()
    assert calls == [] and len(mailbox.sink.received) == 2
    assert mailbox.counts()["INBOX"] == 2                  # waiting, not lost


def test_a_flood_without_attachments_is_looked_at_once(mailbox, monkeypatch):
    mailbox.configure(rate_limit_per_hour=3)
    flood = [request(msgid=f"<flood-{n}@example.com>", subject=f"ping {n}").as_bytes() for n in range(150)]
    mailbox.client.multiappend("INBOX", flood)
    calls = fetched_items(monkeypatch)
    mailbox.poll()
    assert len(mailbox.sink.wait(3)) == 3
    assert not any("BODY.PEEK[]" in items for _, items in calls)     # no body was downloaded
    assert sum(len(uids) for uids, _ in calls) == 150                 # each header block once
    calls.clear()
    mailbox.poll()
    mailbox.poll()
    assert calls == [] and len(mailbox.sink.received) == 3
    assert mailbox.counts() == {"INBOX": 147, "Processed": 3, "Failed": 0}


def test_a_recreated_mailbox_is_not_mistaken_for_processed_mail(mailbox):
    mailbox.configure(folder="Quotes", rate_limit_per_hour=1)
    mailbox.client.create_folder("Quotes")
    mailbox.deliver(request(msgid="<old-1@example.com>"), "Quotes")
    mailbox.deliver(request(msgid="<old-2@example.com>"), "Quotes")    # UID 2: deferred
    mailbox.poll()
    assert len(mailbox.sink.received) == 1
    mailbox.client.delete_folder("Quotes")
    mailbox.client.create_folder("Quotes")                              # new UIDVALIDITY, UIDs reused
    mailbox.deliver(request(msgid="<new-1@example.com>", sender="bob@example.com"), "Quotes")
    mailbox.deliver(request(msgid="<new-2@example.com>", sender="carol@example.com"), "Quotes")
    mailbox.poll()
    assert sorted(r["to"][0] for r in mailbox.sink.wait(3)[1:]) == ["bob@example.com", "carol@example.com"]


# -- hostile mail and failures -------------------------------------------------------------------

def failed_note(box) -> str:
    folders = box.folders()
    notes = [m for m in folders["Failed"] if m["Subject"].startswith("[sizing] failed")]
    assert len(folders["Failed"]) == 2 and len(notes) == 1, [m["Subject"] for m in folders["Failed"]]
    return notes[0].get_body(("plain",)).get_content()


def test_damaged_base64_is_refused_and_filed_with_the_reason(mailbox):
    raw = request(("seed.yaml", SEED_YAML)).as_bytes()
    encoded = base64.encodebytes(SEED_YAML).split(b"\n")[0]
    mailbox.deliver(raw.replace(encoded, encoded[:-4] + b"%%!!", 1))
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    assert "damaged in transit" in text(reply)
    assert "quotes@example.com has been told and will look at it within 24 hours" in text(reply)
    assert files(reply) == {}
    assert "seed.yaml: not read (damaged)" in failed_note(mailbox)
    assert mailbox.counts()["INBOX"] == 0


def test_a_15_mb_sheet_and_a_100000_deep_json_are_answered_at_once(mailbox, tmp_path):
    """The large and hostile intakes of tests/test_intake_hostile.py, through the mail service."""
    from test_intake_hostile import ANSWER_SECONDS, TEXT_HOSTILE, rows_pasted_into_intake_15mb
    hostile = [rows_pasted_into_intake_15mb(tmp_path), TEXT_HOSTILE[0][0](tmp_path)]
    jobs = []

    def quote(source, outdir, stem):
        jobs.append(run_job(source, outdir, stem=stem))
        return jobs[-1]
    mailbox.deliver(request(*[(p.name, p.read_bytes()) for p in hostile], ("seed.yaml", SEED_YAML)))
    mailbox.poll(quote)
    body = text(only_reply(mailbox)["message"])
    assert "pasted.xlsx was refused: it unpacks to more than 2 MB" in body
    assert "deep-list.json is nested more than 32 levels deep" in body
    assert "seed.quote.xlsx" in files(only_reply(mailbox)["message"])         # the good one is still quoted
    assert [j.status for j in jobs] == ["failed", "failed", "quoted"]
    assert all(j.seconds < ANSWER_SECONDS for j in jobs[:2]), [j.seconds for j in jobs]


def test_hostile_file_names_are_sanitised(mailbox):
    mailbox.deliver(request(("../../../etc/cron.d/evil.yaml", SEED_YAML),
                            ("=?UTF-8?B?5aCx5YO5?=.yaml", SEED_YAML),
                            ("x" * 300 + ".yaml", SEED_YAML)))
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    names = sorted(files(reply))
    assert "evil.quote.xlsx" in names and "報價.quote.xlsx" in names
    assert all("/" not in n and len(n) <= 120 for n in names)
    assert "../" not in text(reply)


def test_rfc2231_file_names_are_decoded(mailbox):
    boundary = b"----b"
    body = (b"From: alice@example.com\r\nTo: quotes@example.com\r\nSubject: rfc2231\r\n"
            b"Message-ID: <rfc2231@example.com>\r\nMIME-Version: 1.0\r\n"
            b"Content-Type: multipart/mixed; boundary=\"" + boundary + b"\"\r\n\r\n--" + boundary +
            b"\r\nContent-Type: text/plain\r\n\r\nhi\r\n--" + boundary +
            b"\r\nContent-Type: application/yaml\r\nContent-Disposition: attachment;\r\n"
            b" filename*0*=UTF-8''%E5%A0%B1%E5%83%B9%E5%96%AE;\r\n filename*1=\".yaml\"\r\n"
            b"Content-Transfer-Encoding: base64\r\n\r\n" + base64.encodebytes(SEED_YAML) +
            b"--" + boundary + b"--\r\n")
    mailbox.deliver(body)
    mailbox.poll()
    assert "報價單.quote.xlsx" in files(only_reply(mailbox)["message"])


def test_an_oversized_message_is_refused_without_being_downloaded(mailbox, monkeypatch):
    mailbox.configure(max_message_mb=0.05)
    calls = fetched_items(monkeypatch)
    mailbox.deliver(request(("big.yaml", SEED_YAML + b"#" + b"x" * 80_000 + b"\n")))
    mailbox.poll(quote=lambda *a: pytest.fail("must not be quoted"))
    reply = only_reply(mailbox)["message"]
    assert "larger than the 0.05 MB" in text(reply)
    assert not any("BODY.PEEK[]" in items for _, items in calls)
    assert "message too big" in failed_note(mailbox)


def test_an_oversized_attachment_is_refused(mailbox):
    mailbox.configure(max_attachment_mb=0.01)
    mailbox.deliver(request(("big.yaml", SEED_YAML + b"#" + b"x" * 20_000 + b"\n"), ("seed.yaml", SEED_YAML)))
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    assert "files up to 0.01 MB are read" in text(reply)
    assert "seed.quote.xlsx" in files(reply)                   # the good one is still quoted
    assert mailbox.counts()["Failed"] == 2


def test_malformed_mime_is_answered_as_damaged(mailbox):
    mailbox.deliver(b"From: alice@example.com\r\nTo: quotes@example.com\r\nSubject: broken\r\n"
                    b"Message-ID: <broken@example.com>\r\nMIME-Version: 1.0\r\n"
                    b"Content-Type: multipart/mixed; boundary=NOPE\r\n\r\n--OTHER\r\n"
                    b"Content-Type: application/yaml; name=a.yaml\r\n\r\ncustomer: x\r\n--OTHER--\r\n")
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    assert "structure is damaged" in text(reply)
    assert "unreadable (structure)" in failed_note(mailbox)


def test_a_password_protected_workbook_is_explained(mailbox):
    from msoffcrypto.format.ooxml import OOXMLFile
    locked = io.BytesIO()
    with open(SAMPLES / "seed002-bert-base-8xv100.xlsx", "rb") as f:
        OOXMLFile(f).encrypt("secret", locked)
    mailbox.deliver(request(("locked.xlsx", locked.getvalue()), ("seed.yaml", SEED_YAML)))
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    assert "== locked.xlsx: Could not be quoted ==" in text(reply)
    assert "password" in text(reply).lower()
    assert "locked.xlsx: could not be quoted: " in failed_note(mailbox)      # with the reason:
    assert "password-protected" in failed_note(mailbox)


def test_a_file_that_is_not_a_workbook_fails_cleanly(mailbox):
    mailbox.deliver(request(("intake.xlsx", b"this is not a zip file at all")))
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    assert "Could not be quoted" in text(reply) and "Failed folder" not in text(reply)
    assert "within 24 hours" in text(reply)
    note = failed_note(mailbox)
    # the reader's own sentence, not just "failed"
    assert re.search(r"Reason: +intake\.xlsx: could not be quoted: .+: .{20,}", note), note


def test_an_smtp_outage_keeps_the_message_and_sends_once_it_is_back(mailbox, smtp_sink):
    from support.mailservers import free_port
    live = mailbox.sink.port
    mailbox.sink.port = free_port()                    # nothing listens there
    mailbox.configure()
    mailbox.deliver(request(("seed.yaml", SEED_YAML)))
    mailbox.poll()
    assert mailbox.counts() == {"INBOX": 1, "Processed": 0, "Failed": 0}
    mailbox.sink.port = live
    mailbox.configure()
    mailbox.poll(quote=lambda *a: pytest.fail("the stored reply is sent, not a new quote"))
    only_reply(mailbox)
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_a_message_that_keeps_breaking_is_filed_after_three_attempts(mailbox, monkeypatch):
    import engine.services.mail.service as mail_service
    def broken(*args, **kwargs):
        raise RuntimeError("renderer exploded")
    monkeypatch.setattr(mail_service, "quote_reply", broken)
    mailbox.deliver(request(("seed.yaml", SEED_YAML)))
    for _ in range(3):
        mailbox.poll()
        assert mailbox.counts()["INBOX"] == 1
    mailbox.poll()
    reply = only_reply(mailbox)["message"]
    assert "went wrong on our side" in text(reply) and "RuntimeError" in text(reply)
    assert "gave up after 3 attempts: RuntimeError: renderer exploded" in failed_note(mailbox)
