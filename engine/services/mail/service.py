"""The mail service: watch an IMAP folder, quote each request, reply by SMTP, then file the mail."""

from __future__ import annotations

import email.policy
import imaplib
import logging
import os
import signal
import smtplib
import socket
import sqlite3
import ssl
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from engine.problems import SizingError, report
from engine.services.health import Health, Unavailable, blocked_error, fault_text
from engine.services.log import iso_time
from engine.services.mail.config import MailConfig, ServerConfig, load_config
from engine.services.mail.inbound import (Envelope, Incoming, is_allowed, megabytes,
                                          might_have_attachment, read_envelope, read_message)
from engine.services.mail.oauth import OAuthSignIn, TokenError
from engine.services.mail.reply import (Outcome, Review, failure_note, failure_reply, quote_reply,
                                        refusal_reply, template_reply)
from engine.services.mail.state import Decision, MailState, service_running

log = logging.getLogger(__name__)

CRASH_HOOK = "SIZING_MAIL_CRASH_AFTER_SEND"   # tests only: "1" dies after recording the send,
#                                               "unrecorded" dies between SMTP's 250 and recording
MAX_ATTEMPTS = 3          # tries at deciding one message before it is filed as failed
MAX_SEND_REFUSALS = 5     # permanent SMTP refusals of one reply before giving up on it
HEADER_FETCH = "BODY.PEEK[HEADER]<0.65536>"   # enough to decide; a header flood is cut off
CONNECTION_ERRORS = (imaplib.IMAP4.abort, OSError)
# Faults of the machine around a message: the message is tried again later, uncounted.
NOT_THE_MESSAGE = (*CONNECTION_ERRORS, Unavailable, sqlite3.Error)
NETWORK_ERRORS = (ConnectionError, TimeoutError, socket.gaierror, ssl.SSLError, imaplib.IMAP4.error)
# Between tries while a server is unreachable: short enough that replies follow within seconds
# of its return after an outage of any length, long enough not to hammer it (one login a try).
LONGEST_PAUSE = 10.0
REFUSALS_KEPT = 10        # the last refusals by the SMTP server, in the status
FOLDER_MISSING = ("TRYCREATE", "NONEXISTENT", "doesn't exist", "does not exist", "Mailbox not found")


class FolderMissing(Unavailable):
    """A folder the service works with is not on the IMAP server (renamed or deleted)."""


class SmtpUnavailable(Unavailable):
    """The SMTP server takes no mail now (unreachable, or 4xx/5xx before any recipient):
    stored replies wait, and are sent unchanged once it does."""


def run_service(config_file: Path, once: bool = False) -> int:
    """`sizing mail --config FILE`: serve until interrupted (or one pass with `once`)."""
    logging.getLogger(__name__).setLevel(logging.INFO)   # the service says what it did
    try:
        config = load_config(config_file)
        state = MailState(config.state_file)
    except SizingError as e:
        return report(e)
    state.prune()
    service = MailService(config, state)
    service.write_status("starting")       # at once: what an earlier run left is not shown as now
    service.rules.poll(force_check=True)   # load the rules now, so the first reply is not the slow one
    if service.rules.current is not None:
        from engine.job import warm_up
        try:
            warm_up(service.rules.current)  # and warm: each quote runs in a process forked from here
        except Exception as e:  # noqa: BLE001 — only speed is at stake (a full /tmp, say)
            log.warning("warm-up quote failed (%s: %s)", type(e).__name__, e)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, service.stop)
    try:
        if once:
            service.poll_once()
        else:
            service.serve()
    except _Stopped:
        pass
    except Exception as e:  # noqa: BLE001 — --once: say what went wrong, without a traceback
        print(f"sizing mail: {service.describe(e)[1]}", file=sys.stderr)
        return 1
    finally:
        service.close()
    log.info("stopped")
    return 0


