"""Reading an incoming mail safely: who sent it, is it automatic, and which attachments are intakes."""

from __future__ import annotations

import base64
import binascii
import email
import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from email import policy
from email.header import decode_header
from email.utils import getaddresses

from engine.files import HASH_CHARS

# .xls is passed on too: the workbook reader explains old and password-protected files.
INTAKE_SUFFIXES = (".xlsx", ".xlsm", ".xls", ".yaml", ".yml", ".json")
XLSX_TYPES = ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",)
MAX_PARTS = 200                                  # a message with more parts is refused, not walked
MAX_NAME = 100                                   # characters kept of an attachment's name
ROBOT_LOCALPARTS = ("mailer-daemon", "postmaster", "noreply", "no-reply", "do-not-reply",
                    "donotreply")
ADDRESS = re.compile(r"[^@\s<>()\[\]\\,;:\"]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
SOURCE_ROUTE = re.compile(r"<\s*@[^<>]*:")      # <@relay:user@domain>: the route is dropped by parsers
ROUTING_CHARACTERS = "%!"                        # user%host@relay, host!user@relay: relayed onwards
BOUNDARY_DEFECTS = ("NoBoundaryInMultipartDefect", "StartBoundaryNotFoundDefect",
                    "MultipartInvariantViolationDefect")


@dataclass
class Envelope:
    """The headers that decide what to do with a message, decoded and bounded."""

    key: str                   # the Message-ID, or a hash of the headers when there is none
    message_id: str
    sender: str                # the one From address, lower-case; "" when there is not exactly one
    subject: str
    references: list[str]
    auto_reason: str | None    # why this is machine mail we must not answer


@dataclass
class Attachment:
    name: str                  # sanitised: safe as a file name and in a reply
    data: bytes


@dataclass
class Refusal:
    """An attachment we did not quote: `code` picks the wording in the reply's language."""

    name: str
    code: str                  # too_big | damaged | too_many
    params: dict = field(default_factory=dict)


@dataclass
class Incoming:
    envelope: Envelope
    attachments: list[Attachment] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)     # other files (logos, PDFs ...)
    damaged: str | None = None                             # the MIME structure could not be read


def read_envelope(header_bytes: bytes, own_address: str = "") -> Envelope:
    """Decide from the header block alone (no body is needed, so none is downloaded)."""
    msg = email.message_from_bytes(header_bytes, policy=policy.compat32)
    message_id = _message_ids(msg.get("Message-ID", ""))
    key = message_id[0] if message_id else "sha256:" + hashlib.sha256(header_bytes).hexdigest()
    refs = (_message_ids(msg.get("References", "")) or _message_ids(msg.get("In-Reply-To", "")))
    sender = _single_address(msg.get_all("From", []))
    return Envelope(key=key, message_id=message_id[0] if message_id else "", sender=sender,
                    subject=_clean(decode_text(msg.get("Subject", "")), 200),
                    references=(refs + message_id)[-10:],
                    auto_reason=automatic_reason(msg, sender, own_address))


def automatic_reason(msg, sender: str, own_address: str = "") -> str | None:
    """Why this mail was sent by a machine (RFC 3834 and common practice), or None."""
    auto = decode_text(msg.get("Auto-Submitted", "")).strip().lower()
    if auto and auto != "no":
        return f"Auto-Submitted: {auto[:40]}"
    precedence = decode_text(msg.get("Precedence", "")).strip().lower()
    if precedence in ("bulk", "junk", "list", "auto_reply"):
        return f"Precedence: {precedence}"
    for name in ("List-Id", "List-Unsubscribe", "List-Post"):
        if msg.get(name) is not None:
            return f"mailing list ({name})"
    for name in ("X-Autoreply", "X-Autorespond", "X-Auto-Response"):
        if msg.get(name) is not None:
            return f"auto-responder ({name})"
    return_path = msg.get("Return-Path")
    if return_path is not None and return_path.strip() in ("<>", ""):
        return "bounce (empty Return-Path)"
    if msg.get_content_type() == "multipart/report":
        return "delivery report"
    if not sender:
        return None
    if sender.split("@")[0] in ROBOT_LOCALPARTS:
        return f"sent by {sender.split('@')[0]}"
    if own_address and (sender == own_address.lower() or
                        own_address.lower() in decode_text(msg.get("X-Loop", "")).lower()):
        return "our own mail (loop)"
    return None


def is_allowed(address: str, allow: tuple[str, ...]) -> bool:
    """An address is allowed when listed itself, or its domain is (`*.example.com` for subdomains)."""
    if not address or "@" not in address:
        return False
    local, domain = address.rsplit("@", 1)
    if any(c in local for c in ROUTING_CHARACTERS):
        return False             # a relay of an allowed domain could pass the reply on elsewhere
    for entry in allow:
        if "@" in entry:
            if address == entry:
                return True
        elif entry.startswith("*."):
            if domain.endswith(entry[1:]):
                return True
        elif domain == entry:
            return True
    return False


