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
