"""OAuth 2.0 sign-in against real servers: Dovecot's oauth2 passdb asking a local token authority,
aiosmtpd taking XOAUTH2/OAUTHBEARER, and the built-in Microsoft 365 and Google Workspace flows
fetching their tokens from that authority. Tokens expire and are refused mid-run."""

from __future__ import annotations

import sys
import time

import pytest
from support.mailservers import Mailbox, SmtpSink, service_account_key
from test_faults_mail import asking, degraded, said, serve, stop, wait_for
from test_mail_crash import sizing_mail

pytest_plugins = ["support.mailservers"]      # the dovecot fixture


@pytest.fixture
def box(dovecot, tmp_path, monkeypatch):
    """A mailbox whose SMTP server accepts nothing but a live token for the mailbox's user."""
    monkeypatch.delenv("SIZING_IMAP_PASSWORD", raising=False)    # no password anywhere
    sink = SmtpSink(dovecot.authority)
    mailbox = Mailbox(dovecot, sink, tmp_path)
    yield mailbox
    mailbox.close()
    sink.stop()


def token_command(box, token: str):
    """A token_command that prints what the file holds and counts its runs."""
    (box.dir / "token").write_text(token)
    script = box.dir / "print-token.py"
    script.write_text("import pathlib, sys\n"
                      f"d = pathlib.Path({str(box.dir)!r})\n"
                      "with open(d / 'runs', 'a') as runs: runs.write('run\\n')\n"
                      "print((d / 'token').read_text())\n")
    return f"{sys.executable} {script}"


def runs(box) -> int:
    path = box.dir / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def answered(box, count: int = 1):
    box.sink.wait(count, timeout=60)
    assert all(r["signed_in"] == box.user for r in box.sink.received)   # sent signed in as the mailbox


@pytest.mark.parametrize("mechanism", ["xoauth2", "oauthbearer"])
def test_a_token_command_signs_in_to_imap_and_smtp(box, mechanism):
    authority = box.dovecot.authority
    box.configure(oauth2={"provider": "command", "mechanism": mechanism,
                          "token_command": token_command(box, authority.issue(box.user))})
    box.deliver(asking(1))
    box.poll()
    answered(box)
    assert box.counts() == {"INBOX": 0, "Processed": 1, "Failed": 0}
    assert runs(box) == 1                       # one token served both IMAP and SMTP


def test_a_token_refused_mid_run_is_replaced_without_a_restart(box):
    """The running service's token is revoked while it waits; Dovecot then restarts, so the
    service must sign in again: IMAP refuses the old token, the command runs again, and both
    servers take the new one. Without the retry it would stay refused until restarted."""
    authority = box.dovecot.authority
    old = authority.issue(box.user)
    box.configure(oauth2={"provider": "command", "token_command": token_command(box, old)},
                  poll_seconds=0.5)
    service = serve(box)
    try:
        box.deliver(asking(1))
        wait_for(lambda: len(box.sink.received) == 1, 60, "the first reply", service)
        assert runs(box) == 1
        authority.expire(old)
        (box.dir / "token").write_text(authority.issue(box.user))
        box.dovecot.halt()                     # every IMAP connection goes; the service reconnects
        box.dovecot.resume()
        box.client = box.dovecot.client(box.user)   # the test's own connection went too
        box.deliver(asking(2))
        wait_for(lambda: len(box.sink.received) == 2, 60, "the reply after the new token", service)
    finally:
        assert stop(service) == 0
    assert runs(box) == 2                       # exactly one new token, used by IMAP and SMTP
    assert "expired" in authority.refused


def test_a_token_past_its_lifetime_is_renewed_before_it_is_refused(box, monkeypatch):
    """Tokens that live 3 s: a pass 3.5 s later fetches a new one first, so no server ever sees
    an expired token (without it, IMAP would refuse the old one before a new one is asked for)."""
    authority = box.dovecot.authority
    monkeypatch.setattr(authority, "lifetime", 3)
    monkeypatch.setenv("GOOGLE_CLIENT_SECRET", "client-secret")
    secret = box.dir / "refresh-token"
    secret.write_text("1//refresh-abc\n")
    authority.refresh_tokens["1//refresh-abc"] = ("client-1.apps", "client-secret", box.user)
    box.configure(oauth2={"provider": "google", "client_id": "client-1.apps",
                          "client_secret_env": "GOOGLE_CLIENT_SECRET",
                          "refresh_token_file": str(secret), "endpoint": f"{authority.url}/token"})
    service = box.service()
    refused = len(authority.refused)
    box.deliver(asking(1))
    service.poll_once()
    time.sleep(3.5)
    service._disconnect()                  # as a dropped connection would: IMAP signs in again
    box.deliver(asking(2))
    service.poll_once()
    answered(box, 2)
    issued = [g for g, u in authority.issued if u == box.user]
    # at least one renewal (more when a quote outlasts a token on a busy machine), never a refusal
    assert len(issued) >= 2 and set(issued) == {"refresh_token"}
    assert len(authority.refused) == refused


