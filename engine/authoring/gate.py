"""The publication gate: a rule set is used for quotes only once `rules check` is clean (warnings
acknowledged), its examples hold and the validation set's errors do not get worse; a failing edit is held.

What the gate learns about one version of the files (its "facts") is kept in the cache folder by the
files' hash, so it runs once per edit (≈ 4 s: the checks, the examples and one quote of each published
run), never per quote. Which version a rules folder last published is kept there too, with a copy of
its files, so that `sizing quote` and the services quote with that copy while an edit is held.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.files import write_atomic
from engine.paths import PUBLISHED_CASES

GATE_FILE = PUBLISHED_CASES.parent / "gate.yaml"
FOLDERS = ("rules", "catalogs")
_MEMORY: dict[str, Any] = {}          # records and facts when the cache folder is switched off


@dataclass
class Facts:
    """What the gate needs to know about one version of the files; the same for the same files."""

    version: str
    errors: list[str] = field(default_factory=list)          # `rules check` errors, as file:line: message
    held: list[str] = field(default_factory=list)            # warnings nobody acknowledged
    accepted: list[str] = field(default_factory=list)        # warnings acknowledged, with their reasons
    examples: list[str] = field(default_factory=list)        # failing `examples:`
    medians: dict[str, float] = field(default_factory=dict)  # validation set: median |error| per group
    validation: str = ""                                     # why the validation set could not be quoted
    unchecked: str = ""                                      # why the medians were not compared (no set)


@dataclass
class Verdict:
    facts: Facts
    baseline: dict | None = None          # the record of the set published before ({version, medians})
    worse: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)   # rises validation/gate.yaml accepts, with the reason

    @property
    def ok(self) -> bool:
        f = self.facts
        return not (f.errors or f.held or f.examples or f.validation or self.worse)

    def reasons(self) -> list[str]:
        """Why the edit is held, one line each, the kind of problem first."""
        f = self.facts
        return ([f"error: {e}" for e in f.errors] + [f"warning not acknowledged: {w}" for w in f.held]
                + [f"example fails: {x}" for x in f.examples]
                + ([f"validation set: {f.validation}"] if f.validation else [])
                + [f"validation set: {w}" for w in self.worse])


def tolerance() -> tuple[float, dict[str, float], dict[str, dict]]:
    """validation/gate.yaml: how much worse a median may get, the most it may be, and the rises accepted
    on purpose ({group: {up_to, why}})."""
    from engine.calc.yamlfile import load_yaml_file, plain
    doc = plain(load_yaml_file(GATE_FILE, "validation/gate.yaml")) if GATE_FILE.exists() else {}
    accepted = {str(k): {"up_to": float(v["up_to"]), "why": str(v.get("why", ""))}
                for k, v in (doc.get("median_error_accepted") or {}).items()}
    return float(doc.get("median_error_tolerance", 0.01)), \
        {str(k): float(v) for k, v in (doc.get("median_error_at_most") or {}).items()}, accepted


def judge(facts: Facts, baseline: dict | None) -> Verdict:
    """The verdict on `facts` against the set published before (None: the first one)."""
    step, at_most, accepted = tolerance()
    verdict = Verdict(facts, baseline)
    before = (baseline or {}).get("medians") or {}
    for group, after in sorted(facts.medians.items()):
        limit = at_most.get(group)
        risen = group in before and after > before[group] + step
        if risen and group in accepted and after <= accepted[group]["up_to"]:
            verdict.accepted.append(f"{group} median |error| {before[group]:.1%} → {after:.1%}, accepted up to "
                                    f"{accepted[group]['up_to']:.1%}: {accepted[group]['why']}")
        elif risen:
            verdict.worse.append(f"{group} median |error| {before[group]:.1%} → {after:.1%}, worse by more than "
                                 f"the {step:.1%} validation/gate.yaml allows (median_error_tolerance)")
        elif limit is not None and after > limit:
            verdict.worse.append(f"{group} median |error| {after:.1%}, above the {limit:.1%} validation/gate.yaml "
                                 "allows (median_error_at_most)")
    return verdict


# ------------------------------------------------------------------ what quotes use


@dataclass
class Publication:
    """The rule set to quote with, and the verdict on the files on disk when they are not it."""

    ruleset: Any                      # None: nothing published yet and the files on disk are held
    verdict: Verdict | None = None    # None: the files on disk are the published set
    record: dict | None = None        # the published set's record

    @property
    def held(self) -> bool:
        return self.verdict is not None and not self.verdict.ok

    def note(self, rules_dir: Path) -> str:
        """The text of RULES-HELD.txt (and of `quote`'s note): which edit, why, how to publish it."""
        return held_text(self.verdict, self.record, rules_dir) if self.held else ""


def consult(rules_dir: Path, catalogs_dir: Path) -> Publication:
    """The published rule set of these folders: the files themselves once they pass the gate (published
    now if they have not been), else the copy of the last set that passed, with the verdict on the edit."""
    from engine.calc.rulecache import cached_ruleset
    from engine.calc.ruleset import load_ruleset
    from engine.problems import SizingError
    try:
        ruleset = cached_ruleset(load_ruleset, rules_dir, catalogs_dir)
    except SizingError:
        ruleset = None
    return admit(ruleset, rules_dir, catalogs_dir)


def admit(ruleset, rules_dir: Path, catalogs_dir: Path) -> Publication:
    """The gate on the files of these folders (`ruleset` is them loaded, None when they cannot be)."""
    from engine.calc.rulecache import cached_ruleset
    from engine.calc.ruleset import load_ruleset
    from engine.problems import SizingError
    record = last_published(rules_dir)
    if ruleset is not None and record and record.get("version") == ruleset.version:
        return Publication(ruleset, None, record)          # the usual case: one small file read
    copy = published_copy(record)
    verdict = judge(facts_of(rules_dir, catalogs_dir), comparable(record, copy))
    if verdict.ok and ruleset is not None:
        return Publication(ruleset, verdict, publish(rules_dir, catalogs_dir, verdict.facts))
    try:
        fallback = cached_ruleset(load_ruleset, *copy) if copy else None
    except SizingError:
        fallback = None
    return Publication(fallback, verdict, record)


def comparable(record: dict | None, copy: tuple[Path, Path] | None) -> dict | None:
    """The published set's record with its medians on today's validation set and code: a grown or corrected
    validation file changes every median, and an edit is judged against the same figures, not older ones."""
    if record is None or record.get("data") == _code_and_data() or copy is None:
        return record
    return {**record, "medians": facts_of(*copy).medians}


def held_text(verdict: Verdict, record: dict | None, rules_dir: Path) -> str:
    """Which edit is held, why, what quotes use meanwhile and how to publish it, in plain words."""
    if record and record.get("snapshot"):
        effect = (f"Quotes are still made with the last published rule set ({record['version']}, published "
                  f"{record.get('at', '')}); they do not show the edit.")
    else:
        effect = "No rule set has been published yet, so no quote is made until the edit passes."
    reasons = verdict.reasons()
    return (f"The latest edit of the sizing rules or catalogs (rule set {verdict.facts.version}, in {rules_dir}) "
            "is held: it is not used for quotes.\n\n"
            f"{effect}\n\nWhy it is held (each line says the file and line):\n"
            + "".join(f"  - {line}\n" for line in reasons)
            + "\nHow to publish it: fix each line above and save. For a warning whose value is right, write the "
              "reason beside the value and save: `accept: \"list price for the Gulf region\"` on a rule or a "
              "table row, `accept: {price_usd_per_gpu_hour: \"…why…\"}` in a catalog entry. The edit is checked "
              "again by itself and published as soon as it passes. `sizing rules publish` shows the same verdict "
              "beside what the edit changes.\n")


# ------------------------------------------------------------------ facts, once per version


def facts_of(rules_dir: Path, catalogs_dir: Path) -> Facts:
    """The gate's facts about the files in these folders, from the cache when this version was seen."""
    from engine.calc.ruleset import version_of
    version = version_of(Path(rules_dir), Path(catalogs_dir))
    key = f"facts-{version}-{_code_and_data()}"
    known = _load(key)
    if known is not None:
        return Facts(**known)
    facts = _find_facts(Path(rules_dir), Path(catalogs_dir), version)
    _store(key, asdict(facts))
    return facts


def _find_facts(rules_dir: Path, catalogs_dir: Path, version: str) -> Facts:
    from engine.authoring.check import accepted_line, check_folder
    from engine.authoring.examples import run_examples
    checked = check_folder(rules_dir, catalogs_dir)
    facts = Facts(version, [str(p) for p in checked.errors], [str(p) for p in checked.held],
                  [accepted_line(p) for p in checked.accepted])
    if checked.ruleset is None or checked.errors:
        return facts
    facts.examples, _ = run_examples(checked.ruleset)
    if not PUBLISHED_CASES.exists():
        # a deployment's SIZING_HOME without the validation set: the other checks still gate
        facts.unchecked = f"no validation set at {PUBLISHED_CASES}, so its errors were not compared."
        return facts
    try:
        facts.medians = validation_medians(checked.ruleset)
    except Exception as e:  # noqa: BLE001 — a rule set that cannot quote the published runs is held, not a crash
        facts.validation = f"the published runs could not be quoted with it ({type(e).__name__}: {e})."
    return facts


def validation_medians(ruleset) -> dict[str, float]:
    """Median |error| per group of the published runs, with the shipped coefficients (no refit: ≈ 2 s). The table
    is the one `sizing rules publish` then diffs against the published set: quoted once per rule set a process."""
    from engine.authoring.diff import compared_cases
    from engine.problems import Problem, SizingError
    from engine.validation import summarise
    table, unquotable = compared_cases(ruleset, PUBLISHED_CASES)
    if unquotable:
        case, why = next(iter(unquotable.items()))
        raise SizingError([Problem("validation.unquotable", case, why)])
    summary = summarise(table)
    return {group: round(float(s["median_abs_error"]), 6) for group, s in summary.items()}


def _code_and_data() -> str:
    """The engine's code and the validation files: facts found with others are not these facts."""
    from engine.calc.rulecache import _code_digest
    digest = hashlib.sha256(_code_digest())
    for path in (PUBLISHED_CASES, GATE_FILE):
        digest.update(path.read_bytes() if path.exists() else b"")
    return digest.hexdigest()[:12]


# ------------------------------------------------------------------ what a folder published


def last_published(rules_dir: Path) -> dict | None:
    """{version, medians, data, snapshot, at} of the set this rules folder last published, or None."""
    return _load(_record_key(rules_dir))


def publish(rules_dir: Path, catalogs_dir: Path, facts: Facts) -> dict:
    """Record these files as the folder's published set, with a copy to quote from while a later edit is held."""
    snapshot = _snapshot(Path(rules_dir), Path(catalogs_dir), facts.version)
    record = {"version": facts.version, "medians": facts.medians, "data": _code_and_data(),
              "at": time.strftime("%Y-%m-%d %H:%M:%S"),
              "snapshot": str(snapshot) if snapshot else None, "rules_dir": str(Path(rules_dir).resolve())}
    _store(_record_key(rules_dir), record)
    return record


def published_copy(record: dict | None) -> tuple[Path, Path] | None:
    """The rules and catalogs folders of a published set's copy, if it is still there."""
    folder = Path(record["snapshot"]) if record and record.get("snapshot") else None
    if folder is None or not all((folder / name).is_dir() for name in FOLDERS):
        return None
    return folder / "rules", folder / "catalogs"


def _snapshot(rules_dir: Path, catalogs_dir: Path, version: str) -> Path | None:
    root = _folder()
    if root is None:
        return None
    target = root / "published" / version
    if all((target / name).is_dir() for name in FOLDERS):
        return target
    scratch = root / "published" / f".{version}.{time.monotonic_ns()}"
    try:
        for name, source in zip(FOLDERS, (rules_dir, catalogs_dir)):
            (scratch / name).mkdir(parents=True, mode=0o700)
            for path in source.glob("*.yaml"):
                shutil.copy2(path, scratch / name / path.name)
        scratch.rename(target)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)
        return target if target.is_dir() else None
    return target


def _record_key(rules_dir: Path) -> str:
    return "published-" + hashlib.sha256(str(Path(rules_dir).resolve()).encode()).hexdigest()[:16]


def _folder() -> Path | None:
    from engine.calc.rulecache import cache_dir
    folder = cache_dir()
    return folder / "gate" if folder is not None else None


def _load(key: str) -> dict | None:
    folder = _folder()
    if folder is None:
        return _MEMORY.get(key)
    try:
        return json.loads((folder / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return _MEMORY.get(key)


def _store(key: str, value: dict) -> None:
    folder = _folder()
    if folder is None:
        _MEMORY[key] = value
        return
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(folder / f"{key}.json", json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8"),
                     mode=0o600)
    except OSError:
        _MEMORY[key] = value                # a read-only cache: remembered for this process only
