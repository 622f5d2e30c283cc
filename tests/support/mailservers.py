"""Real mail servers on loopback for tests and the bench: a private Dovecot (IMAP) and aiosmtpd (SMTP)."""

from __future__ import annotations

import atexit
import base64
import email
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from email import policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class TokenAuthority:
    """A local OAuth 2.0 authorization server, as Microsoft's and Google's are to the service:
    issues access tokens (client credentials, a service account's signed JWT, a refresh token)
    and answers token introspection (RFC 7662) for Dovecot's oauth2 passdb and the SMTP sink.

    `apps[client_id] = (secret, mailbox)` is a Microsoft app registration whose Exchange service
    principal may use `mailbox`; `service_accounts[email] = public key PEM` a Google service
    account with domain-wide delegation; `refresh_tokens[token] = (client_id, secret, user)`.
    """

    def __init__(self):
        self.tokens: dict[str, tuple[str, float]] = {}        # access token → (user, expires)
        self.apps: dict[str, tuple[str, str]] = {}
        self.service_accounts: dict[str, bytes] = {}
        self.refresh_tokens: dict[str, tuple[str, str, str]] = {}
        self.lifetime = 3600.0
        self.issued: list[tuple[str, str]] = []                # (grant, user), in order
        self.refused: list[str] = []                           # why a token was not accepted
        self._lock = threading.Lock()
        self.port = self._serve(None)
        self._https_port: int | None = None
        self.ca_file: Path | None = None

    # -- what the tests do with it

    def issue(self, user: str, lifetime: float | None = None, grant: str = "test") -> str:
        token = secrets.token_urlsafe(24)
        with self._lock:
            self.tokens[token] = (user, time.time() + (lifetime or self.lifetime))
            self.issued.append((grant, user))
        return token

    def expire(self, token: str | None = None) -> None:
        """End one token (or every token) now, as a provider does when it revokes them."""
        with self._lock:
            for t in ([token] if token else list(self.tokens)):
                if t in self.tokens:
                    self.tokens[t] = (self.tokens[t][0], 0.0)

    def user_of(self, token: str) -> str | None:
        with self._lock:
            user, expires = self.tokens.get(token, ("", 0.0))
            if not user or time.time() >= expires:
                self.refused.append("expired" if user else "unknown")
                return None
            return user

    def https_url(self) -> str:
        """The same endpoints over TLS with a private CA (`ca_file`): msal insists on https."""
        if self._https_port is None:
            folder = Path(tempfile.mkdtemp(prefix="sizing-authority-"))
            cert, key = _self_signed(folder)
            self.ca_file = cert
            self._https_port = self._serve((cert, key))
        return f"https://127.0.0.1:{self._https_port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the HTTP side

    def _serve(self, tls) -> int:
        authority = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = urllib.parse.urlparse(self.path).path
                if path.endswith("/v2.0/.well-known/openid-configuration"):
                    base = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_port}"
                    tenant = path.split("/")[1]
                    return self._json(200, {
                        "issuer": f"{base}/{tenant}/v2.0",
                        "authorization_endpoint": f"{base}/{tenant}/oauth2/v2.0/authorize",
                        "token_endpoint": f"{base}/{tenant}/oauth2/v2.0/token"})
                self._json(404, {"error": "not_found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                path = urllib.parse.urlparse(self.path).path
                if path == "/introspect":
                    user = authority.user_of(form.get("token", ""))
                    return self._json(200, {"active": True, "username": user} if user
                                      else {"active": False})
                status, answer = authority._grant(form)
                self._json(status, answer)

            def _json(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        if tls:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server.server_port

    def _grant(self, form: dict) -> tuple[int, dict]:
        grant = form.get("grant_type", "")
        if grant == "client_credentials":                           # Microsoft 365
            secret, mailbox = self.apps.get(form.get("client_id", ""), (None, ""))
            if secret is None or form.get("client_secret") != secret:
                return 401, {"error": "invalid_client", "error_description":
                             "AADSTS7000215: Invalid client secret provided."}
            if form.get("scope") != "https://outlook.office365.com/.default":
                return 400, {"error": "invalid_scope", "error_description": form.get("scope", "")}
            user, kind = mailbox, "client_credentials"
        elif grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":   # Google service account
            import jwt
            try:
                issuer = jwt.decode(form.get("assertion", ""), options={"verify_signature": False})["iss"]
                claims = jwt.decode(form["assertion"], self.service_accounts[issuer],
                                    algorithms=["RS256"],   # Google's own URL, as google-auth signs
                                    audience="https://oauth2.googleapis.com/token")
            except Exception as e:  # noqa: BLE001 — any bad assertion is refused as Google does
                return 400, {"error": "invalid_grant", "error_description": f"Invalid JWT: {e}"}
            if "https://mail.google.com/" not in claims.get("scope", "").split():
                return 400, {"error": "unauthorized_client", "error_description":
                             "Client is unauthorized to retrieve access tokens using this method."}
            user, kind = claims.get("sub", ""), "service_account"
        elif grant == "refresh_token":                                 # Google, a user's consent
            client, secret, user = self.refresh_tokens.get(form.get("refresh_token", ""), ("", "", ""))
            if not user or (form.get("client_id"), form.get("client_secret")) != (client, secret):
                return 400, {"error": "invalid_grant", "error_description": "Token has been expired "
                             "or revoked."}
            kind = "refresh_token"
        else:
            return 400, {"error": "unsupported_grant_type"}
        token = self.issue(user, grant=kind)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(self.lifetime)
                     if self.lifetime >= 1 else self.lifetime}


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, its own CA: what a private token server would present."""
    import datetime
    import ipaddress
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(
                "127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def service_account_key(authority: TokenAuthority, folder: Path, email: str) -> Path:
    """A Google service account's JSON key, its public half registered with `authority`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    authority.service_accounts[email] = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path = folder / "service-account.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "sizing-test", "private_key_id": "k1",
        "private_key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode(),
        "client_email": email, "client_id": "1234567890", "token_uri": f"{authority.url}/token"}))
    path.chmod(0o600)
    return path


