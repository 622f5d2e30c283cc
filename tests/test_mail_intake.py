"""Reading incoming mail safely: names, machine mail, the allowlist, hostile attachments."""

from __future__ import annotations

import base64
from email.message import EmailMessage

import pytest

from engine.services.mail.inbound import (is_allowed, might_have_attachment, read_envelope,
                                          read_message, safe_filename)

LIMITS = dict(max_message_bytes=5_000_000, max_attachment_bytes=1_000_000, max_attachments=3)
YAML = b"customer: Example Co.\nworkload: pretraining\n"


@pytest.mark.parametrize("name, expected", [
    ("intake.xlsx", "intake.xlsx"),
    ("../../etc/passwd", "passwd"),
    ("..\\..\\windows\\win.ini", "win.ini"),
    ("/abs/path/intake.yaml", "intake.yaml"),
    ("=?UTF-8?B?5aCx5YO55Zau?=.xlsx", "報價單.xlsx"),              # RFC 2047 word left in a name
    ("=?UTF-8?Q?Angebot_M=C3=BCller.xlsx?=", "Angebot Müller.xlsx"),
    ("invoice\u202excod.xlsx", "invoice_xcod.xlsx"),               # bidi override trick
    ("evil\x00name.yaml", "evil_name.yaml"),
    ("..", "attachment"),
    (".hidden.json", "hidden.json"),
    ("CON.xlsx", "attachment-CON.xlsx"),
    ("a<b>c|d?.xlsx", "a_b_c_d.xlsx"),
    ("報價單 (1).xlsx", "報價單 (1).xlsx"),
])
def test_safe_filename(name, expected):
    assert safe_filename(name) == expected


def test_very_long_names_are_cut_and_keep_their_extension():
    assert len(safe_filename("a" * 5000 + ".xlsx")) == 100
    assert safe_filename("a" * 5000 + ".xlsx").endswith(".xlsx")
    long_cjk = safe_filename("報" * 500 + ".yaml")
    assert long_cjk.endswith(".yaml") and len(long_cjk.encode()) < 255   # fits any file system


def test_two_long_names_alike_up_to_the_cut_keep_two_names():
    # 150 shared characters, then "a" or "b": cut at 100 they would be one name; the hash of the
    # whole name (as the folder service and the CLI end their stems) keeps them apart
    first, second = safe_filename("Quote " * 25 + "a.xlsx"), safe_filename("Quote " * 25 + "b.xlsx")
    assert first != second and len(first) <= 100 and len(second) <= 100
    assert first.endswith(".xlsx") and first.startswith("Quote Quote")


