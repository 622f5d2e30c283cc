"""Real mail servers on loopback for tests and the bench: a private Dovecot (IMAP) and aiosmtpd (SMTP)."""

from __future__ import annotations

import atexit
import email
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from email import policy
from pathlib import Path

HERE = Path(__file__).resolve().parent
PASSWORD = "secret"
USERS = 500
_users = itertools.count(1)


def dovecot_binary() -> str | None:
    return shutil.which("dovecot") or (
        "/usr/sbin/dovecot" if os.path.exists("/usr/sbin/dovecot") else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class Dovecot:
    """A private Dovecot instance in a temporary folder (see tests/support/dovecot.conf)."""

    def __init__(self):
        binary = dovecot_binary()
        if not binary:
            raise RuntimeError("dovecot is not installed")
        # mkdtemp, not pytest's tmp_path: Dovecot's own users must be able to enter the folder.
        self.root = Path(tempfile.mkdtemp(prefix="sizing-dovecot-"))
        self.port = free_port()
        self.users_file = self.root / "users"
        conf = (HERE / "dovecot.conf").read_text()
        conf = conf.replace("@ROOT@", str(self.root)).replace("@PORT@", str(self.port))
        (self.root / "dovecot.conf").write_text(conf)
        # Accounts are made up front: Dovecot re-reads a changed passwd-file only when its
        # mtime moves on by a whole second, so accounts added during the tests may be refused.
        self.users_file.write_text("".join(f"{user}:{{PLAIN}}{PASSWORD}\n"
                                           for user in ["quotes", *(f"u{n}" for n in range(1, USERS + 1))]))
        for sub in ("run", "state", "mail"):
            (self.root / sub).mkdir()
        subprocess.run(["chown", "-R", "dovecot:", str(self.root / "mail"), str(self.root / "state")],
                       check=True)
        os.chmod(self.root, 0o755)
        self.log = open(self.root / "stdout.log", "wb")
        self.binary = binary
        self.resume()

    def resume(self) -> None:
        """Start the server (again, after `halt`), on the same port with the same mailboxes."""
        self.process = subprocess.Popen([self.binary, "-c", str(self.root / "dovecot.conf"), "-F"],
                                        stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.stop()
            raise

    def halt(self) -> None:
        """Stop the server as an outage would, keeping every mailbox for `resume`: the whole
        process group, so the IMAP processes serving open connections go too."""
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(10)
        deadline = time.monotonic() + 10         # its helper processes let go of the port
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                return
            time.sleep(0.05)

    def new_user(self) -> str:
        """A fresh IMAP account, so every test starts with an empty mailbox."""
        n = next(_users)
        if n > USERS:
            raise RuntimeError(f"more than {USERS} test accounts asked for; raise USERS")
        return f"u{n}"

    def client(self, user: str):
        from imapclient import IMAPClient
        c = IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=10)
        c.login(user, PASSWORD)
        return c

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


_dovecot: Dovecot | None = None


def shared_dovecot() -> Dovecot:
    """One Dovecot per test process, however many test modules ask for it."""
    global _dovecot
    if _dovecot is None:
        _dovecot = Dovecot()
        atexit.register(_dovecot.stop)
    return _dovecot


class SmtpSink:
    """aiosmtpd on loopback keeping every accepted message (envelope and parsed message).

    It can be made to refuse, as real servers do for a while: `refuse_mail` answers MAIL FROM
    (e.g. "421 4.3.2 try again later": the server takes nothing), `refuse_rcpt` answers RCPT TO
    per address (e.g. {"bob@example.com": "550 5.1.1 no such user"}); `refusals` counts them.
    """

    def __init__(self):
        from aiosmtpd.controller import Controller
        self.received: list[dict] = []
        self.refuse_mail: str | None = None
        self.refuse_rcpt: dict[str, str] = {}
        self.refusals = 0
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if self.refuse_mail:
            self.refusals += 1
            return self.refuse_mail
        envelope.mail_from = address
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if answer := self.refuse_rcpt.get(address.lower()):
            self.refusals += 1
            return answer
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.content, policy=policy.default)
        with self._arrived:
            self.received.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                                  "message": message, "raw": envelope.content,
                                  "at": time.time()})
            self._arrived.notify_all()
        return "250 OK"

    def messages(self) -> list:
        with self._lock:
            return [r["message"] for r in self.received]

    def wait(self, count: int, timeout: float = 30.0) -> list[dict]:
        """Block until `count` messages arrived; returns them all."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.received)} of {count} messages arrived")
                self._arrived.wait(left)
            return list(self.received)

    def stop(self) -> None:
        self.controller.stop()


def folder_messages(client, folder: str) -> list[email.message.EmailMessage]:
    """Every message in an IMAP folder, parsed."""
    client.select_folder(folder, readonly=True)
    uids = client.search("ALL")
    if not uids:
        return []
    data = client.fetch(uids, ["BODY.PEEK[]"])
    # a message the service moves away between SEARCH and FETCH comes back without a body
    bodies = [(data.get(u) or {}).get(b"BODY[]") for u in uids]
    return [email.message_from_bytes(b, policy=policy.default) for b in bodies if isinstance(b, bytes)]


def write_config(path: Path, *, imap_port: int, user: str, smtp_port: int, state: Path,
                 policy: dict | None = None, idle: bool = False, folder: str = "INBOX") -> Path:
    """A mail-service TOML config pointing at the test servers (password via environment)."""
    settings = {"allow": ["example.com", "someone@partner.com"], "poll_seconds": 5,
                **(policy or {})}
    policy_lines = "\n".join(f"{k} = {_toml(v)}" for k, v in settings.items())
    path.write_text(f"""\