def microsoft_app(box, monkeypatch, client_id: str, secret: str, given: str) -> None:
    """An app registration with `secret` whose service principal has the box's mailbox; the
    service is configured with the secret `given`."""
    authority = box.dovecot.authority
    endpoint = authority.https_url()
    authority.apps[client_id] = (secret, box.user)
    monkeypatch.setenv("M365_CLIENT_SECRET", given)
    box.configure(oauth2={"provider": "microsoft", "tenant": "contoso.onmicrosoft.com",
                          "client_id": client_id, "client_secret_env": "M365_CLIENT_SECRET",
                          "endpoint": endpoint, "ca_file": str(authority.ca_file)})


def test_microsoft_365_client_credentials(box, monkeypatch):
    """The app's own token from the tenant's token endpoint (msal, over TLS with the authority's
    private CA), for the mailbox its Exchange service principal was given."""
    authority = box.dovecot.authority
    microsoft_app(box, monkeypatch, "app-123", "s3cret~value", "s3cret~value")
    box.deliver(asking(1))
    box.poll()
    answered(box)
    assert ("client_credentials", box.user) in authority.issued


def test_a_wrong_microsoft_secret_is_named_without_a_traceback(box, monkeypatch):
    microsoft_app(box, monkeypatch, "app-456", "right", "wrong")
    box.deliver(asking(1))
    once = sizing_mail(box, "--once")
    assert once.returncode == 1
    assert "Microsoft refused a token to the app app-456" in once.stderr
    assert "AADSTS7000215" in once.stderr and "Traceback" not in once.stderr
    assert "wrong" not in once.stderr                       # the secret itself is never said


def test_google_service_account_with_domain_wide_delegation(box):
    authority = box.dovecot.authority
    key = service_account_key(authority, box.dir, "mailer@sizing-test.iam.gserviceaccount.com")
    box.configure(oauth2={"provider": "google", "service_account_file": str(key),
                          "mechanism": "oauthbearer"})
    box.deliver(asking(1))
    box.poll()
    answered(box)
    assert ("service_account", box.user) in authority.issued     # the JWT's subject: the mailbox


def test_a_refused_oauth_sign_in_is_said_in_the_status_with_what_to_check(box):
    """A token for another mailbox: the authority issues it, the servers refuse it."""
    authority = box.dovecot.authority
    box.configure(oauth2={"provider": "command",
                          "token_command": token_command(box, authority.issue("someone-else"))},
                  poll_seconds=0.5)
    service = serve(box)
    try:
        wait_for(degraded(box, "refused the OAuth 2.0 sign-in", box.user, "token_command"), 30,
                 "the refused sign-in in the status", service)
    finally:
        assert stop(service) == 0
    assert said(box)["state"] == "stopped"


def command_source(tmp_path, body: str):
    from engine.services.mail.oauth import OAuthConfig, TokenSource
    script = tmp_path / "token.py"
    script.write_text("import pathlib, sys\n"
                      f"runs = pathlib.Path({str(tmp_path / 'runs')!r})\n"
                      "runs.write_text(runs.read_text() + 'x' if runs.exists() else 'x')\n" + body)
    config = OAuthConfig(provider="command", mechanism="xoauth2",
                         token_command=f"{sys.executable} {script}", tenant="", client_id="",
                         client_secret_env="", client_secret_file="", service_account_file="",
                         refresh_token_env="", refresh_token_file="", endpoint="", scope="",
                         ca_file="", timeout=10)
    return TokenSource(config, "quotes@example.com"), tmp_path / "runs"


def test_a_token_command_may_print_a_token_endpoints_json_with_its_lifetime(tmp_path):
    """expires_in 2 s: a tenth of it is the margin, so the token is kept 1.8 s, then renewed."""
    source, runs = command_source(tmp_path, 'print(\'{"access_token": "tok-\' + str(len(runs.read_text()))'
                                            ' + \'", "expires_in": 2}\')\n')
    assert source.token() == "tok-1" and source.token() == "tok-1"     # cached: one run
    time.sleep(2)
    assert source.token() == "tok-2" and runs.read_text() == "xx"
    assert source.token(fresh=True) == "tok-3"                           # a refusal asks anew


def test_a_failing_token_command_is_named_with_what_it_said(tmp_path):
    from engine.services.mail.oauth import TokenError
    source, _ = command_source(tmp_path, "print('refresh token revoked; run: oama authorize', "
                                         "file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(TokenError) as e:
        source.token()
    assert "failed (exit 3: refresh token revoked; run: oama authorize)" in str(e.value)
    assert "token.py" in str(e.value)