def print_status(config_file: Path) -> int:
    """`sizing mail --config FILE --status`: what the running service last said; exit 1 if none
    runs. Needs no secret: it reads the status file, never the servers."""
    from engine.services.log import read_status
    from engine.services.rulekeeper import describe
    try:
        config = load_config(config_file, secrets=False)
    except SizingError as e:
        return report(e)
    pid = service_running(config.state_file)
    saved = read_status(config.status_file) or {}
    if pid is not None and pid and saved.get("pid") != pid:
        saved = {}                      # an earlier run's words: this one has not spoken yet
    for line in status_lines(saved, config, running=pid is not None):
        print(line)
    for line in describe(saved.get("ruleset") or {}):
        print(f"  {line}")
    if saved.get("updated"):
        print(f"  status of {saved['updated']}")
    return 0 if pid is not None else 1


def status_lines(saved: dict, config: MailConfig, running: bool) -> list[str]:
    """The status file in sentences: the state, what waits and why, what was refused."""
    degraded = saved.get("degraded") or {}
    if not running:
        state = "not running"
    elif not saved:
        state = "starting (no report yet)"
    elif degraded.get("reason"):
        state = f"degraded: {degraded['reason']} (since {degraded['since']}, next try {degraded['next_try']})"
    else:
        state = saved.get("state") or "running"
    lines = [f"sizing mail {saved.get('mailbox') or config.imap.user}: {state}"]
    if not running:
        return lines
    if waiting := saved.get("smtp_waiting_since"):
        lines.append(f"  waiting for the SMTP server since {waiting}")
    if sending := saved.get("sending"):
        lines.append(f"  sending a reply to {sending['to']} since {sending['since']}")
    replies = saved.get("replies") or {}
    lines.append(f"  replies: {replies.get('sent', 0)} sent, {replies.get('sending', 0)} waiting to "
                 f"be sent, {replies.get('silent', 0)} requests needing none")
    for refusal in saved.get("refusals") or []:
        lines.append(f"  refused at {refusal['at']}: {refusal['answer']} ({refusal['what']})")
    return lines


class _Stopped(BaseException):
    """Raised by a stop signal only while the service waits, never in the middle of a message."""


