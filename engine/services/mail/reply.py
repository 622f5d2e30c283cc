"""Composing the service's replies: threading and anti-loop headers, an email-safe body, the files."""

from __future__ import annotations

import functools
import mimetypes
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

import jinja2

from engine.paths import LANGUAGES
from engine.services.mail.inbound import Envelope, Refusal

COLOURS = {"quoted": "#1e7b4f", "invalid": "#9a5b00", "failed": "#b42318", "refused": "#b42318"}
TYPES = {".xlsx": ("application", "vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
         ".html": ("text", "html"), ".json": ("application", "json")}


@dataclass
class Outcome:
    """What became of one attachment: quoted, invalid, failed (by the job) or refused (unread)."""

    name: str
    status: str
    job: object = None                 # engine.job.Job when the attachment was quoted
    refusal: Refusal | None = None
    detail: str = ""                   # an internal error's short text


@dataclass(frozen=True)
class Review:
    """Who looks at a request the service could not answer, and within how many hours."""

    reviewer: str
    hours: float

    def sentence(self, t: dict) -> str:
        return t["failed_kept"].format(reviewer=self.reviewer, hours=f"{self.hours:g}")


def quote_reply(envelope: Envelope, outcomes: list[Outcome], *, sender: str, review: Review,
                ignored: list[str] = (), lang: str = "en") -> EmailMessage:
    """One reply covering every attachment of the request, in the language of the intakes that
    were read (the first one's); `lang` when none was."""
    read = [o.job for o in outcomes if o.job is not None and o.status in ("quoted", "invalid")]
    lang = _lang(read[0].language if read else lang)
    t = catalogue(lang)
    sections, files = [], []
    for outcome in outcomes:
        section, attach = _section(outcome, t)
        sections.append(section)
        files.extend(attach)
    statuses = {o.status for o in outcomes}
    if len(outcomes) > 1:
        intro = [t["intro"]["several"].format(count=len(outcomes))]
    else:
        intro = [t["intro"][{"quoted": "quoted", "invalid": "invalid"}.get(outcomes[0].status, "failed")]]
    if ignored:
        intro.append(t["intro"]["no_attachment_ignored"].format(names=", ".join(ignored)))
    if statuses & {"failed", "refused"}:
        intro.append(review.sentence(t))
    return _message(envelope, sender, lang, _view(t, lang, intro, sections,
                                                  figures="quoted" in statuses), files)


def template_reply(envelope: Envelope, *, sender: str, lang: str, template: Path | None,
                   ignored: list[str] = ()) -> EmailMessage:
    """No intake in the mail: a friendly answer with the blank template to fill in."""
    t = catalogue(lang)
    intro = [t["intro"]["no_attachment"]]
    if ignored:
        intro.append(t["intro"]["no_attachment_ignored"].format(names=", ".join(ignored)))
    return _message(envelope, sender, lang, _view(t, lang, intro, []), [template] if template else [])


def refusal_reply(envelope: Envelope, *, sender: str, lang: str) -> EmailMessage:
    """A polite no for senders outside the allowlist: no figures, no files."""
    t = catalogue(lang)
    return _message(envelope, sender, lang, _view(t, lang, [t["intro"]["refusal"]], []), [])


def failure_reply(envelope: Envelope, code: str, params: dict, *, sender: str, lang: str,
                  review: Review) -> EmailMessage:
    """The whole message could not be read (too big, damaged, internal error)."""
    t = catalogue(lang)
    intro = [t["intro"]["failed"], t["message_failures"][code].format(**params), review.sentence(t)]
    return _message(envelope, sender, lang, _view(t, lang, intro, []), [])


def failure_note(envelope: Envelope, reason: str, *, sender: str) -> bytes:
    """The note filed beside a failed request in the Failed folder, saying why."""
    note = EmailMessage()
    note["From"] = sender
    note["To"] = sender
    note["Subject"] = f"[sizing] failed: {envelope.subject or '(no subject)'}"
    note["Date"] = formatdate(localtime=True)
    note["Message-ID"] = make_msgid("sizing-note", domain=sender.rsplit("@", 1)[-1])
    if envelope.message_id:
        note["In-Reply-To"] = envelope.message_id
        note["References"] = envelope.message_id
    note["Auto-Submitted"] = "auto-generated"
    note.set_content(f"The mail service could not process this request.\n\n"
                     f"Request:  {envelope.message_id or envelope.key}\n"
                     f"From:     {envelope.sender or '(no usable sender)'}\n"
                     f"Subject:  {envelope.subject}\n"
                     f"Reason:   {reason}\n")
    return note.as_bytes()


def mail_template_dirs() -> list[Path]:
    """templates/mail/, after the same folder in any SIZING_TEMPLATES override (by file name)."""
    from engine.quote.messages import template_dirs
    return [folder / "mail" for folder in template_dirs()]


@functools.cache
def catalogue(lang: str) -> dict:
    """The mail wording for one language (templates/mail/messages.<lang>.yaml)."""
    from engine.calc.yamlfile import load_yaml_file, plain
    name = f"messages.{_lang(lang)}.yaml"
    path = next((d / name for d in mail_template_dirs() if (d / name).is_file()), None)
    return plain(load_yaml_file(path or mail_template_dirs()[-1] / name))


def _section(outcome: Outcome, t: dict) -> tuple[dict, list[Path]]:
    job = outcome.job
    section = {"name": outcome.name, "colour": COLOURS[outcome.status], "summary": [],
               "figures": [], "warnings": [], "problems": [], "notes": []}
    files: list[Path] = []
    if outcome.status == "quoted":
        quote = job.quote      # the view the attachments were written from: the mail says what they say
        section["heading"] = t["status"]["quoted"]
        section["summary"] = [quote.headline, *quote.verdicts]
        section["figures"] = [(f.label, f.text) for f in quote.key_figures]
        section["warnings"] = list(quote.warnings)
        files = [p for p in job.outputs if p.suffix in (".xlsx", ".html")] or list(job.outputs)
    elif outcome.status == "invalid":
        section["heading"] = t["status"]["invalid"].format(count=len(job.problems))
        section["problems"] = [(p.where, p.message) for p in job.problems]
        files = [p for p in job.outputs if p.suffix == ".xlsx"]
        section["notes"].append(t["errors_attached"].format(file=files[0].name) if files
                                else t["errors_yaml"].format(name=outcome.name))
    elif outcome.status == "failed":
        section["heading"] = t["status"]["failed"]
        section["problems"] = [(p.where, p.message) for p in job.problems] if job else []
        if outcome.detail:
            section["notes"].append(t["message_failures"]["internal"].format(detail=outcome.detail))
    else:
        section["heading"] = t["status"]["refused"]
        section["notes"].append(t["refusals"][outcome.refusal.code].format(**outcome.refusal.params))
    if files:
        section["notes"].append(t["attached"].format(files=", ".join(p.name for p in files)))
    return section, files


def _view(t: dict, lang: str, intro: list[str], sections: list[dict], figures: bool = False) -> dict:
    """What the templates fill in; the note on the figures only where figures are given."""
    return {"lang": lang, "title": t["title"], "greeting": t["greeting"], "intro": intro,
            "sections": sections, "closing": t["closing"], "figures_heading": t["figures_heading"],
            "figures_note": t["figures_note"] if figures else "",
            "warnings_heading": t["warnings_heading"], "problems_heading": t["problems_heading"],
            "cell": t["cell"], "problem": t["problem"]}


def _message(envelope: Envelope, sender: str, lang: str, view: dict, files: list[Path]) -> EmailMessage:
    reply = EmailMessage()
    reply["From"] = sender
    reply["To"] = envelope.sender
    subject = envelope.subject or view["title"]
    reply["Subject"] = subject if subject[:3].lower() == "re:" else f"Re: {subject}"
    reply["Date"] = formatdate(localtime=True)
    reply["Message-ID"] = make_msgid("sizing", domain=sender.rsplit("@", 1)[-1])
    if envelope.message_id:
        reply["In-Reply-To"] = envelope.message_id
    if envelope.references:
        reply["References"] = " ".join(envelope.references)
    reply["Auto-Submitted"] = "auto-replied"          # RFC 3834: other robots must not answer
    reply["X-Auto-Response-Suppress"] = "All"         # Exchange: no out-of-office replies to us
    reply.set_content(_render("reply.txt.j2", view))
    reply.add_alternative(_render("reply.html.j2", view), subtype="html")
    for path in files:
        path = Path(path)
        maintype, subtype = TYPES.get(path.suffix.lower()) or (
            mimetypes.guess_type(path.name)[0] or "application/octet-stream").split("/", 1)
        reply.add_attachment(path.read_bytes(), maintype=maintype, subtype=subtype, filename=path.name)
    reply["Content-Language"] = lang        # last: making the message multipart moves Content-* down
    return reply


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(mail_template_dirs()),
                              autoescape=lambda name: bool(name and name.endswith(".html.j2")),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _render(name: str, view: dict) -> str:
    return _environment().get_template(name).render(**view)


def _lang(lang) -> str:
    return lang if lang in LANGUAGES else "en"
