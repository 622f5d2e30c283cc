"""The mail service quotes with the last good rule set while a rule edit is broken."""

from engine.services.mail.service import MailService
from tests.conftest import ROOT


def test_a_broken_rule_edit_keeps_the_mail_service_on_the_last_good_set(home_copy, tmp_path):
    service = MailService(None, None, rules_dirs=(home_copy / "rules", home_copy / "catalogs"))
    sample = ROOT / "samples" / "seed002-bert-base-8xv100.yaml"
    first = service.quote(sample, tmp_path / "a", "first")
    assert first.ok and first.ruleset_version.startswith("rs-")
    (home_copy / "rules" / "cost.yaml").write_text("rules: [\n", encoding="utf-8")   # a save gone wrong
    second = service.quote(sample, tmp_path / "b", "second")
    assert second.ok and second.ruleset_version == first.ruleset_version
    status = service.rules.status()
    assert status["running_on_last_good"] and "rules/cost.yaml:" in status["problems"][0]
