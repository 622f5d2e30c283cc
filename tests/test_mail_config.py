"""The mail service's TOML file: the example loads, every mistake is named with its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.problems import SizingError
from engine.services.mail.config import KEYS, load_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "mail.example.toml"
ENV = {"SIZING_IMAP_PASSWORD": "secret"}


def test_the_documented_example_loads():
    config = load_config(EXAMPLE, environ=ENV)
    assert (config.imap.host, config.imap.port, config.imap.security) == ("127.0.0.1", 1143, "none")
    assert config.sender == "quotes@example.com"
    assert config.allow == ("example.com", "someone@partner.com")
    assert config.poll_seconds == 5
    assert config.state_file == EXAMPLE.parent / "mail-state.sqlite3"   # relative to the file
    assert config.imap.password() == ""              # read from the environment only when connecting


def test_every_key_is_documented_and_in_the_example():
    doc = (ROOT / "docs" / "mail.md").read_text()
    example = EXAMPLE.read_text()
    for section, key in KEYS:
        assert f"`[{section}] {key}`" in doc, f"[{section}] {key} is missing from docs/mail.md"
        assert re.search(rf"^#?\s*{re.escape(key)} =", example, re.M), f"{key} missing from the example"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mail.toml"
    path.write_text(EXAMPLE.read_text() + text)
    return path


def problems(path: Path, environ=ENV) -> list[str]:
    with pytest.raises(SizingError) as e:
        load_config(path, environ=environ)
    return [str(p) for p in e.value.problems]


def test_a_password_in_the_file_is_refused(tmp_path):
    path = tmp_path / "mail.toml"
    path.write_text(EXAMPLE.read_text().replace('user = "quotes"', 'user = "quotes"\npassword = "hunter2"', 1))
    [message] = problems(path)
    assert message.startswith(f"{path}:9: ") and "environment variable" in message
    assert "hunter2" not in message


def test_unknown_keys_suggest_the_right_one(tmp_path):
    path = tmp_path / "mail.toml"
    path.write_text(EXAMPLE.read_text().replace("poll_seconds = 5", "pol_seconds = 5"))
    [message] = problems(path)
    line = EXAMPLE.read_text().splitlines().index("poll_seconds = 5") + 1
    assert message == f"{path}:{line}: unknown key pol_seconds in [policy] (did you mean poll_seconds?)."


def test_all_mistakes_are_reported_at_once(tmp_path):
    text = (EXAMPLE.read_text().replace('port = 1025', 'port = "25"')
            .replace('outsiders = "ignore"', 'outsiders = "maybe"'))
    text = text.replace('security = "none"', 'security = "ssl"', 1)
    path = tmp_path / "mail.toml"
    path.write_text(text)
    found = problems(path)
    assert any("port should be a whole number" in p for p in found)
    assert len(found) == 1          # type errors stop before value checks; the rest come next
    path.write_text(text.replace('port = "25"', "port = 1025"))
    found = problems(path)
    assert any(":10: security must be one of none, starttls, tls" in p for p in found)
    assert any("outsiders must be one of ignore, refuse" in p for p in found)


def test_a_missing_password_variable_is_named(tmp_path):
    [message] = problems(EXAMPLE, environ={})
    assert "SIZING_IMAP_PASSWORD is not set" in message


def test_missing_required_keys_and_syntax_errors(tmp_path):
    path = tmp_path / "mail.toml"
    path.write_text("[imap]\nhost = 'x'\n")
    found = problems(path)
    assert any("[smtp] from is missing" in p for p in found)
    path.write_text("[imap]\nhost = \n")
    [message] = problems(path)
    assert message.startswith(f"{path}:2: TOML syntax error")


@pytest.mark.parametrize("entry", ["@", "a b", "x@y@z"])
def test_bad_allowlist_entries(tmp_path, entry):
    path = write(tmp_path, "")
    path.write_text(path.read_text().replace('"example.com", ', f'"{entry}", '))
    assert any("neither an address" in p for p in problems(path))


OAUTH_MICROSOFT = """
[oauth2]
provider = "microsoft"
tenant = "contoso.onmicrosoft.com"
client_id = "11111111-2222-3333-4444-555555555555"
client_secret_env = "M365_SECRET"
"""


def oauth(text: str) -> str:
    """The example with both servers signing in by OAuth 2.0 instead of a password."""
    return (text.replace('password_env = "SIZING_IMAP_PASSWORD"', 'auth = "oauth2"')
            .replace('# auth = "password"        # password | oauth2 (then', 'auth = "oauth2"\nuser = '
                     '"quotes@example.com" # (then'))


def test_an_oauth_config_needs_no_password_and_reads_no_secret_from_the_file(tmp_path):
    path = tmp_path / "mail.toml"
    path.write_text(oauth(EXAMPLE.read_text()) + OAUTH_MICROSOFT)
    config = load_config(path, environ={"M365_SECRET": "x"})
    assert config.imap.oauth and config.smtp.oauth and config.smtp.user == "quotes@example.com"
    assert (config.oauth2.provider, config.oauth2.tenant) == ("microsoft", "contoso.onmicrosoft.com")
    [message] = problems(path, environ={})
    assert "M365_SECRET is not set" in message
    path.write_text(oauth(EXAMPLE.read_text()) + OAUTH_MICROSOFT + 'client_secret = "abc~123"\n')
    found = problems(path, environ={"M365_SECRET": "x"})
    assert any("secrets are never read from the file" in p for p in found)
    assert not any("abc~123" in p for p in found)


def test_what_each_oauth_provider_lacks_is_named_with_the_line(tmp_path):
    path = tmp_path / "mail.toml"
    text = oauth(EXAMPLE.read_text())
    path.write_text(text + '\n[oauth2]\nprovider = "microsoft"\n')
    found = problems(path)
    section = len(text.splitlines()) + 2                      # the [oauth2] header
    assert any(p.startswith(f"{path}:{section}: [oauth2] tenant is missing") for p in found), found
    assert any("client_id is missing" in p for p in found)
    assert any("client secret either by client_secret_env or by client_secret_file" in p for p in found)
    path.write_text(text + '\n[oauth2]\nprovider = "google"\nservice_account_file = "sa.json"\n')
    [message] = problems(path)
    assert "sa.json does not exist" in message
    path.write_text(text + '\n[oauth2]\nprovider = "okta"\n')
    [message] = problems(path)
    assert "provider must be one of command, microsoft, google, not 'okta'" in message
    path.write_text(text.replace('auth = "oauth2"', 'auth = "oauth2"\npassword_env = "X"', 1)
                    + '\n[oauth2]\nprovider = "command"\ntoken_command = "get-token"\n')
    [message] = problems(path)
    assert "signs in with a token, not a password: remove password_env" in message


def test_the_status_reads_no_secret(tmp_path):
    path = tmp_path / "mail.toml"
    path.write_text(oauth(EXAMPLE.read_text()) + OAUTH_MICROSOFT)
    assert load_config(path, environ={}, secrets=False).oauth2.client_secret_env == "M365_SECRET"
    assert load_config(EXAMPLE, environ={}, secrets=False).imap.password_env == "SIZING_IMAP_PASSWORD"
