"""The mail service quotes with the last good rule set while a rule edit is broken, and says so."""

import json

from engine.services.mail.config import load_config
from engine.services.mail.service import MailService
from engine.services.mail.state import MailState
from tests.conftest import ROOT


def test_a_broken_rule_edit_keeps_the_mail_service_on_the_last_good_set(home_copy, tmp_path):
    config_file = tmp_path / "mail.toml"
    config_file.write_text((ROOT / "docs" / "mail.example.toml").read_text())
    config = load_config(config_file, environ={"SIZING_IMAP_PASSWORD": "x"})
    service = MailService(config, MailState(config.state_file),
                          rules_dirs=(home_copy / "rules", home_copy / "catalogs"))
    sample = ROOT / "samples" / "seed002-bert-base-8xv100.yaml"
    first = service.quote(sample, tmp_path / "a", "first")
    assert first.ok and first.ruleset_version.startswith("rs-")
    (home_copy / "rules" / "cost.yaml").write_text("rules: [\n", encoding="utf-8")   # a save gone wrong
    second = service.quote(sample, tmp_path / "b", "second")
    assert second.ok and second.ruleset_version == first.ruleset_version
    status = service.rules.status()
    assert status["running_on_last_good"] and "rules/cost.yaml:" in status["problems"][0]
    service.write_status()                 # what `sizing mail --status` and monitoring read
    said = json.loads(config.status_file.read_text())["ruleset"]
    assert said["running_on_last_good"] and said["version"] == first.ruleset_version
    assert "rules/cost.yaml:" in said["problems"][0] and said["checked_at"][4] == "-"
    service.close()
