"""OAuth 2.0 sign-in to IMAP and SMTP: access tokens from a command, Microsoft 365 or Google Workspace."""

from __future__ import annotations

import calendar
import json
import os
import logging
import shlex
import smtplib
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.services.health import Unavailable

log = logging.getLogger(__name__)

PROVIDERS = ("command", "microsoft", "google")
MECHANISMS = ("xoauth2", "oauthbearer")
MICROSOFT_AUTHORITY = "https://login.microsoftonline.com"
MICROSOFT_SCOPE = "https://outlook.office365.com/.default"   # IMAP.AccessAsApp + SMTP.SendAsApp
GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token"
GOOGLE_SCOPE = "https://mail.google.com/"                    # the only scope Gmail IMAP/SMTP take
UNKNOWN_LIFETIME = 3000.0     # a bare token from a command: kept until refused or 50 minutes pass


class TokenError(Unavailable):
    """No access token could be had: the provider refused, or could not be reached."""


@dataclass(frozen=True)
class OAuthConfig:
    provider: str
    mechanism: str
    token_command: str
    tenant: str
    client_id: str
    client_secret_env: str
    client_secret_file: str
    service_account_file: str
    refresh_token_env: str
    refresh_token_file: str
    endpoint: str              # Microsoft's authority host or Google's token URL ("" = the provider's)
    scope: str
    ca_file: str
    timeout: float


def read_secret(env: str, file: str, environ) -> str:
    """A secret from an environment variable or a file (never from the config file itself)."""
    if env:
        return environ.get(env, "").strip()
    return Path(file).read_text(encoding="utf-8").strip()


class OAuthSignIn:
    """Signs in to IMAP and SMTP with an access token; when a server refuses a token that was
    not new, once more with a new one (it may have expired or been revoked early)."""

    def __init__(self, config: OAuthConfig):
        self.config = config
        self.sources: dict[str, TokenSource] = {}        # by mailbox: Google's tokens are per user

    def imap(self, client, user: str) -> None:
        mechanism = self.config.mechanism
        self._with_token(user, lambda token: client.sasl_login(mechanism.upper(),
                                                               Sasl(mechanism, user, token)))

    def smtp(self, smtp: smtplib.SMTP, user: str) -> None:
        mechanism = self.config.mechanism
        smtp.ehlo_or_helo_if_needed()
        self._with_token(user, lambda token: smtp.auth(mechanism.upper(), Sasl(mechanism, user, token),
                                                       initial_response_ok=True))

    def hint(self) -> str:
        """What to check when a provider issues tokens that the mail servers refuse."""
        if self.config.provider == "microsoft":
            return ("in Microsoft 365, does the app have IMAP.AccessAsApp and SMTP.SendAsApp, and "
                    "was its Exchange service principal given FullAccess to this mailbox? "
                    "(docs/mail.md)")
        if self.config.provider == "google":
            return ("in Google Workspace, is domain-wide delegation granted to the client for "
                    "https://mail.google.com/, and is IMAP on for the mailbox? (docs/mail.md)")
        return "does the token_command print a token for this mailbox? (docs/mail.md)"

    def _with_token(self, user: str, sign_in) -> None:
        from imapclient.exceptions import LoginError
        source = self.sources.get(user)
        if source is None:
            source = self.sources[user] = TokenSource(self.config, user)
        fetched = source.fetched
        try:
            sign_in(source.token())
            return
        except (LoginError, smtplib.SMTPAuthenticationError) as e:
            if source.fetched != fetched:          # the token was new already: no use asking again
                raise
            log.info("the server refused the access token (%s); fetching a new one", str(e)[:120])
        sign_in(source.token(fresh=True))


class Sasl:
    """The client's side of XOAUTH2 (Google, Microsoft) and OAUTHBEARER (RFC 7628): the token
    first; to an error challenge, the empty answer the mechanisms ask for, so the server ends
    with its refusal."""

    def __init__(self, mechanism: str, user: str, token: str):
        if mechanism == "oauthbearer":
            identity = user.replace("=", "=3D").replace(",", "=2C")
            self.first = f"n,a={identity},\x01auth=Bearer {token}\x01\x01"
        else:
            self.first = f"user={user}\x01auth=Bearer {token}\x01\x01"
        self.after = "\x01" if mechanism == "oauthbearer" else ""

    def __call__(self, challenge=None) -> str:
        first, self.first = self.first, None
        return first if first is not None else self.after