def might_have_attachment(bodystructure) -> bool:
    """From IMAP BODYSTRUCTURE: False only when every part is a plain text or HTML body.

    Conservative: anything unusual says True, and the message is then downloaded and read.
    multipart/mixed always says True: it is what a mail client sends when something was
    attached, so a damaged one is read to say what went wrong.
    """
    try:
        if isinstance(bodystructure[0], (list, tuple)) and _bytes(bodystructure[1]).lower() == b"mixed":
            return True
        return _structure_has_attachment(bodystructure, 0)
    except Exception:  # noqa: BLE001 — a server's odd structure just means "look inside"
        return True


def _structure_has_attachment(node, depth: int) -> bool:
    if depth > 20 or not isinstance(node, (list, tuple)) or not node:
        return True
    if isinstance(node[0], (list, tuple)):                 # multipart: (parts..., subtype, ...)
        parts = node[0] if isinstance(node[0][0], (list, tuple)) else [p for p in node
                                                                      if isinstance(p, (list, tuple))]
        return any(_structure_has_attachment(p, depth + 1) for p in parts)
    kind = (_bytes(node[0]) + b"/" + _bytes(node[1])).lower()
    if kind not in (b"text/plain", b"text/html"):
        return True
    tokens = {t.lower() for t in _flatten(node[2:])}
    return bool(tokens & {b"attachment", b"name", b"filename", b"name*", b"filename*"})


def read_message(raw: bytes, *, max_message_bytes: int, max_attachment_bytes: int,
                 max_attachments: int, own_address: str = "") -> Incoming:
    """Parse a whole message and pick out its intake attachments, refusing what is unsafe."""
    head, _, _ = raw.partition(b"\r\n\r\n") if b"\r\n\r\n" in raw else raw.partition(b"\n\n")
    incoming = Incoming(read_envelope(head + b"\r\n\r\n", own_address))
    if len(raw) > max_message_bytes:          # the caller checks RFC822.SIZE first; this is a backstop
        incoming.damaged = "too_big"
        return incoming
    msg = email.message_from_bytes(raw, policy=policy.compat32)
    try:
        parts = _leaf_parts(msg)
    except (RecursionError, ValueError):
        incoming.damaged = "structure"
        return incoming
    names: set[str] = set()
    for part in parts:
        name = attachment_name(part)
        if name is None:
            continue
        name = _unique(name, names)
        suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
        if suffix not in INTAKE_SUFFIXES:
            incoming.ignored.append(name)
            continue
        if len(incoming.attachments) >= max_attachments:
            incoming.refused.append(Refusal(name, "too_many", {"limit": max_attachments}))
            continue
        data, problem = _decode(part, max_attachment_bytes)
        if problem:
            incoming.refused.append(Refusal(name, problem[0], problem[1]))
        else:
            incoming.attachments.append(Attachment(name, data))
    defects = {type(d).__name__ for p in [msg, *parts] for d in getattr(p, "defects", [])}
    if not incoming.attachments and not incoming.refused and defects & set(BOUNDARY_DEFECTS):
        incoming.damaged = "structure"
    return incoming


def megabytes(size: int) -> str:
    """A size for a sentence: "25", "1.5", "0.05"."""
    mb = size / 1e6
    return f"{mb:.0f}" if mb >= 10 else f"{mb:.1f}" if mb >= 1 else f"{mb:.2g}"


def attachment_name(part) -> str | None:
    """The sanitised file name of a part, or None when the part is a body, not a file."""
    name = None
    try:
        name = part.get_filename() or part.get_param("name")
    except Exception:  # noqa: BLE001 — a broken parameter is treated as "no name"
        pass
    if isinstance(name, tuple):                            # an RFC 2231 value left undecoded
        name = email.utils.collapse_rfc2231_value(name)
    if not name:
        if part.get_content_type() in XLSX_TYPES:
            return "attachment.xlsx"
        return None
    name = str(name)
    if part.get_content_type() in XLSX_TYPES and not name.lower().endswith((".xlsx", ".xlsm")):
        name += ".xlsx"
    return safe_filename(name)


