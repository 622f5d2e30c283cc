"""A real `sizing watch` process on real folders: batches, arrivals, duplicates, crashes, rules."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections import Counter
from datetime import datetime
from pathlib import Path

import openpyxl
import pytest

import engine
from engine.services.log import first_line

REPO = Path(engine.__file__).resolve().parent.parent
QUIET = 0.3
SEED = (REPO / "samples" / "seed002-bert-base-8xv100.yaml").read_text(encoding="utf-8")
SEED_XLSX = REPO / "samples" / "seed002-bert-base-8xv100.xlsx"
IGNORED = ["~$quote.xlsx", "quote.xlsx.tmp", ".hidden.yaml", "Thumbs.db", ".DS_Store",
           "desktop.ini"]


# ---------------------------------------------------------------- inputs

def valid_yaml(n: int) -> bytes:
    return SEED.replace("Example Co.", f"Customer {n}").encode()


def workbook(n: int, **values) -> bytes:
    """The seed-002 sample workbook with cells changed through their defined names."""
    wb = openpyxl.load_workbook(SEED_XLSX)
    for key, value in {"customer": f"Workbook Customer {n}", **values}.items():
        sheet, cell = next(iter(wb.defined_names[key].destinations))
        wb[sheet][cell.replace("$", "")] = value
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


def truncated_zip(n: int) -> bytes:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>" * 200 + str(n))
        z.writestr("xl/workbook.xml", "<workbook/>" * 500)
    return data.getvalue()[: len(data.getvalue()) // 2]


PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"

# kind: (file name pattern, content maker); every name is unique, so every stem is too.
KINDS = {
    "yaml": ("ok-{n}.yaml", valid_yaml),
    "xlsx": ("ok-{n}.xlsx", lambda n: workbook(n)),
    "bad-cell": ("badcell-{n}.xlsx", lambda n: workbook(n, gpu_count="eight")),
    "unknown-key": ("unknown-{n}.yaml", lambda n: valid_yaml(n) + b"gpu_cuont: 8\n"),
    "no-customer": ("nocustomer-{n}.yaml",
                    lambda n: valid_yaml(n).replace(f"customer: Customer {n}".encode(), b"")),
    "syntax": ("syntax-{n}.yaml", lambda n: b"customer: [unclosed\nworkload: pretraining\n"),
    "pdf-as-xlsx": ("renamed-{n}.xlsx", lambda n: PDF),
    "empty": ("empty-{n}.xlsx", lambda n: b""),
    "truncated": ("truncated-{n}.xlsx", truncated_zip),
    "garbage": ("garbage-{n}.yaml", lambda n: bytes(range(256)) * 4),
    "pdf": ("report-{n}.pdf", lambda n: PDF),
}


def _add_intake_hostile_files() -> None:
    """The hostile files of the intake issue (tests/test_intake_hostile.py) join the mix."""
    from test_intake_hostile import HOSTILE
    with tempfile.TemporaryDirectory() as tmp:
        for build, _, _ in HOSTILE:
            folder = Path(tmp) / build.__name__
            folder.mkdir()
            path = build(folder)
            KINDS[f"hostile-{build.__name__}"] = (
                f"{build.__name__}-{{n}}{path.suffix}", lambda n, data=path.read_bytes(): data)


_add_intake_hostile_files()
HOSTILE_KINDS = [k for k in KINDS if k.startswith("hostile-")]
MIX = {"yaml": 80, "xlsx": 20, "bad-cell": 12, "unknown-key": 12, "no-customer": 10,
       "syntax": 8, "pdf-as-xlsx": 6, "empty": 6, "truncated": 6, "garbage": 5, "pdf": 4,
       **{k: 1 if k == "hostile-too_big" else 2 for k in HOSTILE_KINDS}}
assert sum(MIX.values()) == 200, sum(MIX.values())


def make_batch(folder: Path, mix: dict[str, int], start: int = 0) -> dict[str, str]:
    """Write the files into `folder`; returns {file name: kind}."""
    names, n = {}, start
    for kind, count in mix.items():
        pattern, make = KINDS[kind]
        for _ in range(count):
            name = pattern.format(n=n)
            (folder / name).write_bytes(make(n))
            names[name] = kind
            n += 1
    return names


@pytest.fixture(scope="module")
def product(tmp_path_factory):
    """One snapshot of the product's data folders for the module, so that rules being edited
    in the checkout meanwhile cannot make the watcher and the oracle disagree."""
    home = tmp_path_factory.mktemp("product")
    for name in ("rules", "catalogs", "templates"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, home / name)
    return home


@pytest.fixture(scope="module")
def oracle(product, tmp_path_factory):
    """What run_job itself says about one file of each kind: the watcher must agree."""
    from engine.calc.ruleset import load_ruleset
    from engine.job import run_job
    ruleset = load_ruleset(product / "rules", product / "catalogs")
    tmp = tmp_path_factory.mktemp("oracle")
    expected = {}
    for kind, (pattern, make) in KINDS.items():
        name = pattern.format(n=990000)
        (tmp / name).write_bytes(make(990000))
        job = run_job(tmp / name, tmp / "out", ruleset=ruleset)
        stem = Path(name).stem
        expected[kind] = {"name": name, "status": job.status,
                          "suffixes": sorted(p.name[len(stem):] for p in job.outputs),
                          "messages": [p.message.splitlines()[0] for p in job.problems]}
    assert expected["yaml"]["status"] == "quoted" and expected["xlsx"]["status"] == "quoted"
    assert expected["bad-cell"]["status"] == "invalid"
    assert ".errors.xlsx" in expected["bad-cell"]["suffixes"]
    return expected


# ---------------------------------------------------------------- the watcher process

@pytest.fixture
def home(product, tmp_path):
    """This test's own copy of the data folders, safe to edit (SIZING_HOME points at it)."""
    shutil.copytree(product, tmp_path / "home")
    return tmp_path / "home"


