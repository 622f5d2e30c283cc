"""Files people share: quotes, errors workbooks and templates get the permissions the user's umask gives."""

from __future__ import annotations

import os
import stat

import pytest
from test_intake_kit import BASE, filled

from engine.files import write_atomic
from engine.intake.template import write_template
from engine.job import run_job


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o022, 0o077, 0o002], ids=["umask022", "umask077", "umask002"])
def umask(request):
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def test_every_writer_follows_the_umask(tmp_path, umask):
    expected = 0o666 & ~umask
    good = filled(tmp_path, BASE, name="good.xlsx")
    bad = filled(tmp_path, BASE, name="bad.xlsx", typed={"gpu_count": "eight"})
    quoted = run_job(good, tmp_path / "out")
    invalid = run_job(bad, tmp_path / "out")
    assert quoted.ok and invalid.status == "invalid"
    written = quoted.outputs + invalid.outputs + [write_template(tmp_path / "share" / "intake.xlsx", "zh-TW")]
    assert {p.suffix for p in written} == {".xlsx", ".html", ".json"}
    assert any(p.name.endswith(".errors.xlsx") for p in written)
    assert {p.name: oct(mode(p)) for p in written} == {p.name: oct(expected) for p in written}


def test_replacing_a_file_gives_the_new_one_the_umask_mode_and_leaves_no_temporary(tmp_path, umask):
    target = tmp_path / "quote.json"
    target.write_bytes(b"old")
    os.chmod(target, 0o600)
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and mode(target) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["quote.json"]