class MailService:
    """One mailbox, one state store. `quote(path, outdir, stem)` is engine.job.run_job by default."""

    def __init__(self, config: MailConfig, state: MailState, *, quote=None, rules_dirs=None):
        from engine.paths import CATALOGS_DIR, RULES_DIR
        from engine.services.log import ServiceLog
        from engine.services.rulekeeper import RuleKeeper
        from engine.services.sandbox import Limits, Sandbox
        self.config, self.state = config, state
        # Same hot reload as the folder service: a broken rule edit keeps the last good set.
        self.rules = RuleKeeper(*(rules_dirs or (RULES_DIR, CATALOGS_DIR)),
                                ServiceLog(None, service="mail"), settle=0.0)
        self.limits = Limits(config.time_limit_seconds, config.memory_limit_mb)
        self.sandbox = Sandbox(self.limits)
        self.quote = quote or self._quote_with_current_rules
        self.review = Review(config.reviewer, config.review_hours)
        self.health = Health(longest=LONGEST_PAUSE)
        self.smtp_waiting_since: float | None = None
        self.sending: dict | None = None           # the reply on its way to the SMTP server now
        self.refusals: deque = deque(maxlen=REFUSALS_KEPT)
        self.imap = None
        self.stopping = self.waiting = False
        self.oauth = OAuthSignIn(config.oauth2) if config.oauth2 else None

    def serve(self) -> None:
        """Poll until stopped; a server that is down is retried with growing pauses, never fatal."""
        while not self.stopping:
            try:
                self.poll_once()
                if self.health.degraded:          # replies wait for SMTP: try again soon
                    pause = min(self.health.pause, self.config.poll_seconds)
                    self.health.next_try = self.health.clock() + pause   # the status says the truth
                    self.write_status()
                    self._wait(lambda: time.sleep(pause))
                else:
                    self._wait(self._idle_or_sleep)
            except Exception as e:  # noqa: BLE001 — the service outlives any server hiccup
                part, text = self.describe(e)
                pause = self.health.failed(part, text)
                log.warning("%s; retrying in %.1f s", text, pause)
                self.write_status()
                self._disconnect()
                self._wait(lambda: time.sleep(pause))

    def write_status(self, state: str | None = None) -> None:
        """The status file: running or degraded (and why), replies waiting, the rule set."""
        from engine.services.log import write_status
        c = self.config
        try:
            write_status(c.status_file, {
                "service": "sizing mail", "pid": os.getpid(),
                "state": state or ("degraded" if self.health.degraded else "running"),
                "updated": iso_time(time.time()), "degraded": self.health.status(),
                "mailbox": f"{c.imap.user}@{c.imap.host}:{c.imap.port}/{c.folder}",
                "replies": self.state.counts(),
                "smtp_waiting_since": iso_time(self.smtp_waiting_since),
                "sending": self.sending, "refusals": list(self.refusals),
                "limits": {"seconds": self.limits.seconds, "memory_mb": self.limits.memory_mb},
                "ruleset": self.rules.status()})
        except (OSError, sqlite3.Error) as e:    # the status is a convenience; the work goes on
            log.warning("cannot write %s: %s", c.status_file, e)

    def describe(self, error: Exception) -> tuple[str, str]:
        """Which part failed ("imap", "smtp", "disk") and what to tell people."""
        imap = self.config.imap
        server = f"the IMAP server {imap.host}:{imap.port}"
        from imapclient.exceptions import LoginError
        if isinstance(error, (SmtpUnavailable, FolderMissing)):
            return ("smtp" if isinstance(error, SmtpUnavailable) else "imap"), str(error)
        if isinstance(error, (TimeoutError, socket.timeout)):
            return "imap", (f"{server} did not answer within {imap.timeout:g} s (timeout_seconds); "
                            "it may be overloaded, or a firewall drops the connection")
        if isinstance(error, TokenError):
            return "imap", f"cannot sign in to {server}: {error}"
        if isinstance(error, LoginError):
            if imap.oauth:
                return "imap", (f"{server} refused the OAuth 2.0 sign-in for {imap.user}, also with "
                                f"a new token ({_text(str(error))[:200]}); {self.oauth.hint()}")
            return "imap", (f"{server} refused the login for {imap.user} (is the password in "
                            f"{imap.password_env} right?)")
        if isinstance(error, imaplib.IMAP4.error) and not isinstance(error, imaplib.IMAP4.abort):
            return "imap", f"{server} refused a command ({_text(str(error))[:200]})"
        if isinstance(error, NETWORK_ERRORS):
            if self.imap is None:
                return "imap", f"cannot reach {server} ({_reason(error)})"
            return "imap", f"the connection to {server} dropped ({_reason(error)})"
        where = (f"the mail state {self.config.state_file}" if isinstance(error, sqlite3.Error)
                 else getattr(error, "filename", None))
        if text := fault_text(error, where):
            return "disk", text
        return "imap", f"checking the mailbox failed ({type(error).__name__}: {error})"

    def stop(self, *_signal) -> None:
        """Finish the message in hand, then stop (a signal handler: SIGTERM, SIGINT)."""
        self.stopping = True
        if self.waiting:
            raise _Stopped()

    def _quote_with_current_rules(self, source: Path, outdir: Path, stem: str):
        """run_job in a worker process, under the time and memory limits."""
        self.rules.poll(force_check=True)      # cheap: compares file sizes and times
        return self.sandbox.run(source, outdir, stem, self.rules.current)

    def poll_once(self) -> int:
        """Handle every message in the folder not already settled; returns how many were looked at.
        If SMTP takes no mail, the pass ends there: stored replies wait for the next one."""
        client = self._connect()
        try:
            uidvalidity = client.select_folder(self.config.folder)[b"UIDVALIDITY"]
        except imaplib.IMAP4.abort:
            raise
        except imaplib.IMAP4.error as e:
            if not _missing_folder(e):
                raise
            raise FolderMissing(f"the watched folder {self.config.folder!r} is not on the IMAP "
                                f"server {self.config.imap.host} (renamed or deleted?); create it "
                                f"again or change [imap] folder") from None
        self.health.recovered("imap")
        tried: set[int] = set()
        try:
            # Search again until nothing is new: mail that arrives while we work is announced in
            # replies to our own commands, and IDLE would not announce it a second time.
            while todo := sorted(set(client.search("NOT DELETED")) - tried - self.state.skip_uids(
                    self.config.folder, uidvalidity)):
                tried.update(todo)
                for start in range(0, len(todo), 50):
                    batch = todo[start:start + 50]
                    meta = self._fetch_meta(client, batch)
                    for uid in batch:
                        if self.stopping:
                            return len(tried)
                        if uid in meta:
                            self._handle(client, uidvalidity, uid, meta[uid])
        except SmtpUnavailable as e:
            if self.smtp_waiting_since is None:
                self.smtp_waiting_since = time.time()
            pause = self.health.failed("smtp", str(e))
            log.warning("%s; replies wait, next try in %.1f s", e, min(pause, self.config.poll_seconds))
        else:
            self.health.recovered("disk")
        finally:
            self.write_status()
        return len(tried)

    def close(self) -> None:
        self.sandbox.close()
        self.write_status("stopped")
        self._disconnect()
        self.state.close()

    def _fetch_meta(self, client, uids: list[int]) -> dict:
        """Size, structure and headers only: bodies are fetched when there may be an intake."""
        try:
            return client.fetch(uids, ["RFC822.SIZE", "BODYSTRUCTURE", HEADER_FETCH])
        except CONNECTION_ERRORS:
            raise
        except Exception as e:  # noqa: BLE001 — one odd structure must not block the batch
            log.warning("fetching %d messages failed (%s); fetching one by one", len(uids), e)
        meta = {}
        for uid in uids:
            try:
                meta.update(client.fetch([uid], ["RFC822.SIZE", "BODYSTRUCTURE", HEADER_FETCH]))
            except CONNECTION_ERRORS:
                raise
            except Exception:  # noqa: BLE001 — without a structure the body is simply read
                meta.update(client.fetch([uid], ["RFC822.SIZE", HEADER_FETCH]))
        return meta

    # -- one message --------------------------------------------------------------------------

    def _handle(self, client, uidvalidity: int, uid: int, meta: dict) -> None:
        folder = self.config.folder
        header = meta.get(b"BODY[HEADER]<0>") or meta.get(b"BODY[HEADER]") or b""
        envelope = read_envelope(header, own_address=self.config.sender)
        counted = False
        try:
            decision = self.state.decision(envelope.key)
            if decision is None:
                counted = True
                if self.state.begin_attempt(folder, uidvalidity, uid) > MAX_ATTEMPTS:
                    self._give_up(envelope, self.state.last_error(folder, uidvalidity, uid))
                else:
                    self._decide(client, uidvalidity, uid, envelope, meta)
                counted = False                            # decided: nothing to take back
                decision = self.state.decision(envelope.key)
                if decision is None:                       # deferred: stays in the inbox
                    return
            self._finish(client, uidvalidity, uid, envelope, decision)
        except NOT_THE_MESSAGE as e:
            # Cut short by the machine: that try does not count towards giving up on the message.
            if counted and (isinstance(e, (*NETWORK_ERRORS, imaplib.IMAP4.abort, Unavailable))
                            or fault_text(e) is not None):
                self._refund(folder, uidvalidity, uid)
            raise
        except Exception as e:  # noqa: BLE001 — one bad message must not stop the others
            log.exception("message %s (%s) could not be handled", uid, envelope.key)
            self.state.note_error(folder, uidvalidity, uid, f"{type(e).__name__}: {e}")

    def _decide(self, client, uidvalidity: int, uid: int, envelope: Envelope, meta: dict) -> None:
        """Choose the reply (or silence) and the folder, and record them before anything is sent."""
        cfg = self.config
        if envelope.auto_reason:
            log.info("no reply to %s from %s: %s", envelope.key, envelope.sender or "?",
                     envelope.auto_reason)
            self.state.plan_silence(envelope.key, cfg.processed_folder,
                                    f"automatic mail: {envelope.auto_reason}")
        elif not is_allowed(envelope.sender, cfg.allow):
            refuse = cfg.outsiders == "refuse" and envelope.sender and not self._rate_limited(
                envelope.sender)
            log.warning("sender %r is not on the allowlist: %s", envelope.sender or "(none)",
                        "refused" if refuse else "ignored")
            if refuse:
                self._plan(envelope, refusal_reply(envelope, sender=cfg.sender, lang=cfg.language),
                           cfg.processed_folder, "outsider: refused")
            else:
                self.state.plan_silence(envelope.key, cfg.processed_folder, "outsider: ignored")
        elif until := self._rate_limited(envelope.sender):
            log.info("%s has had %d replies this hour; %s waits until %s", envelope.sender,
                     cfg.rate_limit_per_hour, envelope.key, time.ctime(until))
            self.state.defer(cfg.folder, uidvalidity, uid, until, "rate limit")
        else:
            reply, folder, reason = self._answer(client, uid, envelope, meta)
            self._plan(envelope, reply, folder, reason)

    def _refund(self, folder: str, uidvalidity: int, uid: int) -> None:
        try:
            self.state.refund_attempt(folder, uidvalidity, uid)
        except sqlite3.Error:
            pass                     # the state itself is at fault: it is said by serve()

    def _give_up(self, envelope: Envelope, error: str) -> None:
        """Tried too often: file it as failed, and tell an allowed sender so if we still can."""
        cfg = self.config
        reason = f"gave up after {MAX_ATTEMPTS} attempts: {error}"
        log.error("%s from %s: %s", envelope.key, envelope.sender or "?", reason)
        if not envelope.auto_reason and is_allowed(envelope.sender, cfg.allow):
            try:
                reply = failure_reply(envelope, "internal", {"detail": error.split(":")[0]},
                                      sender=cfg.sender, lang=cfg.language, review=self.review)
                self._plan(envelope, reply, cfg.failed_folder, reason)
                return
            except Exception:  # noqa: BLE001 — then it is filed without a reply
                log.exception("could not even compose the failure reply")
        self.state.plan_silence(envelope.key, cfg.failed_folder, reason)

    def _answer(self, client, uid: int, envelope: Envelope, meta: dict):
        """The reply to an allowed sender: quotes, problems, a template, or why it failed."""
        cfg = self.config
        size = int(meta.get(b"RFC822.SIZE") or 0)
        if size > cfg.max_message_bytes:             # refused by size before a byte of body is read
            params = {"mb": megabytes(size), "limit_mb": megabytes(cfg.max_message_bytes)}
            return (failure_reply(envelope, "too_big", params, sender=cfg.sender, lang=cfg.language,
                                  review=self.review),
                    cfg.failed_folder, f"message too big ({params['mb']} MB)")
        if not might_have_attachment(meta.get(b"BODYSTRUCTURE")):
            return self._template(envelope, []), cfg.processed_folder, "no attachment"
        raw = (client.fetch([uid], ["BODY.PEEK[]"]).get(uid) or {}).get(b"BODY[]")
        if not isinstance(raw, bytes):
            # a fetch cut short answers without the body: the connection failed, not the message
            raise imaplib.IMAP4.abort(f"the body of message {uid} did not arrive")
        incoming = read_message(raw, max_message_bytes=cfg.max_message_bytes,
                                max_attachment_bytes=cfg.max_attachment_bytes,
                                max_attachments=cfg.max_attachments, own_address=cfg.sender)
        if incoming.damaged:
            params = {"mb": megabytes(len(raw)), "limit_mb": megabytes(cfg.max_message_bytes)}
            return (failure_reply(envelope, incoming.damaged, params, sender=cfg.sender,
                                  lang=cfg.language, review=self.review),
                    cfg.failed_folder, f"message unreadable ({incoming.damaged})")
        if not incoming.attachments and not incoming.refused:
            return self._template(envelope, incoming.ignored), cfg.processed_folder, "no intake attached"
        # The reply carries the quote files, so it is composed before their folder goes away.
        with tempfile.TemporaryDirectory(prefix="sizing-mail-", dir=cfg.work_dir) as tmp:
            outcomes = self._quote_all(incoming, Path(tmp))
            reply = quote_reply(envelope, outcomes, sender=cfg.sender, review=self.review,
                                ignored=incoming.ignored, lang=cfg.language)
        bad = [f"{o.name}: {_why(o)}" for o in outcomes if o.status in ("failed", "refused")]
        return (reply, cfg.failed_folder if bad else cfg.processed_folder,
                "; ".join(bad) or ", ".join(f"{o.name}: {o.status}" for o in outcomes))

    def _quote_all(self, incoming: Incoming, tmp: Path) -> list[Outcome]:
        """Each attachment saved under its sanitised name in a private folder, then quoted."""
        outcomes = []
        for n, attachment in enumerate(incoming.attachments):
            folder = tmp / str(n)                          # one folder each: equal stems cannot clash
            (folder / "out").mkdir(parents=True)
            source = folder / attachment.name
            source.write_bytes(attachment.data)
            try:
                job = self.quote(source, folder / "out", source.stem)
            except Exception as e:  # noqa: BLE001 — reported in the reply, filed as failed
                if fault_text(e) is not None:
                    raise                 # a full disk is not the attachment's fault: try later
                log.exception("quoting %s failed", attachment.name)
                outcomes.append(Outcome(attachment.name, "failed", detail=type(e).__name__))
                continue
            if job.status == "blocked":
                raise blocked_error(job)
            outcomes.append(Outcome(attachment.name, job.status if job.status in
                                    ("quoted", "invalid") else "failed", job))
        return outcomes + [Outcome(r.name, "refused", refusal=r) for r in incoming.refused]

    def _template(self, envelope: Envelope, ignored: list[str]):
        lang = self.config.language
        with tempfile.TemporaryDirectory(prefix="sizing-template-") as tmp:
            path = Path(tmp) / ("intake.xlsx" if lang == "en" else f"intake.{lang}.xlsx")
            try:
                from engine.intake.template import write_template
                write_template(path, lang)
            except Exception as e:  # noqa: BLE001 — the friendly reply goes out even without it
                log.warning("could not attach the blank template (%s: %s)", type(e).__name__, e)
                path = None
            return template_reply(envelope, sender=self.config.sender, lang=lang, template=path,
                                  ignored=ignored)

    def _plan(self, envelope: Envelope, reply, folder: str, reason: str) -> None:
        data = reply.as_bytes(policy=email.policy.SMTP)
        self.state.plan_reply(envelope.key, envelope.sender, reply["Message-ID"], data, folder, reason)

    def _rate_limited(self, sender: str) -> float | None:
        """When the sender may have the next reply, if they have had their hourly share."""
        count, oldest = self.state.replies_within(sender, 3600)
        return oldest + 3600 if count >= self.config.rate_limit_per_hour else None

    # -- sending and filing: each step recorded before the next, so a restart resumes --------

    def _finish(self, client, uidvalidity: int, uid: int, envelope: Envelope, decision: Decision) -> None:
        if decision.status == "sending":
            decision = self._send(decision)
            if decision is None:                          # not accepted: stays, tried next poll
                return
        if decision.folder == self.config.failed_folder and not decision.noted:
            note = failure_note(envelope, decision.reason or "", sender=self.config.sender)
            self._into_folder(client, decision.folder, lambda: client.append(decision.folder, note))
            self.state.mark_noted(decision.key)
        self._into_folder(client, decision.folder, lambda: self._move(client, uid, decision.folder))
        self.state.mark_done(self.config.folder, uidvalidity, uid, decision.reason or "")
        log.info("%s from %s → %s (%s)", envelope.key, envelope.sender or "?", decision.folder,
                 decision.reason)

    def _send(self, decision: Decision) -> Decision | None:
        """Send the recorded reply (the same bytes and Message-ID on every try). None if it
        waits for a later pass; raises SmtpUnavailable when the server takes no mail at all."""
        smtp_server = f"the SMTP server {self.config.smtp.host}:{self.config.smtp.port}"
        self.sending = {"to": decision.recipient, "since": iso_time(time.time())}
        self.write_status()                   # a server that says nothing is seen waiting here
        try:
            with self._smtp() as smtp:
                smtp.sendmail(self.config.sender, [decision.recipient], decision.reply)
        except smtplib.SMTPRecipientsRefused as e:
            # About this recipient only: the other replies go on.
            code, message = next(iter(e.recipients.values()))
            self._refusal(f"{code} {_text(message)}", f"reply to {decision.recipient}")
            if code < 500:                         # a later pass tries again; the others go on
                self.health.failed("smtp", f"{smtp_server} defers replies to {decision.recipient} "
                                           f"({code} {_text(message)})")
                log.warning("%s deferred the reply to %s: %s %s", smtp_server, decision.recipient,
                            code, _text(message))
                return None
            return self._refused(decision, f"{code} {_text(message)}")
        except smtplib.SMTPDataError as e:
            self._refusal(f"{e.smtp_code} {_text(e.smtp_error)}", f"reply to {decision.recipient}")
            if e.smtp_code >= 500:                 # this message, after DATA: too big, say
                return self._refused(decision, f"{e.smtp_code} {_text(e.smtp_error)}")
            raise SmtpUnavailable(f"{smtp_server} defers mail ({e.smtp_code} "
                                  f"{_text(e.smtp_error)})") from None
        except smtplib.SMTPResponseException as e:
            # Refused before any recipient (greeting, login, MAIL FROM): the server, not the reply.
            self._refusal(f"{e.smtp_code} {_text(e.smtp_error)}", "all mail")
            raise SmtpUnavailable(f"{smtp_server} takes no mail now ({e.smtp_code} "
                                  f"{_text(e.smtp_error)})") from None
        except (OSError, smtplib.SMTPException) as e:
            # Down, silent, or it broke mid-transaction: try again later with the very same message.
            if isinstance(e, TimeoutError) or "timed out" in str(e):   # smtplib re-words timeouts
                raise SmtpUnavailable(f"{smtp_server} did not answer within "
                                      f"{self.config.smtp.timeout:g} s (timeout_seconds)") from None
            raise SmtpUnavailable(f"cannot reach {smtp_server} ({_reason(e)})") from None
        finally:
            self.sending = None
        self.health.recovered("smtp")
        self.smtp_waiting_since = None
        if os.environ.get(CRASH_HOOK) == "unrecorded":
            os._exit(137)
        self.state.mark_sent(decision.key)
        if os.environ.get(CRASH_HOOK) == "1":
            os._exit(137)
        return self.state.decision(decision.key)

    def _refusal(self, answer: str, what: str) -> None:
        """Keep the server's refusal for the status: a 550 that is retried must still be seen."""
        self.refusals.append({"at": iso_time(time.time()), "answer": answer[:200], "what": what})

    def _refused(self, decision: Decision, answer: str) -> Decision | None:
        """A permanent refusal of this reply: tried again on later passes, then given up, the
        request filed in the failed folder with the server's answer."""
        reason = f"reply refused by the SMTP server: {answer}"
        if self.state.send_failed(decision.key, reason) < MAX_SEND_REFUSALS:
            log.warning("%s (to %s); will retry", reason, decision.recipient)
            return None
        self.state.give_up(decision.key, self.config.failed_folder, reason)
        return self.state.decision(decision.key)

    def _into_folder(self, client, folder: str, action) -> None:
        """Do `action` (a move or an append into `folder`); a folder deleted while the service
        ran is made again first, and the action done once more."""
        try:
            action()
        except imaplib.IMAP4.abort:
            raise
        except imaplib.IMAP4.error as e:
            if not _missing_folder(e):
                raise
            log.warning("the folder %r was gone from the IMAP server; making it again", folder)
            if not client.folder_exists(folder):
                client.create_folder(folder)
            action()

    def _move(self, client, uid: int, folder: str) -> None:
        if client.has_capability("MOVE"):
            client.move([uid], folder)
            return
        client.copy([uid], folder)                        # copy first: never lose the original
        client.delete_messages([uid])
        if client.has_capability("UIDPLUS"):
            client.uid_expunge([uid])
        else:
            client.expunge()

    # -- connections --------------------------------------------------------------------------

    def _connect(self):
        if self.imap is not None:
            return self.imap
        from imapclient import IMAPClient
        c = self.config.imap
        context = _tls_context(c)
        client = IMAPClient(c.host, port=c.port, ssl=c.security == "tls", ssl_context=context,
                            timeout=c.timeout)
        try:
            if c.security == "starttls":
                client.starttls(context)
            if c.oauth:
                self.oauth.imap(client, c.user)
            else:
                client.login(c.user, c.password())
            for folder in (self.config.processed_folder, self.config.failed_folder):
                if not client.folder_exists(folder):
                    client.create_folder(folder)
        except BaseException:
            client.shutdown()                 # a refused login must not leave the socket open
            raise
        self.imap = client
        return client

    def _disconnect(self) -> None:
        if self.imap is not None:
            try:
                self.imap.logout()
            except Exception:  # noqa: BLE001 — it is going away either way
                pass
            self.imap = None

    def _wait(self, how) -> None:
        """The only place a stop signal may interrupt."""
        self.waiting = True
        try:
            if not self.stopping:
                how()
        finally:
            self.waiting = False

    def _idle_or_sleep(self) -> None:
        """Sleep until the next poll; with IDLE, new mail ends the wait at once."""
        client = self.imap
        if self.config.idle and client is not None and client.has_capability("IDLE"):
            client.idle()
            try:
                if not _already_read(client):
                    client.idle_check(timeout=self.config.poll_seconds)
            finally:
                client.idle_done()
        else:
            time.sleep(self.config.poll_seconds)

    def _smtp(self) -> smtplib.SMTP:
        c = self.config.smtp
        context = _tls_context(c)
        if c.security == "tls":
            smtp = smtplib.SMTP_SSL(c.host, c.port, timeout=c.timeout, context=context)
        else:
            smtp = smtplib.SMTP(c.host, c.port, timeout=c.timeout)
        try:
            if c.security == "starttls":
                smtp.starttls(context=context)
            if c.oauth:
                try:
                    self.oauth.smtp(smtp, c.user)
                except TokenError as e:
                    raise SmtpUnavailable(f"cannot sign in to the SMTP server {c.host}:{c.port}: "
                                          f"{e}") from None
                except smtplib.SMTPAuthenticationError as e:
                    self._refusal(f"{e.smtp_code} {_text(e.smtp_error)}", f"sign-in as {c.user}")
                    raise SmtpUnavailable(
                        f"the SMTP server {c.host}:{c.port} refused the OAuth 2.0 sign-in for "
                        f"{c.user}, also with a new token ({e.smtp_code} {_text(e.smtp_error)}); "
                        f"{self.oauth.hint()}") from None
            elif c.user:
                smtp.login(c.user, c.password())
        except BaseException:
            smtp.close()
            raise
        return smtp


