"""`sizing mail` as a real process: killed mid-way it still answers exactly once; IDLE wakes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from email.message import EmailMessage
from pathlib import Path

pytest_plugins = ["support.mailservers"]      # the dovecot, smtp_sink and mailbox fixtures

ROOT = Path(__file__).resolve().parent.parent
SEED_YAML = (ROOT / "samples" / "seed002-bert-base-8xv100.yaml").read_bytes()
SIZING = Path(sys.executable).with_name("sizing")
COMMAND = [str(SIZING)] if SIZING.exists() else [sys.executable, "-m", "engine"]


def request(msgid: str = "<crash-1@example.com>") -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "alice@example.com"
    msg["To"] = "quotes@example.com"
    msg["Subject"] = "Quote please"
    msg["Message-ID"] = msgid
    msg.set_content("attached")
    msg.add_attachment(SEED_YAML, maintype="application", subtype="yaml", filename="seed.yaml")
    return msg


def sizing_mail(box, *args: str, crash: str | None = None, popen: bool = False, stderr=None,
                **env_changes: str):
    """`sizing mail` on the box's config: run to the end, or started (`popen`), its stderr piped
    or into the open file `stderr` (for a service that talks for long)."""
    env = dict(os.environ)                                  # the mailbox fixture set the password
    env.pop("SIZING_MAIL_CRASH_AFTER_SEND", None)
    if crash:
        env["SIZING_MAIL_CRASH_AFTER_SEND"] = crash
    env.update(env_changes)
    command = [*COMMAND, "mail", "--config", str(box.config_path), *args]
    if popen:
        return subprocess.Popen(command, env=env, cwd=box.dir, stderr=stderr or subprocess.PIPE,
                                text=True)
    return subprocess.run(command, env=env, cwd=box.dir, capture_output=True, text=True, timeout=120)


def wait_until_running(box, service, timeout: float = 60.0) -> None:
    """Until the service's status file says it finished its first pass over the mailbox."""
    from engine.services.log import read_status
    deadline = time.monotonic() + timeout
    while (read_status(box.dir / "mail-status.json") or {}).get("state") != "running":
        assert service.poll() is None, service.stderr.read()
        assert time.monotonic() < deadline, f"not running after {timeout} s"
        time.sleep(0.05)


def test_killed_between_sending_and_filing_it_still_replies_exactly_once(mailbox):
    mailbox.deliver(request())
    crashed = sizing_mail(mailbox, "--once", crash="1")
    assert crashed.returncode == 137, crashed.stderr
    assert len(mailbox.sink.received) == 1                  # the reply went out ...
    assert mailbox.counts() == {"INBOX": 1, "Processed": 0, "Failed": 0}   # ... the mail stayed

    restarted = sizing_mail(mailbox, "--once")
    assert restarted.returncode == 0, restarted.stderr
    assert len(mailbox.sink.received) == 1                  # no second reply
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_killed_before_the_send_was_recorded_it_resends_the_very_same_reply(mailbox):
    # The window between the SMTP server's 250 and our commit: the service resends rather than
    # risk losing the quote, and the resend is byte for byte the same message (same Message-ID),
    # so it is one reply however the recipient's mailbox treats duplicates (docs/mail.md).
    mailbox.deliver(request())
    assert sizing_mail(mailbox, "--once", crash="unrecorded").returncode == 137
    assert sizing_mail(mailbox, "--once").returncode == 0
    first, second = mailbox.sink.wait(2)
    assert first["message"]["Message-ID"] == second["message"]["Message-ID"]
    assert first["raw"] == second["raw"]
    assert mailbox.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}


def test_the_service_is_woken_by_idle_and_keeps_serving(mailbox):
    mailbox.configure(idle=True, poll_seconds=60)          # only IDLE can make it answer quickly
    service = sizing_mail(mailbox, popen=True)
    try:
        # Deliver only once it has logged in and looked at the mailbox (its status file says
        # "running" after the first pass, then it idles): on a loaded machine its start-up alone
        # took longer than a fixed 1.5 s, and the clock below measured the start-up, not IDLE.
        wait_until_running(mailbox, service)
        for n in range(2):
            sent = time.monotonic()
            mailbox.deliver(request(f"<idle-{n}@example.com>"))
            mailbox.sink.wait(n + 1, timeout=20)
            assert time.monotonic() - sent < 10
        assert service.poll() is None                       # still serving
    finally:
        # Sent at once after the last reply: the service files that message, then stops.
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
    assert service.returncode == 0, service.stderr.read()
    assert mailbox.counts() == {"INBOX": 0, "Processed": 2, "Failed": 0}


def test_mail_that_comes_just_before_idle_ends_the_wait_at_once(mailbox):
    # The window the test above can only hit by chance: mail delivered after the service's last
    # search and before it idles. Dovecot announces it as IDLE starts, in the same packet as its
    # "+ idling"; imaplib had read both into its buffer and imapclient's idle_check (it waits on
    # the socket) waited the whole poll interval — 8 s here, each time.
    mailbox.configure(idle=True, poll_seconds=8)
    service = mailbox.service()
    for n in range(3):
        service.poll_once()                                 # searched: nothing new
        mailbox.deliver(request(f"<between-{n}@example.com>"))
        started = time.monotonic()
        service._idle_or_sleep()                            # what `serve` does next
        assert time.monotonic() - started < 4
    assert service.poll_once() == 1                         # and the pass after it finds the mail


def test_a_broken_config_stops_the_service_with_file_and_line(tmp_path):
    bad = tmp_path / "mail.toml"
    bad.write_text((ROOT / "docs" / "mail.example.toml").read_text().replace("poll_seconds", "poll_secs"))
    result = subprocess.run([*COMMAND, "mail", "--config", str(bad)], capture_output=True, text=True,
                            env={**os.environ, "SIZING_IMAP_PASSWORD": "x"}, timeout=60)
    assert result.returncode == 2
    assert f"{bad}:" in result.stderr and "did you mean poll_seconds?" in result.stderr


def test_a_second_service_on_the_same_state_refuses_to_start(mailbox):
    first = sizing_mail(mailbox, popen=True)
    try:
        wait_until_running(mailbox, first)                 # it holds the state: started for sure
        second = sizing_mail(mailbox, "--once")
        assert second.returncode == 2 and "another mail service is running" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(10)