class Watcher:
    def __init__(self, root: Path, home: Path, *args: str, quiet: float = QUIET):
        self.root = root
        self.err = root.parent / f"watch-{uuid.uuid4().hex[:6]}.err"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "watch", str(root), "--quiet-seconds", str(quiet),
             "--rescan-seconds", "1", *([] if "--workers" in args else ["--workers", "1"]), *args],
            env={**os.environ, "SIZING_HOME": str(home)}, stdout=subprocess.DEVNULL,
            stderr=self.err.open("w"), start_new_session=True)

    @property
    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def start(home, tmp_path):
    """start(*args) → a running Watcher on tmp_path/svc; every one is stopped at the end."""
    started = []

    def start(*args, root=None, quiet=QUIET):
        w = Watcher(root or tmp_path / "svc", home, *args, quiet=quiet)
        started.append(w)
        return w
    yield start
    for w in started:
        if w.proc.poll() is None:
            os.killpg(w.proc.pid, signal.SIGKILL)
            w.proc.wait(timeout=30)


def log_records(root: Path) -> list[dict]:
    path = root / ".sizing-log.jsonl"
    if not path.exists():
        return []
    # A record is one append of a whole line; a read may meet the service mid-append, so only the lines that
    # already end in a newline are records (the fragment after the last one is still being written)
    complete = path.read_text(encoding="utf-8").split("\n")[:-1]
    return [json.loads(line) for line in complete if line]


def jobs(root: Path) -> list[dict]:
    return [r for r in log_records(root) if r.get("event") == "job"]