def _why(outcome: Outcome) -> str:
    """Why an attachment was not quoted, for the note filed beside the request."""
    if outcome.refusal is not None:
        params = ", ".join(f"{k} {v}" for k, v in outcome.refusal.params.items())
        return f"not read ({outcome.refusal.code.replace('_', ' ')}{f': {params}' if params else ''})"
    problems = getattr(outcome.job, "problems", None) or []
    if problems:
        return f"could not be quoted: {problems[0].where}: {problems[0].message}"
    return f"could not be quoted: internal error ({outcome.detail or 'no detail'})"


def _missing_folder(error: Exception) -> bool:
    return any(word.lower() in str(error).lower() for word in FOLDER_MISSING)


def _text(answer) -> str:
    return answer.decode("utf-8", "replace") if isinstance(answer, bytes) else str(answer)


def _reason(error: Exception) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _tls_context(server: ServerConfig) -> ssl.SSLContext | None:
    if server.security == "none":
        return None
    return ssl.create_default_context(cafile=server.ca_file or None)


def _already_read(client) -> bool:
    """Whether the connection holds server lines it has read but not yet handed over.

    Mail that came after the last search is announced as IDLE starts, often in the same packet as
    the server's "+ idling"; imaplib then reads both into its buffer, where imapclient's
    `idle_check` never looks (it waits on the socket) — the new mail would wait a whole poll
    interval. So the buffer is looked at first, without waiting."""
    sock = client.socket()
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        return bool(client._imap.file.peek(1))     # buffered bytes, or one read that does not wait
    except OSError:                                # nothing there (TLS says so with an error)
        return False
    finally:
        sock.settimeout(timeout)