def headers(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode() + b"\r\n"


@pytest.mark.parametrize("extra, reason", [
    ("Auto-Submitted: auto-replied", "Auto-Submitted"),
    ("Auto-Submitted: auto-generated", "Auto-Submitted"),
    ("Precedence: bulk", "Precedence"),
    ("Precedence: list", "Precedence"),
    ("List-Id: <sales.example.com>", "mailing list"),
    ("Return-Path: <>", "bounce"),
    ("X-Autoreply: yes", "auto-responder"),
    ("Content-Type: multipart/report; report-type=delivery-status; boundary=x", "delivery report"),
])
def test_machine_mail_is_recognised(extra, reason):
    envelope = read_envelope(headers(f"From: alice@example.com\nSubject: Out of office\n{extra}\n"))
    assert reason in envelope.auto_reason


@pytest.mark.parametrize("sender", ["MAILER-DAEMON@example.com", "postmaster@example.com",
                                    "no-reply@example.com"])
def test_robot_senders_are_recognised(sender):
    assert read_envelope(headers(f"From: {sender}\n")).auto_reason


def test_own_address_is_a_loop():
    envelope = read_envelope(headers("From: quotes@example.com\n"), own_address="quotes@example.com")
    assert "loop" in envelope.auto_reason


def test_person_mail_is_not_automatic():
    envelope = read_envelope(headers("From: Alice <Alice@Example.com>\nAuto-Submitted: no\n"
                                     "Subject: =?UTF-8?B?5aCx5YO5?= please\nMessage-ID: <m1@example.com>\n"
                                     "References: <r0@example.com>\n"))
    assert envelope.auto_reason is None
    assert envelope.sender == "alice@example.com"
    assert envelope.subject == "報價 please"
    assert envelope.key == envelope.message_id == "<m1@example.com>"
    assert envelope.references == ["<r0@example.com>", "<m1@example.com>"]


@pytest.mark.parametrize("from_header", [
    "alice@example.com, mallory@evil.test",                 # two senders: reply to neither
    '"alice@example.com" <mallory@evil.test>',              # the display name is not the address
    "not an address",
    "",
    "<@evil.test:eve@example.com>",                         # a source route: relayed onwards
    "Eve <@relay.test,@evil.test:eve@example.com>",
    "eve%evil.test@example.com",                            # the percent hack: relayed to evil.test
    "evil.test!eve@example.com",                            # a UUCP bang path
])
def test_ambiguous_or_spoofed_senders_are_not_allowed(from_header):
    envelope = read_envelope(headers(f"From: {from_header}\n"))
    assert not is_allowed(envelope.sender, ("example.com",))


def test_header_injection_in_subject_is_flattened():
    envelope = read_envelope(headers("From: a@example.com\nSubject: =?UTF-8?Q?hi=0D=0ABcc:_x@evil.test?=\n"))
    assert "\n" not in envelope.subject and "\r" not in envelope.subject


def test_message_without_message_id_gets_a_stable_key():
    raw = headers("From: a@example.com\nSubject: x\n")
    assert read_envelope(raw).key == read_envelope(raw).key
    assert read_envelope(raw).key.startswith("sha256:")


@pytest.mark.parametrize("address, allowed", [
    ("bob@example.com", True),
    ("someone@partner.com", True),
    ("other@partner.com", False),
    ("bob@sub.example.com", False),
    ("bob@team.corp.test", True),
    ("bob@corp.test", False),
    ("bob@example.com.evil.test", False),
    ("", False),
    ("eve%evil.test@example.com", False),
    ("evil.test!eve@example.com", False),
])
def test_allowlist(address, allowed):
    assert is_allowed(address, ("example.com", "someone@partner.com", "*.corp.test")) is allowed


def message(*attachments, **headers) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = headers.pop("sender", "alice@example.com")
    msg["Subject"] = "Quote"
    msg["Message-ID"] = "<x@example.com>"
    msg.set_content("please quote")
    for name, data, mime in attachments:
        maintype, subtype = mime.split("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return msg


def test_intake_attachments_are_found_and_others_ignored():
    raw = message(("a.yaml", YAML, "application/yaml"), ("logo.png", b"\x89PNG", "image/png"),
                  ("b.json", b'{"customer": "x"}', "application/json")).as_bytes()
    incoming = read_message(raw, **LIMITS)
    assert [a.name for a in incoming.attachments] == ["a.yaml", "b.json"]
    assert incoming.attachments[0].data == YAML
    assert incoming.ignored == ["logo.png"]


def test_rfc2231_names_are_decoded():
    raw = (b"From: a@example.com\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n"
           b"--B\r\nContent-Type: text/plain\r\n\r\nhi\r\n--B\r\nContent-Type: application/yaml\r\n"
           b"Content-Disposition: attachment;\r\n filename*0*=UTF-8''%E5%A0%B1%E5%83%B9;\r\n"
           b" filename*1=\".yaml\"\r\nContent-Transfer-Encoding: base64\r\n\r\n"
           + base64.encodebytes(YAML) + b"--B--\r\n")
    assert [a.name for a in read_message(raw, **LIMITS).attachments] == ["報價.yaml"]


def test_same_names_do_not_overwrite_each_other():
    raw = message(("a.yaml", YAML, "application/yaml"), ("a.yaml", YAML, "application/yaml")).as_bytes()
    assert [a.name for a in read_message(raw, **LIMITS).attachments] == ["a.yaml", "a-2.yaml"]


def test_damaged_base64_is_refused():
    raw = message(("a.yaml", YAML, "application/yaml")).as_bytes()
    encoded = base64.encodebytes(YAML).strip()
    raw = raw.replace(encoded, encoded[:-3] + b"!*")
    incoming = read_message(raw, **LIMITS)
    assert not incoming.attachments and incoming.refused[0].code == "damaged"


def test_oversized_attachment_is_refused_before_decoding():
    raw = message(("big.yaml", b"x" * 2_000_000, "application/yaml")).as_bytes()
    incoming = read_message(raw, **LIMITS)
    assert incoming.refused[0].code == "too_big" and incoming.refused[0].params["limit_mb"] == "1.0"


def test_too_many_attachments():
    raw = message(*[(f"i{n}.yaml", YAML, "application/yaml") for n in range(5)]).as_bytes()
    incoming = read_message(raw, **LIMITS)
    assert len(incoming.attachments) == 3 and [r.code for r in incoming.refused] == ["too_many"] * 2


def test_broken_multipart_is_reported_as_damaged():
    raw = (b"From: a@example.com\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=NOPE\r\n"
           b"\r\n--OTHER\r\nContent-Type: application/yaml; name=a.yaml\r\n\r\ncustomer: x\r\n--OTHER--\r\n")
    assert read_message(raw, **LIMITS).damaged == "structure"


def test_mime_bomb_is_not_walked():
    raw = (b"From: a@example.com\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n"
           + b"".join(b"--B\r\nContent-Type: text/plain\r\n\r\nx\r\n" for _ in range(500)) + b"--B--\r\n")
    assert read_message(raw, **LIMITS).damaged == "structure"


def test_message_over_the_limit_is_not_parsed():
    raw = message(("a.yaml", YAML, "application/yaml")).as_bytes()
    assert read_message(raw, **{**LIMITS, "max_message_bytes": 100}).damaged == "too_big"


@pytest.mark.parametrize("structure, expected", [
    ((b"text", b"plain", (b"charset", b"utf-8"), None, None, b"7bit", 7, 1, None, None, None, None), False),
    (([(b"text", b"plain", None, None, None, b"7bit", 7, 1, None, None, None, None),
       (b"text", b"html", None, None, None, b"7bit", 7, 1, None, None, None, None)],
      b"alternative", None, None, None, None), False),
    (([(b"text", b"plain", None, None, None, b"7bit", 7, 1, None, None, None, None)],
      b"mixed", None, None, None, None), True),                 # mixed: someone meant to attach
    (([(b"text", b"plain", None, None, None, b"7bit", 7, 1, None, None, None, None),
       (b"application", b"yaml", None, None, None, b"base64", 18, None,
        (b"attachment", (b"filename", b"a.yaml")), None, None)], b"related", None, None, None, None), True),
    ((b"text", b"plain", (b"name", b"a.yaml"), None, None, b"7bit", 7, 1, None, None, None, None), True),
    (None, True),
    ((b"weird",), True),
])
def test_bodystructure_decides_whether_to_download(structure, expected):
    assert might_have_attachment(structure) is expected