def status(root: Path) -> dict:
    try:
        return json.loads((root / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def wait_for(predicate, timeout: float, what: str, *watchers: Watcher):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            details = "\n".join(w.stderr[-3000:] for w in watchers)
            pytest.fail(f"timed out after {timeout} s waiting for {what}\n{details}")
        for w in watchers:
            if w.proc.poll() is not None and w.proc.returncode != 0:
                pytest.fail(f"watcher exited with {w.proc.returncode}:\n{w.stderr[-3000:]}")
        time.sleep(0.05)


def drop(root: Path, files: dict[str, bytes] | list[Path]) -> None:
    """Drop by rename from a staging folder beside the inbox, like a move on the same share."""
    staging = root.parent / "staging"
    staging.mkdir(exist_ok=True)
    (root / "inbox").mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (staging / name).write_bytes(content)
        os.rename(staging / name, root / "inbox" / name)


def claims_left(root: Path) -> list[Path]:
    """The claims still in work/ (a worker's folder / a job's folder / its file). The service removes a job's
    folder when it is done, which may be while this lists it: then it is listed again."""
    while True:
        try:
            return [p for p in (root / "work").glob("*/*/*") if not p.name.startswith(".")]
        except FileNotFoundError:
            continue


def check_batch(root: Path, names: dict[str, str], oracle: dict, exactly_once_in_log=True):
    """Every file ended in archive or failed, with the outputs run_job gives its kind, once."""
    counts = Counter(r["file"] for r in jobs(root))
    if exactly_once_in_log:
        assert {n: c for n, c in counts.items() if c != 1} == {}
        assert set(counts) == set(names)
    quoted_outputs = 0
    for name, kind in names.items():
        expect, stem = oracle[kind], Path(name).stem
        in_archive, in_failed = (root / "archive" / name).exists(), (root / "failed" / name).exists()
        assert in_archive + in_failed == 1, name
        if expect["status"] == "quoted":
            reason = root / "failed" / f"{name}.reason.txt"
            assert in_archive, reason.read_text(encoding="utf-8") if reason.exists() else name
            assert ".audit.xlsx" in expect["suffixes"]        # the salesperson's trail, beside the quote
            for suffix in expect["suffixes"]:
                assert (root / "outbox" / f"{stem}{suffix}").exists(), (name, suffix)
            quoted_outputs += len(expect["suffixes"])
        else:
            assert in_failed, name
            reason = (root / "failed" / f"{name}.reason.txt").read_text(encoding="utf-8")
            for message in expect["messages"]:
                assert message.replace(expect["name"], name) in reason, (name, message)
            for suffix in expect["suffixes"]:
                assert (root / "failed" / f"{stem}{suffix}").exists(), (name, suffix)
    # Nothing processed twice: no extra outputs (a second run would add `<stem>-2` files).
    assert len(os.listdir(root / "outbox")) == quoted_outputs
    assert len(os.listdir(root / "archive")) == sum(
        oracle[k]["status"] == "quoted" for k in names.values())
    assert claims_left(root) == []
    with sqlite3.connect(root / ".sizing-journal.sqlite3") as db:
        rows = db.execute("SELECT name, status FROM jobs").fetchall()
    assert sorted(n for n, _ in rows) == sorted(names)
    assert "working" not in {s for _, s in rows}


# ---------------------------------------------------------------- batches

@pytest.mark.parametrize("observer", ["native", "polling"])
def test_200_files_at_once_all_end_in_archive_or_failed_once(observer, start, tmp_path, oracle):
    root = tmp_path / "svc"
    (root / "inbox").mkdir(parents=True)
    for name in IGNORED:
        (root / "inbox" / name).write_bytes(b"x")
    staging = tmp_path / "staging"
    staging.mkdir()
    names = make_batch(staging, MIX)
    # Half are already there when the service starts (startup scan), half arrive while it runs.
    first = list(names)[::2]
    for name in first:
        os.rename(staging / name, root / "inbox" / name)
    # The polling run also uses two worker processes: the same guarantees must hold.
    w = start(*(["--polling", "--workers", "2"] if observer == "polling" else []))
    for name in names:
        if name not in first:
            os.rename(staging / name, root / "inbox" / name)
    wait_for(lambda: len(jobs(root)) >= len(names), 240, "200 jobs", w)
    time.sleep(3 * QUIET)
    assert w.stop() == 0
    check_batch(root, names, oracle)
    assert sorted(os.listdir(root / "inbox")) == sorted(IGNORED)
    assert os.listdir(root / "failed") and not set(IGNORED) & set(os.listdir(root / "failed"))
    ignored = {r["file"] for r in log_records(root) if r.get("event") == "ignored"}
    assert ignored == set(IGNORED)
    assert status(root)["ruleset"]["files_ok"] is True
    updated = datetime.fromisoformat(status(root)["updated"])         # ISO 8601, with its offset
    assert updated.tzinfo is not None and abs(updated.timestamp() - time.time()) < 120
    assert all(datetime.fromisoformat(e["finished"]) for e in status(root)["last_errors"])
    if observer == "polling":
        assert "PollingObserver" in w.stderr and "InotifyObserver" not in w.stderr
        assert len({r["pid"] for r in jobs(root)}) == 2
        assert claims_left(root) == [] and len(list((root / "work").iterdir())) == 0


def test_a_28_mb_sheet_and_a_100000_deep_json_are_answered_at_once(start, tmp_path):
    """The large and hostile intakes of tests/test_intake_hostile.py, through the folder service."""
    from test_intake_hostile import TEXT_HOSTILE, export_sheet_28mb
    (tmp_path / "build").mkdir()
    hostile = [export_sheet_28mb(tmp_path / "build"), TEXT_HOSTILE[0][0](tmp_path / "build")]
    root = tmp_path / "svc"
    w = start()
    drop(root, {"normal.yaml": valid_yaml(1)})        # the baseline: a real quote, on this machine, now
    wait_for(lambda: len(jobs(root)) >= 1, 60, "the normal file", w)
    drop(root, {p.name: p.read_bytes() for p in hostile})
    wait_for(lambda: len(jobs(root)) >= 3, 60, "both answered", w)
    assert w.stop() == 0
    (normal,), refused = [[r for r in jobs(root) if (r["file"] == "normal.yaml") == want] for want in (True, False)]
    assert normal["outcome"] == "quoted"
    for record in refused:                            # refused sooner than a small intake is quoted
        assert record["outcome"] == "failed" and record["seconds"] < normal["seconds"], (record, normal)
    assert "unpacks to more than 2 MB" in (root / "failed" / "with-export.xlsx.reason.txt").read_text("utf-8")
    assert "nested more than 32 levels" in (root / "failed" / "deep-list.json.reason.txt").read_text("utf-8")
    assert "Traceback" not in w.stderr


# ---------------------------------------------------------------- how files arrive

def test_slow_writes_renames_moves_and_old_timestamps_are_each_taken_once(start, tmp_path, oracle):
    root = tmp_path / "svc"
    w = start(quiet=0.6)
    wait_for(lambda: status(root).get("state") == "running", 60, "the watcher", w)
    inbox, elsewhere = root / "inbox", tmp_path / "elsewhere"
    elsewhere.mkdir()
    content = valid_yaml(1).splitlines(keepends=True)

    with open(inbox / "slow.yaml", "wb") as f:            # a slow writer, pausing < quiet
        for line in content:
            f.write(line)
            f.flush()
            time.sleep(0.08)
    with open(inbox / "renamed.yaml.part", "wb") as f:    # a download that renames when done
        for line in valid_yaml(2).splitlines(keepends=True):
            f.write(line)
            f.flush()
            time.sleep(0.05)
    os.rename(inbox / "renamed.yaml.part", inbox / "renamed.yaml")
    (elsewhere / "moved.yaml").write_bytes(valid_yaml(3))
    shutil.move(elsewhere / "moved.yaml", inbox / "moved.yaml")
    (elsewhere / "old.yaml").write_bytes(valid_yaml(4))
    os.utime(elsewhere / "old.yaml", (978307200, 978307200))   # 2001
    subprocess.run(["cp", "-p", str(elsewhere / "old.yaml"), str(inbox)], check=True)
    (inbox / "folder-not-a-file").mkdir()
    for name in IGNORED:
        (inbox / name).write_bytes(b"x")
    (inbox / "報價單.yaml").write_bytes(valid_yaml(5))
    with open(os.path.join(os.fsencode(inbox), b"caf\xe9\nlatin1.yaml"), "wb") as f:
        f.write(valid_yaml(6))                           # not UTF-8, with a newline

    expected = {"slow.yaml", "renamed.yaml", "moved.yaml", "old.yaml", "報價單.yaml",
                "caf\ufffd_latin1.yaml"}
    wait_for(lambda: len(jobs(root)) >= len(expected), 60, "the jobs", w)
    time.sleep(4 * 0.6)
    assert w.stop() == 0
    check_batch(root, {n: "yaml" for n in expected}, oracle)
    assert sorted(os.listdir(inbox)) == sorted(IGNORED + ["folder-not-a-file"])
    ignored = {r["file"] for r in log_records(root) if r.get("event") == "ignored"}
    assert ignored >= set(IGNORED) | {"renamed.yaml.part", "folder-not-a-file"}


def test_same_content_is_answered_from_the_journal_and_marked(start, tmp_path, oracle):
    root = tmp_path / "svc"
    w = start()
    drop(root, {"a.yaml": valid_yaml(7), "bad.yaml": b"customer: [unclosed\n"})
    wait_for(lambda: len(jobs(root)) == 2, 60, "the first drops", w)
    drop(root, {"b.yaml": valid_yaml(7), "bad-again.yaml": b"customer: [unclosed\n"})
    wait_for(lambda: len(jobs(root)) == 4, 60, "the second drops", w)
    drop(root, {"a.yaml": valid_yaml(7)})                 # same name and content again
    wait_for(lambda: len(jobs(root)) == 5, 60, "the third drop", w)
    assert w.stop() == 0

    outcome = {r["file"] + ("" if i < 4 else "#2"): r for i, r in enumerate(jobs(root))}
    assert outcome["a.yaml"]["outcome"] == "quoted"
    assert outcome["b.yaml"]["outcome"] == "duplicate"
    assert "same content as a.yaml" in outcome["b.yaml"]["note"]
    assert outcome["a.yaml#2"]["outcome"] == "duplicate" and outcome["a.yaml#2"]["stem"] == "a-2"
    assert outcome["bad-again.yaml"]["outcome"] == "failed"     # failures are simply redone
    outbox = root / "outbox"
    for suffix in oracle["yaml"]["suffixes"]:
        original = (outbox / f"a{suffix}").read_bytes()
        assert (outbox / f"b{suffix}").read_bytes() == original
        assert (outbox / f"a-2{suffix}").read_bytes() == original
    note = (outbox / "b.duplicate.txt").read_text(encoding="utf-8")
    assert "same content as a.yaml" in note
    assert sorted(os.listdir(root / "archive")) == ["a-2.yaml", "a.yaml", "b.yaml"]
    assert {"bad.yaml", "bad-again.yaml"} <= set(os.listdir(root / "failed"))
    assert "duplicate" in w.stderr


# ---------------------------------------------------------------- crashes and sharing

def test_kill_9_mid_batch_then_restart_loses_and_repeats_nothing(start, tmp_path, oracle):
    root = tmp_path / "svc"
    mix = {"yaml": 24, "xlsx": 4, "bad-cell": 4, "syntax": 4, "empty": 3, "truncated": 3}
    names = make_batch(tmp_path, mix)
    drop(root, {n: (tmp_path / n).read_bytes() for n in names})
    for crash in range(3):
        w = start()
        done = len(jobs(root))
        wait_for(lambda: len(jobs(root)) >= done + 5 + crash, 120, "some progress", w)
        time.sleep(0.05 * crash)          # land at different points inside a job
        w.kill()
    assert len(jobs(root)) < len(names), "the batch finished before the crash; make it larger"
    w = start()
    wait_for(lambda: not os.listdir(root / "inbox") and not claims_left(root)
             and len(set(r["file"] for r in jobs(root))) >= len(names) - 3, 240, "the rest", w)
    time.sleep(3 * QUIET)
    assert w.stop() == 0
    # A kill between filing the original and writing its log line can cost that line,
    # never the file: the folders and the journal are the record.
    assert max(Counter(r["file"] for r in jobs(root)).values()) == 1
    check_batch(root, names, oracle, exactly_once_in_log=False)


def test_two_watchers_share_one_folder_without_double_processing(start, tmp_path, oracle):
    root = tmp_path / "svc"
    one, two = start(), start("--polling")
    wait_for(lambda: len({r["pid"] for r in log_records(root) if r.get("event") == "started"}) == 2,
             60, "both watchers", one, two)
    names = make_batch(tmp_path, {"yaml": 24, "bad-cell": 4, "syntax": 4, "pdf-as-xlsx": 4})
    drop(root, {n: (tmp_path / n).read_bytes() for n in names})
    wait_for(lambda: len(jobs(root)) >= len(names), 240, "all jobs", one, two)
    time.sleep(3 * QUIET)
    assert one.stop() == 0 and two.stop() == 0
    check_batch(root, names, oracle)
    by_pid = Counter(r["pid"] for r in jobs(root))
    assert set(by_pid) == {one.proc.pid, two.proc.pid}, by_pid


def test_a_second_watcher_adopts_the_claims_of_one_that_died(start, tmp_path, oracle):
    root = tmp_path / "svc"
    names = make_batch(tmp_path, {"yaml": 10})
    doomed = start()
    drop(root, {n: (tmp_path / n).read_bytes() for n in names})
    wait_for(lambda: claims_left(root), 60, "a claim", doomed)
    doomed.kill()
    survivor = start()
    wait_for(lambda: len(set(r["file"] for r in jobs(root))) >= len(names) - 1
             and not claims_left(root) and not os.listdir(root / "inbox"), 120, "the rest", survivor)
    assert survivor.stop() == 0
    check_batch(root, names, oracle, exactly_once_in_log=False)


def test_workers_stop_by_themselves_when_the_main_process_is_killed(start, tmp_path):
    root = tmp_path / "svc"
    w = start("--workers", "2")
    wait_for(lambda: status(root).get("watchers") == 2, 60, "two watchers", w)
    w.kill()                        # the worker is in its own session: only the main one dies
    wait_for(lambda: any(r.get("event") == "stopped" for r in log_records(root)), 30,
             "the worker to stop")
    shown = subprocess.run([sys.executable, "-m", "engine", "watch", str(root), "--status"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 1 and "not running" in shown.stdout


def test_sigterm_finishes_the_current_job_then_exits_0(start, tmp_path):
    root = tmp_path / "svc"
    names = make_batch(tmp_path, {"yaml": 20})
    w = start()
    drop(root, {n: (tmp_path / n).read_bytes() for n in names})
    wait_for(lambda: len(jobs(root)) >= 2, 60, "two jobs", w)
    assert w.stop(timeout=30) == 0
    assert claims_left(root) == []
    finished = set(os.listdir(root / "archive"))
    assert finished == {r["file"] for r in jobs(root)}
    assert finished | set(os.listdir(root / "inbox")) == set(names)    # the rest still waits
    assert log_records(root)[-1]["event"] == "stopped"
    shown = subprocess.run([sys.executable, "-m", "engine", "watch", str(root), "--status"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 1 and "not running" in shown.stdout
    assert f"queue: {len(names) - len(finished)} waiting" in shown.stdout


# ---------------------------------------------------------------- rules hot reload

def editor_save(path: Path, text: str) -> None:
    """Save the way many editors do: write a temporary file, then rename it over the old one."""
    tmp = path.with_name(f".{path.name}.swp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def test_rule_edits_reload_between_jobs_and_a_broken_edit_keeps_the_last_good_set(
        start, home, tmp_path):
    root = tmp_path / "svc"
    w = start()
    v1 = wait_for(lambda: status(root).get("ruleset", {}).get("version"), 60, "rules", w)
    drop(root, {"r1.yaml": valid_yaml(1)})
    wait_for(lambda: len(jobs(root)) == 1, 60, "r1", w)
    assert jobs(root)[0]["ruleset"] == v1 and jobs(root)[0]["outcome"] == "quoted"

    gpus = home / "catalogs" / "gpus.yaml"
    editor_save(gpus, gpus.read_text(encoding="utf-8") + "\n# edited by an architect\n")
    v2 = wait_for(lambda: (v := status(root)["ruleset"]["version"]) != v1 and v, 30, "v2", w)
    drop(root, {"r2.yaml": valid_yaml(2)})
    wait_for(lambda: len(jobs(root)) == 2, 60, "r2", w)
    assert jobs(root)[1]["ruleset"] == v2

    compute = home / "rules" / "compute.yaml"
    good = compute.read_text(encoding="utf-8")
    broken_line = good.count("\n") + 1
    editor_save(compute, good + "  - name: [unclosed\n")
    rules = wait_for(lambda: (r := status(root)["ruleset"]) and not r["files_ok"] and r, 30,
                     "the broken edit", w)
    assert rules["version"] == v2 and rules["running_on_last_good"] is True
    assert any(f"compute.yaml:{broken_line}" in p or "compute.yaml:" in p
               for p in rules["problems"]), rules["problems"]
    assert "compute.yaml:" in w.stderr and f"keeping rule set {v2}" in w.stderr
    # Said where the person who made the edit looks: beside inbox/, in plain words.
    note = wait_for(lambda: (root / "RULES-BROKEN.txt").is_file()
                    and (root / "RULES-BROKEN.txt").read_text(encoding="utf-8"), 30, "the note", w)
    assert "cannot be used" in note and f"last good rule set ({v2})" in note
    assert any(first_line(p) in note for p in rules["problems"]) and "compute.yaml:" in note
    checked = datetime.fromisoformat(rules["checked_at"])
    assert checked.tzinfo is not None and abs(checked.timestamp() - time.time()) < 120
    shown = subprocess.run([sys.executable, "-m", "engine", "watch", str(root), "--status"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "running on this last good set" in shown.stdout
    assert "compute.yaml:" in shown.stdout

    drop(root, {"r3.yaml": valid_yaml(3)})
    wait_for(lambda: len(jobs(root)) == 3, 60, "r3", w)
    assert jobs(root)[2]["ruleset"] == v2 and jobs(root)[2]["outcome"] == "quoted"

    with open(compute, "w", encoding="utf-8"):           # an empty file mid-save ...
        pass
    time.sleep(0.1)
    compute.write_text(good, encoding="utf-8")           # ... then the whole text
    wait_for(lambda: status(root)["ruleset"]["files_ok"], 30, "the repaired rules", w)
    wait_for(lambda: not (root / "RULES-BROKEN.txt").exists(), 30, "the note to go", w)
    assert status(root)["ruleset"]["version"] == v2      # same files, same version
    assert w.stderr.rstrip().endswith(f"rule set {v2} in use")
    assert w.proc.poll() is None
    assert w.stop() == 0


def test_without_a_valid_rule_set_files_wait_in_the_inbox(start, home, tmp_path):
    root = tmp_path / "svc"
    compute = home / "rules" / "compute.yaml"
    good = compute.read_text(encoding="utf-8")
    compute.write_text(good + "  - name: [unclosed\n", encoding="utf-8")
    w = start()
    drop(root, {"waiting.yaml": valid_yaml(1)})
    wait_for(lambda: status(root).get("state") == "waiting for a valid rule set", 60, "waiting", w)
    assert "No quote can be made" in (root / "RULES-BROKEN.txt").read_text(encoding="utf-8")
    time.sleep(4 * QUIET)
    assert os.listdir(root / "inbox") == ["waiting.yaml"] and jobs(root) == []
    editor_save(compute, good)
    wait_for(lambda: jobs(root), 60, "the job", w)
    assert jobs(root)[0]["outcome"] == "quoted"
    assert w.stop() == 0