class TokenSource:
    """Hands out an access token, fetching a new one when the old expires or a server refuses it."""

    def __init__(self, config: OAuthConfig, user: str, environ=None):
        self.config, self.user = config, user
        self.environ = os.environ if environ is None else environ
        self._token, self._expires = "", 0.0
        self._lock = threading.Lock()
        self.fetched = 0                   # how many tokens were fetched (said in the log)

    def token(self, fresh: bool = False) -> str:
        """The cached token while it has a minute (or a tenth of its life) left; else a new one."""
        with self._lock:
            if fresh or not self._token or time.time() >= self._expires:
                token, lifetime = self._fetch()
                margin = min(60.0, lifetime / 10)
                self._token, self._expires = token, time.time() + lifetime - margin
                self.fetched += 1
            return self._token

    def _fetch(self) -> tuple[str, float]:
        fetch = {"command": self._from_command, "microsoft": self._from_microsoft,
                 "google": self._from_google}[self.config.provider]
        return fetch()

    def _from_command(self) -> tuple[str, float]:
        """Any program that prints an access token (or the JSON a token endpoint answers)."""
        c = self.config
        try:
            done = subprocess.run(shlex.split(c.token_command), capture_output=True, text=True,
                                  timeout=c.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TokenError(f"the token_command `{c.token_command}` could not run ({_reason(e)})") from None
        output = done.stdout.strip()
        if done.returncode != 0 or not output:
            said = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise TokenError(f"the token_command `{c.token_command}` failed (exit "
                             f"{done.returncode}: {said})")
        if output.startswith("{"):
            try:
                answer = json.loads(output)
                return answer["access_token"], float(answer.get("expires_in") or UNKNOWN_LIFETIME)
            except (ValueError, KeyError, TypeError):
                raise TokenError(f"the token_command `{c.token_command}` printed JSON without "
                                 "an access_token") from None
        return output.splitlines()[-1].strip(), UNKNOWN_LIFETIME

    def _from_microsoft(self) -> tuple[str, float]:
        """Client credentials (the app's own token, no user present) with msal."""
        import msal
        c = self.config
        secret = self._secret(c.client_secret_env, c.client_secret_file, "client secret")
        authority = f"{(c.endpoint or MICROSOFT_AUTHORITY).rstrip('/')}/{c.tenant}"
        try:
            # A fresh app each time: msal's own cache would hand back a token a server just refused.
            app = msal.ConfidentialClientApplication(
                c.client_id, client_credential=secret, authority=authority,
                instance_discovery=not c.endpoint, http_client=_session(c))
            answer = app.acquire_token_for_client(scopes=[c.scope or MICROSOFT_SCOPE])
        except ValueError as e:                          # msal's word for "authority unreachable"
            raise TokenError(f"cannot reach Microsoft's sign-in service at {authority} "
                             f"({_reason(e)})") from None
        except Exception as e:  # noqa: BLE001 — requests' network errors, said plainly
            raise TokenError(f"cannot reach Microsoft's sign-in service at {authority} "
                             f"({type(e).__name__})") from None
        if "access_token" not in answer:
            raise TokenError(f"Microsoft refused a token to the app {c.client_id} in tenant "
                             f"{c.tenant} ({answer.get('error')}: "
                             f"{(answer.get('error_description') or '').splitlines()[0][:300]})")
        return answer["access_token"], float(answer.get("expires_in") or UNKNOWN_LIFETIME)

    def _from_google(self) -> tuple[str, float]:
        """A service account acting for the mailbox (domain-wide delegation), or a refresh token."""
        import google.auth.exceptions
        import google.auth.transport.requests
        c = self.config
        request = google.auth.transport.requests.Request(_session(c))
        scopes = [c.scope or GOOGLE_SCOPE]
        try:
            if c.service_account_file:
                from google.oauth2 import service_account
                info = json.loads(Path(c.service_account_file).read_text(encoding="utf-8"))
                if c.endpoint:
                    info["token_uri"] = c.endpoint
                credentials = service_account.Credentials.from_service_account_info(
                    info, scopes=scopes, subject=self.user)
                who = f"the service account {info.get('client_email', '?')} acting for {self.user}"
            else:
                from google.oauth2.credentials import Credentials
                credentials = Credentials(
                    None, refresh_token=self._secret(c.refresh_token_env, c.refresh_token_file,
                                                     "refresh token"),
                    client_id=c.client_id, token_uri=c.endpoint or GOOGLE_TOKEN_URL, scopes=scopes,
                    client_secret=self._secret(c.client_secret_env, c.client_secret_file,
                                               "client secret"))
                who = f"the refresh token of client {c.client_id}"
            credentials.refresh(request)
        except google.auth.exceptions.RefreshError as e:
            raise TokenError(f"Google refused a token to {who} ({_google_reason(e)})") from None
        except google.auth.exceptions.TransportError as e:
            raise TokenError(f"cannot reach Google's token service ({type(e.__cause__ or e).__name__})") from None
        except (OSError, ValueError, KeyError) as e:
            raise TokenError(f"the Google service account file {c.service_account_file} is "
                             f"unusable ({_reason(e)})") from None
        lifetime = UNKNOWN_LIFETIME
        if credentials.expiry is not None:      # google-auth keeps it as naive UTC: read it so
            lifetime = calendar.timegm(credentials.expiry.timetuple()) - time.time()
        return credentials.token, max(1.0, lifetime)

    def _secret(self, env: str, file: str, what: str) -> str:
        try:
            secret = read_secret(env, file, self.environ)
        except OSError as e:
            raise TokenError(f"cannot read the {what} from {file} ({_reason(e)})") from None
        if not secret:
            raise TokenError(f"the {what} is empty: set the environment variable {env}" if env
                             else f"the {what} file {file} is empty")
        return secret


def _session(config: OAuthConfig):
    """An HTTP session for the token endpoint. The CA file is given with every request: a
    session-wide one would lose to REQUESTS_CA_BUNDLE from the environment (a requests quirk)."""
    import functools
    import requests
    session = requests.Session()
    options = {"timeout": config.timeout, **({"verify": config.ca_file} if config.ca_file else {})}
    session.request = functools.partial(session.request, **options)
    return session


def _google_reason(error) -> str:
    args = getattr(error, "args", ())
    if len(args) > 1 and isinstance(args[1], dict):
        detail = args[1]
        return f"{detail.get('error', '?')}: {detail.get('error_description', '')}".strip(": ")
    return str(args[0] if args else error)[:300]


def _reason(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__
