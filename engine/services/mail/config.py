"""The mail service's TOML configuration: loaded once, checked whole, each mistake reported as file:line."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from engine.paths import LANGUAGES
from engine.problems import Problem, SizingError
from engine.services.mail.oauth import MECHANISMS, PROVIDERS, OAuthConfig

SECURITY = ("none", "starttls", "tls")
AUTH = ("password", "oauth2")
SECRET_KEYS = ("password", "pass", "secret", "client_secret", "refresh_token", "access_token",
               "token", "private_key")
OUTSIDERS = ("ignore", "refuse")

# Every key the file may hold: (section, key) → (type, default, help). The table is the
# single description of the file; docs/mail.md lists the same keys (a test checks it).
REQUIRED = object()
KEYS: dict[tuple[str, str], tuple[type | tuple, object, str]] = {
    ("imap", "host"): (str, REQUIRED, "IMAP server name or address"),
    ("imap", "port"): (int, REQUIRED, "IMAP port (143 or 993 usually)"),
    ("imap", "user"): (str, REQUIRED, "IMAP login"),
    ("imap", "auth"): (str, "password", "password | oauth2 (sign in with a token, see [oauth2])"),
    ("imap", "password_env"): (str, "", "name of the environment variable holding the IMAP password"),
    ("imap", "security"): (str, "tls", "none | starttls | tls"),
    ("imap", "ca_file"): (str, "", "CA bundle for a server with a private certificate"),
    ("imap", "folder"): (str, "INBOX", "folder watched for new quote requests"),
    ("imap", "processed_folder"): (str, "Processed", "where answered (and ignored) mail is moved"),
    ("imap", "failed_folder"): (str, "Failed", "where mail that could not be quoted is moved, with a note"),
    ("imap", "idle"): (bool, True, "wait with IMAP IDLE between polls when the server offers it"),
    ("imap", "timeout_seconds"): ((int, float), 15, "longest wait for one answer from the server; "
                                  "a silent server is given up on after it"),
    ("smtp", "host"): (str, REQUIRED, "SMTP server name or address"),
    ("smtp", "port"): (int, REQUIRED, "SMTP port (25, 587 or 465 usually)"),
    ("smtp", "security"): (str, "starttls", "none | starttls | tls"),
    ("smtp", "ca_file"): (str, "", "CA bundle for a server with a private certificate"),
    ("smtp", "from"): (str, REQUIRED, "address the replies come from"),
    ("smtp", "auth"): (str, "password", "password | oauth2 (sign in with a token, see [oauth2])"),
    ("smtp", "user"): (str, "", "SMTP login, when the server needs one"),
    ("smtp", "password_env"): (str, "", "environment variable holding the SMTP password"),
    ("smtp", "timeout_seconds"): ((int, float), 15, "longest wait for one answer from the server; "
                                  "a silent server is given up on after it"),
    ("oauth2", "provider"): (str, "", "command | microsoft | google: where access tokens come from"),
    ("oauth2", "mechanism"): (str, "xoauth2", "xoauth2 | oauthbearer: how the token is presented"),
    ("oauth2", "token_command"): (str, "", "command: a program that prints an access token"),
    ("oauth2", "tenant"): (str, "", "microsoft: the directory (tenant) ID or domain"),
    ("oauth2", "client_id"): (str, "", "microsoft: the app's client ID; google: the OAuth client ID"),
    ("oauth2", "client_secret_env"): (str, "", "environment variable holding the client secret"),
    ("oauth2", "client_secret_file"): (str, "", "or a file holding the client secret"),
    ("oauth2", "service_account_file"): (str, "", "google: the service account's JSON key "
                                         "(domain-wide delegation)"),
    ("oauth2", "refresh_token_env"): (str, "", "google: environment variable holding a refresh token"),
    ("oauth2", "refresh_token_file"): (str, "", "google: or a file holding a refresh token"),
    ("oauth2", "endpoint"): (str, "", "where tokens are fetched (default: the provider's own; "
                             "change for a national cloud or a test server)"),
    ("oauth2", "scope"): (str, "", "the scope asked for (default: the provider's mail scope)"),
    ("oauth2", "ca_file"): (str, "", "CA bundle for a token endpoint with a private certificate"),
    ("oauth2", "timeout_seconds"): ((int, float), 20, "longest wait for a token"),
    ("policy", "allow"): (list, REQUIRED, "sender addresses and domains that may ask for quotes"),
    ("policy", "outsiders"): (str, "ignore", "ignore | refuse: what senders outside the allowlist get"),
    ("policy", "poll_seconds"): ((int, float), 30, "seconds between mailbox checks"),
    ("policy", "rate_limit_per_hour"): (int, 20, "replies per sender per hour; more wait in the inbox"),
    ("policy", "max_message_mb"): ((int, float), 25, "larger messages are refused unread"),
    ("policy", "max_attachment_mb"): ((int, float), 10, "larger attachments are refused undecoded"),
    ("policy", "max_attachments"): (int, 10, "intake attachments quoted per message"),
    ("policy", "reviewer"): (str, "", "who looks at a request the service could not answer, as the "
                             "sender reads it (default: the [smtp] from address)"),
    ("policy", "review_hours"): ((int, float), 24, "within how many hours the reviewer looks; the "
                                 "sender is told"),
    ("policy", "language"): (str, "en", "language of replies that have no intake to follow"),
    ("policy", "time_limit_seconds"): ((int, float), 30, "longest one attachment may take to quote; "
                                       "past it the reply says so and the mail is filed as failed"),
    ("policy", "memory_limit_mb"): ((int, float), 1024, "most memory quoting one attachment may use; "
                                    "past it the reply says so and the mail is filed as failed"),
    ("service", "state_file"): (str, "mail-state.sqlite3", "processed-state database (relative to this file)"),
    ("service", "work_dir"): (str, "", "where attachments are quoted (default: a private temp folder)"),
    ("service", "status_file"): (str, "mail-status.json", "what the service is doing, for people and "
                                 "monitoring (relative to this file)"),
    ("service", "calibration"): (str, "", "a file written by `sizing calibrate`, applied to every quote "
                                 "it matches (relative to this file)"),
}


@dataclass(frozen=True)
class ServerConfig:
    host: str
    port: int
    security: str
    user: str
    password_env: str
    ca_file: str
    timeout: float
    auth: str = "password"

    @property
    def oauth(self) -> bool:
        return self.auth == "oauth2"

    def password(self) -> str:
        """Read at connect time, so the secret never sits in the config object or a log line."""
        return os.environ.get(self.password_env, "") if self.password_env else ""


@dataclass(frozen=True)
class MailConfig:
    source: Path
    imap: ServerConfig
    smtp: ServerConfig
    sender: str                     # [smtp] from
    folder: str
    processed_folder: str
    failed_folder: str
    idle: bool
    allow: tuple[str, ...]
    outsiders: str
    poll_seconds: float
    rate_limit_per_hour: int
    max_message_bytes: int
    max_attachment_bytes: int
    max_attachments: int
    language: str
    state_file: Path
    work_dir: Path | None
    status_file: Path
    time_limit_seconds: float
    memory_limit_mb: float
    oauth2: OAuthConfig | None = None
    reviewer: str = ""
    review_hours: float = 24
    calibration: Path | None = None


def load_config(path: Path, environ: dict | None = None, secrets: bool = True) -> MailConfig:
    """Read and check the whole file; SizingError lists every mistake as `file:line: message`.
    With `secrets=False` the secrets are not looked for (`--status` needs none)."""
    path = Path(path)
    environ = os.environ if environ is None else environ
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SizingError([Problem("config.unreadable", str(path), f"cannot read the mail config: "
                                   f"{e.strerror}.", fixer="admin")]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = re.search(r"line (\d+)", str(e))
        raise SizingError([Problem("config.syntax", f"{path}:{line.group(1) if line else 1}",
                                   f"TOML syntax error: {e}.", fixer="admin")]) from None
    where = _Locator(path, text)
    problems: list[Problem] = []
    values: dict[tuple[str, str], object] = {}
    present = set()

    for section, body in data.items():
        if not isinstance(body, dict):
            problems.append(where.problem(section, None, f"`{section}` must be a [{section}] table."))
            continue
        for key, value in body.items():
            if (section, key) not in KEYS:
                problems.append(where.problem(section, key, _unknown(section, key)))
                continue
            present.add((section, key))
            expected = KEYS[section, key][0]
            if not isinstance(value, expected) or isinstance(value, bool) and expected is not bool:
                problems.append(where.problem(section, key, f"{key} should be {_type_name(expected)}, "
                                              f"not {value!r}."))
                continue
            values[section, key] = value
    for (section, key), (_, default, _) in KEYS.items():
        if (section, key) not in present:
            if default is REQUIRED:
                problems.append(where.problem(section, None, f"[{section}] {key} is missing "
                                              f"({KEYS[section, key][2]})."))
            else:
                values[section, key] = default
    if problems:
        raise SizingError(problems)
    problems += _check_values(values, where, environ if secrets else None)
    if problems:
        raise SizingError(problems)
    return _build(path, values)


def _check_values(v: dict, where: _Locator, environ) -> list[Problem]:
    problems = []
    for section in ("imap", "smtp"):
        if v[section, "security"] not in SECURITY:
            problems.append(where.problem(section, "security", f"security must be one of "
                                          f"{', '.join(SECURITY)}, not {v[section, 'security']!r}."))
        if not 0 < v[section, "port"] < 65536:
            problems.append(where.problem(section, "port", f"port {v[section, 'port']} is not a TCP port."))
        if v[section, "auth"] not in AUTH:
            problems.append(where.problem(section, "auth", f"auth must be one of {', '.join(AUTH)}, "
                                          f"not {v[section, 'auth']!r}."))
            continue
        env = v[section, "password_env"]
        if v[section, "auth"] == "oauth2":
            if not v[section, "user"]:
                problems.append(where.problem(section, "user", "OAuth 2.0 sign-in needs user, the "
                                              "mailbox address the token is for."))
            if env:
                problems.append(where.problem(section, "password_env", "auth = \"oauth2\" signs in "
                                              "with a token, not a password: remove password_env."))
            continue
        if env and environ is not None and env not in environ:
            problems.append(where.problem(section, "password_env", f"the environment variable {env} "
                                          "is not set; it must hold the password."))
        if v[section, "user"] and not env:
            problems.append(where.problem(section, "user", "a login needs password_env, the name of "
                                          "the environment variable holding the password."))
    if v["imap", "auth"] == "password" and not v["imap", "password_env"]:
        problems.append(where.problem("imap", None, "[imap] password_env is missing (name of the "
                                      "environment variable holding the IMAP password), or set "
                                      "auth = \"oauth2\"."))
    if "oauth2" in (v["imap", "auth"], v["smtp", "auth"]):
        problems += _check_oauth(v, where, environ)
    if "@" not in v["smtp", "from"]:
        problems.append(where.problem("smtp", "from", "from must be an e-mail address."))
    if v["policy", "outsiders"] not in OUTSIDERS:
        problems.append(where.problem("policy", "outsiders", f"outsiders must be one of "
                                      f"{', '.join(OUTSIDERS)}."))
    if v["policy", "language"] not in LANGUAGES:
        problems.append(where.problem("policy", "language", f"language must be one of "
                                      f"{', '.join(LANGUAGES)}."))
    for entry in v["policy", "allow"]:
        if not isinstance(entry, str) or not re.fullmatch(r"(\*\.)?[^@\s]+|[^@\s]+@[^@\s]+", entry):
            problems.append(where.problem("policy", "allow", f"{entry!r} is neither an address "
                                          "(name@domain) nor a domain (example.com, *.example.com)."))
    for key in ("poll_seconds", "max_message_mb", "max_attachment_mb", "max_attachments",
                "rate_limit_per_hour", "time_limit_seconds", "memory_limit_mb", "review_hours"):
        if v["policy", key] <= 0:
            problems.append(where.problem("policy", key, f"{key} must be greater than 0."))
    if len({v["imap", "folder"], v["imap", "processed_folder"], v["imap", "failed_folder"]}) < 3:
        problems.append(where.problem("imap", "processed_folder", "folder, processed_folder and "
                                      "failed_folder must be three different folders."))
    return problems


def _check_oauth(v: dict, where: _Locator, environ) -> list[Problem]:
    """The [oauth2] section: one way to get tokens, with the settings that way needs."""
    problems, provider = [], v["oauth2", "provider"]
    def need(key: str, why: str):
        if not v["oauth2", key]:
            problems.append(where.problem("oauth2", None, f"[oauth2] {key} is missing ({why})."))
    def secret(env_key: str, file_key: str, what: str):
        env, file = v["oauth2", env_key], v["oauth2", file_key]
        if bool(env) == bool(file):
            problems.append(where.problem("oauth2", env_key if env else None, f"give the {what} "
                                          f"either by {env_key} or by {file_key} (one of them)."))
        elif env and environ is not None and env not in environ:
            problems.append(where.problem("oauth2", env_key, f"the environment variable {env} is "
                                          f"not set; it must hold the {what}."))
        elif file and environ is not None and not _beside(where.path, file).is_file():
            problems.append(where.problem("oauth2", file_key, f"the {what} file {file} does not exist."))
    if provider not in PROVIDERS:
        problems.append(where.problem("oauth2", "provider" if provider else None,
                                      f"[oauth2] provider must be one of {', '.join(PROVIDERS)}"
                                      f"{f', not {provider!r}' if provider else ''}."))
        return problems
    if v["oauth2", "mechanism"] not in MECHANISMS:
        problems.append(where.problem("oauth2", "mechanism", f"mechanism must be one of "
                                      f"{', '.join(MECHANISMS)}."))
    if provider == "command":
        need("token_command", "the program that prints an access token")
    elif provider == "microsoft":
        need("tenant", "the directory (tenant) ID from the app registration's overview")
        need("client_id", "the application (client) ID from the app registration's overview")
        secret("client_secret_env", "client_secret_file", "client secret")
    elif v["oauth2", "service_account_file"]:
        if environ is not None and not _beside(where.path, v["oauth2", "service_account_file"]).is_file():
            problems.append(where.problem("oauth2", "service_account_file", "the service account "
                                          f"key {v['oauth2', 'service_account_file']} does not exist."))
    else:
        need("client_id", "the OAuth client ID the refresh token was issued to, or give "
                          "service_account_file instead")
        secret("refresh_token_env", "refresh_token_file", "refresh token")
        secret("client_secret_env", "client_secret_file", "client secret")
    if v["oauth2", "timeout_seconds"] <= 0:
        problems.append(where.problem("oauth2", "timeout_seconds", "timeout_seconds must be "
                                      "greater than 0."))
    return problems


def _beside(config: Path, value: str) -> Path:
    given = Path(value).expanduser()
    return given if given.is_absolute() else config.parent / given


def _build(path: Path, v: dict) -> MailConfig:
    def server(section: str) -> ServerConfig:
        return ServerConfig(host=v[section, "host"], port=v[section, "port"],
                            security=v[section, "security"], user=v[section, "user"],
                            password_env=v[section, "password_env"], auth=v[section, "auth"],
                            ca_file=v[section, "ca_file"], timeout=float(v[section, "timeout_seconds"]))
    def beside_config(value: str) -> Path:
        return _beside(path, value)
    def file(key: str) -> str:
        return str(beside_config(v["oauth2", key])) if v["oauth2", key] else ""
    oauth2 = None
    if "oauth2" in (v["imap", "auth"], v["smtp", "auth"]):
        oauth2 = OAuthConfig(
            provider=v["oauth2", "provider"], mechanism=v["oauth2", "mechanism"],
            token_command=v["oauth2", "token_command"], tenant=v["oauth2", "tenant"],
            client_id=v["oauth2", "client_id"], client_secret_env=v["oauth2", "client_secret_env"],
            client_secret_file=file("client_secret_file"),
            service_account_file=file("service_account_file"),
            refresh_token_env=v["oauth2", "refresh_token_env"],
            refresh_token_file=file("refresh_token_file"), endpoint=v["oauth2", "endpoint"],
            scope=v["oauth2", "scope"], ca_file=file("ca_file"),
            timeout=float(v["oauth2", "timeout_seconds"]))
    return MailConfig(
        source=path, imap=server("imap"), smtp=server("smtp"), sender=v["smtp", "from"],
        folder=v["imap", "folder"], processed_folder=v["imap", "processed_folder"],
        failed_folder=v["imap", "failed_folder"], idle=v["imap", "idle"],
        allow=tuple(a.strip().lower() for a in v["policy", "allow"]),
        outsiders=v["policy", "outsiders"], poll_seconds=float(v["policy", "poll_seconds"]),
        rate_limit_per_hour=v["policy", "rate_limit_per_hour"],
        max_message_bytes=int(v["policy", "max_message_mb"] * 1_000_000),
        max_attachment_bytes=int(v["policy", "max_attachment_mb"] * 1_000_000),
        max_attachments=v["policy", "max_attachments"], language=v["policy", "language"],
        state_file=beside_config(v["service", "state_file"]),
        work_dir=beside_config(v["service", "work_dir"]) if v["service", "work_dir"] else None,
        status_file=beside_config(v["service", "status_file"]),
        time_limit_seconds=float(v["policy", "time_limit_seconds"]),
        memory_limit_mb=float(v["policy", "memory_limit_mb"]), oauth2=oauth2,
        reviewer=v["policy", "reviewer"] or v["smtp", "from"],
        review_hours=float(v["policy", "review_hours"]),
        calibration=beside_config(v["service", "calibration"]) if v["service", "calibration"] else None)


def _unknown(section: str, key: str) -> str:
    if key in SECRET_KEYS:
        return ("secrets are never read from the file; put the password in an environment "
                "variable and name it with password_env (for OAuth 2.0: client_secret_env or "
                "client_secret_file, refresh_token_env or refresh_token_file).")
    known = [k for s, k in KEYS if s == section]
    if not known:
        return (f"unknown section [{section}]; the sections are imap, smtp, oauth2, policy and "
                "service.")
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(known)})"
    return f"unknown key {key} in [{section}]{hint}."


def _type_name(expected) -> str:
    names = {str: "text in quotes", int: "a whole number", float: "a number", bool: "true or false",
             list: "a list like [\"a\", \"b\"]"}
    expected = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(dict.fromkeys(names[t] if t is not int or len(expected) == 1 else "a number"
                                     for t in expected))


class _Locator:
    """Finds the line of `[section]` / `key =` in the file; tomllib does not keep positions."""

    def __init__(self, path: Path, text: str):
        self.path, self.lines = path, text.splitlines()

    def line(self, section: str, key: str | None) -> int:
        current, header = "", 0
        for n, raw in enumerate(self.lines, 1):
            s = raw.strip()
            if s.startswith("[") and not s.startswith("[["):
                current = s.strip("[] ").split("#")[0].strip().strip('"')
                if current == section:
                    header = n
            elif current == section and key and re.match(rf'"?{re.escape(key)}"?\s*=', s):
                return n
        return header or 1

    def problem(self, section: str, key: str | None, message: str) -> Problem:
        return Problem("config.invalid", f"{self.path}:{self.line(section, key)}", message, fixer="admin")