[imap]
host = "127.0.0.1"
port = {imap_port}
user = "{user}"
password_env = "SIZING_IMAP_PASSWORD"
security = "none"
folder = "{folder}"
idle = {str(idle).lower()}

[smtp]
host = "127.0.0.1"
port = {smtp_port}
security = "none"
from = "quotes@example.com"

[policy]
{policy_lines}

[service]
state_file = "{state}"
""")
    return path


def _toml(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


class Mailbox:
    """One test's world: a fresh IMAP account, an SMTP sink, a config file and its services."""

    def __init__(self, dovecot: Dovecot, sink: SmtpSink, folder: Path):
        self.dovecot, self.sink, self.dir = dovecot, sink, folder
        self.user = dovecot.new_user()
        self.client = dovecot.client(self.user)
        self.config_path = self.configure()
        self._services = []

    def configure(self, folder: str = "INBOX", idle: bool = False, imap_port: int | None = None,
                  **policy) -> Path:
        """(Re)write the service's config; `policy` keys override the [policy] defaults."""
        return write_config(self.dir / "mail.toml", imap_port=imap_port or self.dovecot.port,
                            user=self.user,
                            smtp_port=self.sink.port, state=self.dir / "state.sqlite3",
                            policy=policy, idle=idle, folder=folder)

    def deliver(self, message, folder: str = "INBOX") -> None:
        """Put a message in the mailbox as a mail server would (IMAP APPEND)."""
        data = message if isinstance(message, bytes) else message.as_bytes()
        self.client.append(folder, data)

    def service(self, quote=None):
        from engine.services.mail.config import load_config
        from engine.services.mail.service import MailService
        from engine.services.mail.state import MailState
        config = load_config(self.config_path)
        service = MailService(config, MailState(config.state_file), quote=quote)
        self._services.append(service)
        return service

    def poll(self, quote=None) -> int:
        """One pass of a fresh service (a restart each time), closed afterwards."""
        service = self.service(quote)
        try:
            return service.poll_once()
        finally:
            service.close()
            self._services.remove(service)

    def folders(self) -> dict[str, list]:
        return {name: folder_messages(self.client, name)
                for name in ("INBOX", "Processed", "Failed") if self.client.folder_exists(name)}

    def counts(self) -> dict[str, int]:
        return {name: len(messages) for name, messages in self.folders().items()}

    def close(self) -> None:
        for service in self._services:
            service.close()
        try:
            self.client.logout()
        except Exception:  # noqa: BLE001
            pass


# -- pytest fixtures (import them into a test module) ------------------------------------------

try:
    import pytest
except ImportError:           # the bench imports this module without pytest
    pytest = None

if pytest is not None:
    @pytest.fixture(scope="session")
    def dovecot() -> Dovecot:
        if not dovecot_binary():
            pytest.skip("dovecot is not installed (apt-get install dovecot-imapd): "
                        "the mail tests need a real IMAP server")
        return shared_dovecot()

    @pytest.fixture
    def smtp_sink():
        sink = SmtpSink()
        yield sink
        sink.stop()

    @pytest.fixture
    def mailbox(dovecot, smtp_sink, tmp_path, monkeypatch) -> Mailbox:
        monkeypatch.setenv("SIZING_IMAP_PASSWORD", PASSWORD)
        box = Mailbox(dovecot, smtp_sink, tmp_path)
        yield box
        box.close()
