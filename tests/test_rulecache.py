"""The rule-set cache: a hit quotes exactly like a fresh load; stale, damaged or foreign caches are never used."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from engine.authoring.examples import run_examples
from engine.calc.rulecache import MAGIC, _digest, cached_data, cached_ruleset
from engine.calc.ruleset import load_ruleset
from engine.job import run_job
from engine.paths import SAMPLES_DIR
from engine.problems import SizingError
from tests.conftest import ROOT

SAMPLES = sorted(SAMPLES_DIR.glob("*.yaml"))


class CountingLoad:
    """load_ruleset itself, counting how often the files are really read."""

    def __init__(self):
        self.calls = 0

    def __call__(self, rules_dir, catalogs_dir):
        self.calls += 1
        return load_ruleset(rules_dir, catalogs_dir)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SIZING_CACHE_DIR", str(folder))
    return folder


def entry(cache: Path, kind: str = "ruleset") -> Path:
    (found,) = cache.glob(f"{kind}-*")
    return found


def documents(ruleset, out: Path) -> list[dict]:
    jobs = [run_job(sample, out, ruleset=ruleset) for sample in SAMPLES]
    assert all(job.ok for job in jobs), [job.problems for job in jobs if not job.ok]
    return [job.results.to_json(job.language) for job in jobs]


def test_a_cached_rule_set_quotes_every_sample_exactly_like_a_fresh_load(home_copy, cache, tmp_path):
    load = CountingLoad()
    dirs = (home_copy / "rules", home_copy / "catalogs")
    fresh = cached_ruleset(load, *dirs)
    again = cached_ruleset(load, *dirs)
    assert load.calls == 1 and again is not fresh and again.version == fresh.version
    assert list(again.rules) == list(fresh.rules)
    assert {n: r.type for n, r in again.rules.items()} == {n: r.type for n, r in fresh.rules.items()}
    assert json.dumps(documents(again, tmp_path / "a"), sort_keys=True) == \
        json.dumps(documents(fresh, tmp_path / "b"), sort_keys=True)
    assert run_examples(again) == run_examples(fresh)
    assert oct(entry(cache).stat().st_mode & 0o777) == "0o600"


def test_an_edited_rule_file_is_read_again(home_copy, cache):
    load = CountingLoad()
    dirs = (home_copy / "rules", home_copy / "catalogs")
    before = cached_ruleset(load, *dirs)
    path = home_copy / "rules" / "compute.yaml"
    text = path.read_text(encoding="utf-8")
    label = before.rules["training_flops"].label["en"]
    path.write_text(text.replace(f"en: {label}", "en: Compute for training", 1), encoding="utf-8")
    after = cached_ruleset(load, *dirs)
    assert load.calls == 2
    assert after.rules["training_flops"].label["en"] == "Compute for training" != label
    assert len(list(cache.iterdir())) == 1            # one entry per rule folder, replaced


def test_a_broken_rule_file_is_reported_every_time_and_never_cached(home_copy, cache):
    (home_copy / "rules" / "compute.yaml").write_text("rules: [unclosed\n", encoding="utf-8")
    load = CountingLoad()
    for _ in range(2):
        with pytest.raises(SizingError):
            cached_ruleset(load, home_copy / "rules", home_copy / "catalogs")
    assert load.calls == 2 and not cache.exists()


class Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _forged(data: bytes, tmp_path: Path) -> bytes:
    """A payload that runs a command when unpickled, with a checksum that matches it."""
    head = len(MAGIC)
    key = data[head:head + 32]
    evil = pickle.dumps(Evil(tmp_path / "pwned"))
    payload = len(evil).to_bytes(8, "little") + evil + evil
    return MAGIC + key + _digest(key, payload) + payload


DAMAGE = {
    "truncated": lambda data, tmp: data[: len(data) // 2],
    "one byte flipped": lambda data, tmp: data[:-100] + bytes([data[-100] ^ 0x01]) + data[-99:],
    "empty": lambda data, tmp: b"",
    "not ours": lambda data, tmp: b"\x80\x04garbage" * 100,
    "an old format": lambda data, tmp: data.replace(MAGIC, b"sizing rule-set cache 1\n", 1),
    "a forged payload": _forged,
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_or_forged_cache_is_never_used(home_copy, cache, tmp_path, damage):
    load = CountingLoad()
    dirs = (home_copy / "rules", home_copy / "catalogs")
    fresh = cached_ruleset(load, *dirs)
    path = entry(cache)
    path.write_bytes(DAMAGE[damage](path.read_bytes(), tmp_path))
    again = cached_ruleset(load, *dirs)
    assert load.calls == 2 and again.version == fresh.version
    assert run_examples(again) == run_examples(fresh)
    assert not (tmp_path / "pwned").exists()
    assert cached_ruleset(load, *dirs) and load.calls == 2        # written afresh, then used


def test_a_cache_others_could_have_written_is_not_used(home_copy, cache):
    load = CountingLoad()
    dirs = (home_copy / "rules", home_copy / "catalogs")
    cached_ruleset(load, *dirs)
    os.chmod(entry(cache), 0o664)
    cached_ruleset(load, *dirs)
    assert load.calls == 2


@pytest.mark.parametrize("setting", ["off", "unwritable"])
def test_without_a_usable_cache_folder_the_files_are_simply_loaded(home_copy, tmp_path, monkeypatch, setting):
    if setting == "unwritable":
        blocker = tmp_path / "a-file"
        blocker.write_text("not a folder")
        monkeypatch.setenv("SIZING_CACHE_DIR", str(blocker / "cache"))
    else:
        monkeypatch.setenv("SIZING_CACHE_DIR", "off")
    load = CountingLoad()
    for _ in range(2):
        cached_ruleset(load, home_copy / "rules", home_copy / "catalogs")
    assert load.calls == 2


def test_two_fresh_processes_print_the_same_quote_and_the_second_reads_the_cache(tmp_path):
    env = {**os.environ, "SIZING_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "engine", "quote", str(SAMPLES[0]), "-o", str(tmp_path), "--json"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    (written,) = (tmp_path / "cache").glob("ruleset-*")
    stamp = written.stat().st_mtime_ns
    second = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout and json.loads(first.stdout)["results"]
    assert written.stat().st_mtime_ns == stamp                    # read, not written again


def test_the_published_runs_a_quote_cites_are_parsed_once_per_version_of_the_file(cache, tmp_path):
    from engine.calc.evidence import _runs_by_group, load_cases
    source = tmp_path / "published.yaml"
    source.write_text((ROOT / "validation" / "published.yaml").read_text())
    builds = []

    def build():
        builds.append(1)
        return _runs_by_group(load_cases(source))

    first = cached_data("published-runs", source, build)
    assert cached_data("published-runs", source, build) == first and len(builds) == 1
    assert len(first["training"]) >= 80 and {"id", "title", "url", "memory_kind"} == set(first["training"][0])
    # one run dropped from the file: the cache no longer answers for it
    text = source.read_text()
    cut = text.index("\n  - id: ", text.index("\n  - id: ") + 1)
    source.write_text(text[:text.index("\n  - id: ")] + text[cut:])
    second = cached_data("published-runs", source, build)
    assert len(builds) == 2 and sum(map(len, second.values())) == sum(map(len, first.values())) - 1


def test_a_forged_data_cache_runs_nothing_and_is_rebuilt(cache, tmp_path):
    source = tmp_path / "data.yaml"
    source.write_text("a: 1\n")
    assert cached_data("data", source, lambda: {"a": 1}) == {"a": 1}
    path = entry(cache, "data")
    data = path.read_bytes()
    head = len(MAGIC)
    key = data[head:head + 32]
    evil = pickle.dumps(Evil(tmp_path / "pwned"))
    path.write_bytes(MAGIC + key + _digest(key, evil) + evil)
    assert cached_data("data", source, lambda: {"a": 2}) == {"a": 2}
    assert not (tmp_path / "pwned").exists()


def test_a_second_process_waits_for_the_entry_being_built_instead_of_building_it_again(cache, tmp_path):
    """Two commands asking for the same minutes-long value (the test suite's accuracy tests and the README's
    `validate --cv` on another worker): the second waits for the first's entry; the value is built once."""
    builds = tmp_path / "builds.txt"
    program = ("import sys, time; from engine.calc.rulecache import cached_value\n"
               "def build():\n"
               f"    open({str(builds)!r}, 'a').write('built\\n'); time.sleep(2); return {{'answer': 42}}\n"
               "print(cached_value('probe', lambda: b'the same inputs', build))\n")
    env = {**os.environ, "SIZING_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    first, second = (subprocess.Popen([sys.executable, "-c", program], env=env, stdout=subprocess.PIPE, text=True)
                     for _ in range(2))
    outputs = [p.communicate(timeout=60)[0] for p in (first, second)]
    assert outputs == ["{'answer': 42}\n"] * 2
    assert builds.read_text() == "built\n"