_authority: TokenAuthority | None = None


def shared_authority() -> TokenAuthority:
    """One token authority per test process: the shared Dovecot asks it about tokens."""
    global _authority
    if _authority is None:
        _authority = TokenAuthority()
    return _authority


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
        self.authority = shared_authority()
        (self.root / "oauth2.conf.ext").write_text((HERE / "dovecot-oauth2.conf.ext").read_text()
                                                   .replace("@TOKENPORT@", str(self.authority.port)))
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

    def __init__(self, authority: TokenAuthority | None = None):
        from aiosmtpd.controller import Controller
        self.authority = authority            # given: sign-in with XOAUTH2/OAUTHBEARER is required
        self.received: list[dict] = []
        self.refuse_mail: str | None = None
        self.refuse_rcpt: dict[str, str] = {}
        self.refusals = 0
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self.port = free_port()
        options = {}
        if authority is not None:
            # AUTH over plain loopback; sign-in is required in handle_MAIL (aiosmtpd's own
            # auth_required would warn on every connection that TLS is not required)
            options = {"auth_require_tls": False, "auth_exclude_mechanism": ["LOGIN", "PLAIN"]}
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, **options)
        self.controller.start()

    async def auth_XOAUTH2(self, server, args):
        return await self._oauth(server, args, "xoauth2")

    async def auth_OAUTHBEARER(self, server, args):
        return await self._oauth(server, args, "oauthbearer")

    async def _oauth(self, server, args, mechanism):
        """As Gmail and Exchange Online answer: a bad token gets a JSON challenge, then 535."""
        from aiosmtpd.smtp import AuthResult
        blob = base64.b64decode(args[1]) if len(args) > 1 else await server.challenge_auth("")
        if not isinstance(blob, bytes):
            return AuthResult(success=False, handled=True)
        fields = dict(f.split("=", 1) for f in blob.decode().split("\x01") if "=" in f)
        user = fields.get("user", "")
        if mechanism == "oauthbearer":
            user = blob.decode().split("\x01")[0].partition("a=")[2].rstrip(",").replace("=2C", ",")
        token = fields.get("auth", "").removeprefix("Bearer ")
        if self.authority is not None and user and self.authority.user_of(token) == user:
            return AuthResult(success=True, auth_data=user)
        await server.challenge_auth(json.dumps({"status": "401", "schemes": "bearer"}))
        return AuthResult(success=False, handled=False,
                          message="535 5.7.8 Username and Password not accepted")

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if self.authority is not None and not session.authenticated:
            return "530 5.7.0 Authentication required"
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
                                  "signed_in": session.auth_data,
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
                 policy: dict | None = None, idle: bool = False, folder: str = "INBOX",
                 oauth2: dict | None = None, timeout: float | None = None) -> Path:
    """A mail-service TOML config pointing at the test servers (password via environment).
    With `oauth2` (the [oauth2] keys), both servers are signed in to with tokens instead."""
    settings = {"allow": ["example.com", "someone@partner.com"], "poll_seconds": 5,
                **(policy or {})}
    policy_lines = "\n".join(f"{k} = {_toml(v)}" for k, v in settings.items())
    imap_auth = ('auth = "oauth2"' if oauth2 is not None else 'password_env = "SIZING_IMAP_PASSWORD"')
    smtp_auth = f'auth = "oauth2"\nuser = "{user}"' if oauth2 is not None else ""
    oauth_lines = ("\n[oauth2]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in oauth2.items())
                   if oauth2 is not None else "")
    timeouts = f"timeout_seconds = {timeout}" if timeout else ""
    path.write_text(f"""\
[imap]
host = "127.0.0.1"
port = {imap_port}
user = "{user}"
{imap_auth}
security = "none"
folder = "{folder}"
idle = {str(idle).lower()}
{timeouts}

[smtp]
host = "127.0.0.1"
port = {smtp_port}
security = "none"
from = "quotes@example.com"
{smtp_auth}
{timeouts}
{oauth_lines}
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
                  oauth2: dict | None = None, timeout: float | None = None, **policy) -> Path:
        """(Re)write the service's config; `policy` keys override the [policy] defaults."""
        return write_config(self.dir / "mail.toml", imap_port=imap_port or self.dovecot.port,
                            user=self.user,
                            smtp_port=self.sink.port, state=self.dir / "state.sqlite3",
                            policy=policy, idle=idle, folder=folder, oauth2=oauth2,
                            timeout=timeout)

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