def safe_filename(name: str) -> str:
    """A name safe to save and to show: encoded words decoded, no path, no control characters, short."""
    if "=?" in name:
        name = decode_text(name)
    name = unicodedata.normalize("NFC", name.replace("\\", "/").split("/")[-1])
    # Category C covers control characters and bidi overrides ("invoice\u202excod.exe" tricks).
    name = "".join("_" if unicodedata.category(c)[0] == "C" else c for c in name)
    name = "".join(c if c.isalnum() or c in " ._-()[]+,@" else "_" for c in name)
    name = re.sub(r"_{2,}", "_", re.sub(r"\s+", " ", name)).strip(" ._")
    stem, dot, ext = name.rpartition(".")
    if not dot or not re.fullmatch(r"[A-Za-z0-9]{1,10}", ext):
        stem, ext = name, ""
    stem = stem.strip(" ._")
    room = MAX_NAME - len(ext) - 1
    if len(stem) > room or len(stem.encode()) > 3 * room // 2:
        # cut, and ended with a short hash of the whole name: two long names alike up to the
        # cut still get two names (and two sets of outputs in the reply), as in the other channels
        digest = "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
        while len(stem) + len(digest) > room or len((stem + digest).encode()) > 3 * room // 2:
            stem = stem[:-1]
        stem = stem.rstrip(" ._") + digest
    if not stem or stem.upper().split(".")[0] in ("CON", "PRN", "AUX", "NUL", *(
            f"{d}{n}" for d in ("COM", "LPT") for n in range(10))):
        stem = "attachment" + ("-" + stem if stem else "")
    return f"{stem.rstrip(' .')}.{ext}" if ext else stem


def decode_text(value) -> str:
    """A header value as text: RFC 2047 words decoded, unknown bytes replaced, never raising."""
    if value is None:
        return ""
    try:
        chunks = decode_header(value if isinstance(value, str) else str(value))
    except Exception:  # noqa: BLE001 — undecodable headers are shown as they came
        return str(value)
    out = []
    for chunk, charset in chunks:
        if isinstance(chunk, str):
            out.append(chunk)
            continue
        for candidate in (charset if charset and charset != "unknown-8bit" else None, "utf-8", "latin-1"):
            if not candidate:
                continue
            try:
                out.append(chunk.decode(candidate))
                break
            except (LookupError, UnicodeDecodeError):
                continue
    text = "".join(out)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _leaf_parts(msg) -> list:
    parts, stack = [], [msg]
    while stack:
        part = stack.pop()
        if len(parts) + len(stack) > MAX_PARTS:
            raise ValueError("too many parts")
        payload = part.get_payload()
        if part.is_multipart() and isinstance(payload, list):
            stack.extend(reversed(payload))
        else:
            parts.append(part)
    return parts


def _decode(part, limit: int) -> tuple[bytes, tuple[str, dict] | None]:
    """Decoded bytes, refusing by size before decoding and refusing damaged base64 outright."""
    encoding = str(part.get("Content-Transfer-Encoding", "")).strip().lower()
    payload = part.get_payload()
    if not isinstance(payload, str):
        return b"", ("damaged", {})
    estimate = len(payload) * 3 // 4 if encoding == "base64" else len(payload)
    if estimate > limit:
        return b"", ("too_big", {"mb": megabytes(estimate), "limit_mb": megabytes(limit)})
    if encoding == "base64":
        try:
            return base64.b64decode("".join(payload.split()).encode("ascii"), validate=True), None
        except (binascii.Error, UnicodeEncodeError, ValueError):
            return b"", ("damaged", {})
    data = part.get_payload(decode=True)
    return (data, None) if isinstance(data, bytes) else (b"", ("damaged", {}))


def _message_ids(value) -> list[str]:
    return re.findall(r"<[^<>\s]{1,500}>", decode_text(value))


def _single_address(values: list) -> str:
    """The From address when there is exactly one well-formed address, else ""."""
    texts = [decode_text(v) for v in values]
    if any(SOURCE_ROUTE.search(t) for t in texts):
        return ""                # a source route names where the mail would really go
    try:
        pairs = getaddresses(texts)
    except Exception:  # noqa: BLE001 — an unparseable From is treated as "no sender"
        return ""
    addresses = [a for _, a in pairs if a]
    if len(addresses) != 1 or not ADDRESS.fullmatch(addresses[0]):
        return ""
    return addresses[0].lower()


def _unique(name: str, taken: set[str]) -> str:
    stem, dot, ext = name.rpartition(".")
    stem, ext = (stem, "." + ext) if dot else (name, "")
    candidate, n = name, 1
    while candidate.lower() in taken:
        n += 1
        candidate = f"{stem}-{n}{ext}"
    taken.add(candidate.lower())
    return candidate


def _clean(text: str, limit: int) -> str:
    text = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in text)
    return re.sub(r"\s+", " ", text).strip()[:limit]


def _bytes(value) -> bytes:
    return value if isinstance(value, bytes) else str(value or "").encode()


def _flatten(node) -> list[bytes]:
    out, stack = [], [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (bytes, str)):
            out.append(_bytes(item))
    return out
