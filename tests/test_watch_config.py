"""Settings (TOML and flags), the documented settings, and the polling fallback."""

import argparse
import io
from pathlib import Path

import pytest

import engine.services.watch.service as watch
from engine.commands import watch as watch_command
from engine.problems import SizingError
from engine.services.log import ServiceLog
from engine.services.watch import settings as watch_settings

DOCS = Path(__file__).resolve().parent.parent / "docs" / "watch.md"


def parse(*argv):
    parser = argparse.ArgumentParser()
    watch_command.add_arguments(parser)
    return parser.parse_args(["DIR", *argv])


def test_defaults_then_toml_then_flags(tmp_path):
    config = tmp_path / "watch.toml"
    config.write_text('[watch]\nquiet_seconds = 2\npolling = true\nworkers = 3\n'
                      'rules_dir = "my-rules"\n', encoding="utf-8")
    settings = watch_settings.resolve_settings(parse("--config", str(config), "--quiet-seconds", "0.5"))
    assert settings["quiet_seconds"] == 0.5                 # the flag wins
    assert settings["polling"] is True and settings["workers"] == 3
    assert settings["rescan_seconds"] == watch_settings.SETTINGS["rescan_seconds"][0]
    assert settings["rules_dir"] == (tmp_path / "my-rules").resolve()   # relative to the file


def test_top_level_keys_work_too(tmp_path):
    config = tmp_path / "watch.toml"
    config.write_text("rescan_seconds = 30\n", encoding="utf-8")
    assert watch_settings.resolve_settings(parse("--config", str(config)))["rescan_seconds"] == 30


@pytest.mark.parametrize("text, message", [
    ("quiet_secs = 2\n", "unknown setting 'quiet_secs' (did you mean quiet_seconds?)"),
    ("polling = 1\n", "polling must be true or false"),
    ('quiet_seconds = "fast"\n', "quiet_seconds must be a number"),
    ("quiet_seconds = \n", "not valid TOML"),
])
def test_config_mistakes_are_reported(tmp_path, text, message):
    config = tmp_path / "watch.toml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(SizingError) as e:
        watch_settings.resolve_settings(parse("--config", str(config)))
    assert message in str(e.value) and str(config) in str(e.value)


def test_bad_config_exits_2(tmp_path, capsys):
    config = tmp_path / "watch.toml"
    config.write_text("quiet_secs = 2\n", encoding="utf-8")
    assert watch_command.run(parse("--config", str(config))) == 2
    assert "quiet_secs" in capsys.readouterr().err


def test_zero_seconds_are_refused():
    with pytest.raises(SizingError):
        watch_settings.resolve_settings(parse("--quiet-seconds", "0"))


def test_every_setting_is_documented():
    docs = DOCS.read_text(encoding="utf-8")
    for name in watch_settings.SETTINGS:
        assert f"| `{name}` |" in docs, name


def test_native_events_failing_to_start_fall_back_to_polling(tmp_path, monkeypatch):
    class Broken(watch.Observer):
        def start(self):
            raise OSError(28, "inotify watch limit reached")
    monkeypatch.setattr(watch, "Observer", Broken)
    log = ServiceLog(tmp_path / "log.jsonl", stream=io.StringIO())
    handler = watch._Forward("inbox", watch.queue.SimpleQueue(), watch.threading.Event())
    observer, kind = watch.start_observer([(handler, tmp_path, False)], False, 0.1, log)
    try:
        assert kind == "PollingObserver"
        assert "polling instead" in (tmp_path / "log.jsonl").read_text(encoding="utf-8")
    finally:
        watch._stop(observer)


def test_polling_when_asked(tmp_path):
    log = ServiceLog(None, stream=io.StringIO())
    handler = watch._Forward("inbox", watch.queue.SimpleQueue(), watch.threading.Event())
    observer, kind = watch.start_observer([(handler, tmp_path, False)], True, 0.1, log)
    watch._stop(observer)
    assert kind == "PollingObserver"
