"""Faults a folder service left running for months meets, injected for real into a running
`sizing watch`: a disk that fills up, an outbox nobody may write, a journal another program
holds, workbooks that never finish, and kill -9 at random moments. After each, `check_folder`
proves nothing was lost, doubled or blamed on the file."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.faults import (FileSizeLimit, SmallDisk, can_mount, check_folder, endless_workbook,
                            locked_database, unwritable)
from test_watch_service import (check_batch, claims_left, drop, home,  # noqa: F401
                                log_records, make_batch, oracle, product, start, status, valid_yaml,
                                wait_for)

CHAOS_SEED, CHAOS_ROUNDS = 15, 8
MOUNTABLE = can_mount()


def degraded(root: Path, *words: str):
    """Wait-for predicate: the service says it is degraded, and why (any of `words`), in its
    status and in a note in the folder."""
    def said():
        state = status(root)
        reason = (state.get("degraded") or {}).get("reason") or ""
        note = root / "SERVICE-DEGRADED.txt"
        return (state.get("state") == "degraded" and any(w in reason for w in words)
                and note.exists() and reason in note.read_text(encoding="utf-8") and reason)
    return said


def running(start, root: Path, *args: str):
    """A watcher on `root`, once it says it is running."""
    w = start(*args, root=root)
    wait_for(lambda: status(root).get("state") == "running", 60, "the watcher", w)
    return w


def shown_status(root: Path) -> str:
    return subprocess.run([sys.executable, "-m", "engine", "watch", str(root), "--status"],
                          capture_output=True, text=True, timeout=60).stdout


def idle(root: Path, names) -> bool:
    """Every file has its outcome in the journal (the log may miss a line after kill -9),
    nothing waits, and the service says it is running normally."""
    try:
        with sqlite3.connect(f"file:{root / '.sizing-journal.sqlite3'}?mode=ro", uri=True) as db:
            done = {n for n, in db.execute("SELECT name FROM jobs WHERE status != 'working'")}
    except sqlite3.Error:
        return False
    return (set(names) <= done and not claims_left(root) and not os.listdir(root / "inbox")
            and status(root).get("state") == "running")


# ---------------------------------------------------------------- a disk that fills up

@pytest.fixture(params=["tmpfs", "file size limit"])
def disk(request, tmp_path):
    """A small real tmpfs where the tests may mount one (root); everywhere, and here too, the
    kernel's file size limit on the running service — the same failing writes, by other means."""
    if request.param == "tmpfs" and not MOUNTABLE:
        pytest.skip("cannot mount a tmpfs here (not root, or a locked container); "
                    "the file size limit variant covers the same faults")
    volume = (SmallDisk if request.param == "tmpfs" else FileSizeLimit)(tmp_path / "volume")
    yield volume
    volume.close()


def test_a_full_disk_makes_files_wait_and_they_go_through_once_it_is_freed(disk, start):
    root = disk.path / "svc"
    w = running(start, root)
    staging = disk.path / "staging"                        # on the same disk: drops are renames
    staging.mkdir()
    names = make_batch(staging, {"xlsx": 6, "yaml": 2})
    disk.fill(w.proc.pid)
    for name in names:
        os.rename(staging / name, root / "inbox" / name)

    reason = wait_for(degraded(root, *disk.words), 60, "the service to say the disk is full", w)
    assert str(root) in reason
    assert "degraded: " in shown_status(root)
    time.sleep(1.5)                                        # retried, still full: nothing is failed
    assert os.listdir(root / "failed") == []
    assert len(os.listdir(root / "inbox")) + len(claims_left(root)) + len(os.listdir(root / "archive")) \
        == len(names)

    disk.free(w.proc.pid)
    wait_for(lambda: idle(root, names) and not (root / "SERVICE-DEGRADED.txt").exists(), 90,
             "the files to go through by themselves", w)
    assert w.stop() == 0
    assert set(check_folder(root, list(names)).values()) == {"archive"}
    assert status(root)["degraded"] is None and "degraded" not in shown_status(root)


# ---------------------------------------------------------------- folders and journal

# Each: the fault (given the service folder), and what the service must call it.
FOLDER_FAULTS = {
    "an outbox nobody may write": (lambda root: unwritable(root / "outbox"),
                                   lambda root: str(root / "outbox")),
    "a journal locked by another program": (
        lambda root: locked_database(root / ".sizing-journal.sqlite3"),
        lambda root: f"the journal {root / '.sizing-journal.sqlite3'} is locked by another program"),
}


@pytest.mark.parametrize("fault", FOLDER_FAULTS)
def test_files_wait_out_a_folder_fault_and_go_through_once_it_is_fixed(fault, start, tmp_path):
    root = tmp_path / "svc"
    w = running(start, root)
    inject, words = FOLDER_FAULTS[fault]
    names = {f"wait-{n}.yaml": valid_yaml(n) for n in range(3)}
    with inject(root):
        drop(root, names)
        wait_for(degraded(root, words(root)), 60, f"the service to name {fault}", w)
        assert words(root) in shown_status(root)
        time.sleep(1.0)                                    # retried, still at fault
        assert os.listdir(root / "failed") == [] and os.listdir(root / "archive") == []
    wait_for(lambda: idle(root, names) and not (root / "SERVICE-DEGRADED.txt").exists(), 60,
             "the files to go through", w)
    assert w.stop() == 0
    assert set(check_folder(root, list(names)).values()) == {"archive"}


# ---------------------------------------------------------------- per-job limits

@pytest.fixture(scope="module")
def endless() -> bytes:
    return endless_workbook()      # never finishes; grows by about 100 MB a second


def test_two_stuck_workbooks_do_not_hold_up_the_file_behind_them(start, tmp_path, endless):
    root = tmp_path / "svc"
    # The baseline: how long a normal file takes from drop to archive on this machine, now.
    w = running(start, root)
    dropped = time.monotonic()
    drop(root, {"baseline.yaml": valid_yaml(0)})
    wait_for(lambda: (root / "archive" / "baseline.yaml").exists(), 60, "the baseline file", w)
    baseline = time.monotonic() - dropped
    assert w.stop() == 0
    # The stuck files' limit, well past what the normal file needs even on a busy machine (two
    # endless workbooks take the CPU), so the order below says it did not wait for them.
    limit = max(6.0, 8 * baseline)
    # Memory left ample, so that time is the limit met (the memory one is the next test's).
    w = start("--workers", "2", "--time-limit-seconds", f"{limit:.1f}", "--memory-limit-mb", "4000")
    wait_for(lambda: status(root).get("watchers") == 2 and status(root).get("state") == "running",
             60, "two watchers", w)
    drop(root, {"endless-1.xlsx": endless, "endless-2.xlsx": endless})
    wait_for(lambda: len(status(root).get("in_progress") or []) == 2, 30, "both endless workbooks taken", w)
    drop(root, {"normal.yaml": valid_yaml(1)})
    wait_for(lambda: (root / "archive" / "normal.yaml").exists() or list((root / "failed").iterdir()),
             60, "the normal file or the stuck ones", w)
    assert (root / "archive" / "normal.yaml").exists() and os.listdir(root / "failed") == [], \
        f"the normal file waited for the stuck ones (baseline {baseline:.1f} s, their limit {limit:.1f} s)"

    names = ["baseline.yaml", "endless-1.xlsx", "endless-2.xlsx", "normal.yaml"]
    wait_for(lambda: idle(root, names), 60, "the endless workbooks to stop", w)
    assert w.stop() == 0
    ended = check_folder(root, names)
    assert ended == {"baseline.yaml": "archive", "endless-1.xlsx": "failed", "endless-2.xlsx": "failed",
                     "normal.yaml": "archive"}
    reason = (root / "failed" / "endless-1.xlsx.reason.txt").read_text(encoding="utf-8")
    assert f"this workbook took longer than {float(f'{limit:.1f}'):g} s to read — is it the sizing intake?" in reason
    assert "not in your file" not in reason                  # said as the file's matter, plainly


def test_a_workbook_past_the_memory_limit_fails_plainly_and_the_next_one_flows(start, tmp_path,
                                                                              endless):
    root = tmp_path / "svc"
    w = start("--memory-limit-mb", "220")
    drop(root, {"endless.xlsx": endless})
    drop(root, {"after.yaml": valid_yaml(2)})
    wait_for(lambda: idle(root, ["endless.xlsx", "after.yaml"]), 60, "both files", w)
    assert w.stop() == 0
    assert check_folder(root, ["endless.xlsx", "after.yaml"]) == {"endless.xlsx": "failed",
                                                               "after.yaml": "archive"}
    reason = (root / "failed" / "endless.xlsx.reason.txt").read_text(encoding="utf-8")
    assert "needed more than 220 MB of memory to read — is it the sizing intake?" in reason


# ---------------------------------------------------------------- kill -9, again and again

def test_kill_9_at_random_moments_loses_and_repeats_nothing(start, tmp_path, oracle):
    rng = random.Random(CHAOS_SEED)
    root = tmp_path / "svc"
    mix = {"yaml": 14, "xlsx": 4, "bad-cell": 3, "syntax": 2, "truncated": 1}
    pool = make_batch(tmp_path, mix)
    order = list(pool)
    rng.shuffle(order)
    per_round = len(order) // CHAOS_ROUNDS
    for n in range(CHAOS_ROUNDS):
        w = start(*(["--workers", "2"] if rng.random() < 0.4 else []))
        batch = order[n * per_round:(n + 1) * per_round]
        drop(root, {name: (tmp_path / name).read_bytes() for name in batch})
        time.sleep(rng.uniform(0.2, 2.0))                  # at start-up, mid-quote, mid-filing …
        w.kill()
    w = start()
    # Only once this watcher is up: a worker of the last round may still be finishing.
    wait_for(lambda: any(r.get("event") == "started" and r.get("pid") == w.proc.pid
                         for r in log_records(root)), 60, "the last watcher", w)
    wait_for(lambda: idle(root, order), 120, f"the rest (seed {CHAOS_SEED})", w)
    assert w.stop() == 0
    check_folder(root, order)
    check_batch(root, pool, oracle, exactly_once_in_log=False)


# ---------------------------------------------------------------- names no disk takes as they are

LONG = "客戶需求估算表" * 12                 # 84 Chinese characters, 252 bytes: the name limit is 255


def test_long_names_refused_characters_and_names_that_collide_once_shortened_are_all_answered(
        start, tmp_path):
    from test_watch_service import workbook
    root = tmp_path / "svc"
    w = running(start, root)
    names = {
        f"{LONG[:74]}.yaml": valid_yaml(1),                       # 222 + 5 bytes: the 227
        f"{LONG[:83]}.xlsx": workbook(2, gpu_count="eight"),      # invalid: its errors workbook too
        f"{LONG[:80]}甲.yaml": valid_yaml(3),                     # these two share their first 80
        f"{LONG[:80]}乙.yaml": valid_yaml(4),                     # characters, far past any cut
        'a:b?c*<d>|e"f\\g.yaml': valid_yaml(5),                   # refused on Windows shares
        "x." + "y" * 200: valid_yaml(6),                          # a "suffix" of 200 bytes: not an intake
    }
    drop(root, names)
    wait_for(lambda: idle(root, names), 90, "every file answered", w)
    assert w.stop() == 0
    ended = check_folder(root, list(names))
    assert [n for n, where in ended.items() if where == "failed"] == [f"{LONG[:83]}.xlsx", "x." + "y" * 200]
    stems = {p.name.split(".")[0] for p in (root / "outbox").iterdir()}
    assert len(stems) == 4, stems                     # the two look-alikes got stems of their own
    for path in [*(root / "outbox").iterdir(), *(root / "failed").iterdir(), *(root / "archive").iterdir()]:
        assert len(path.name.encode()) <= 255 and not set('<>:"\\|?*') & set(path.name), path.name
    assert any(p.name.endswith(".errors.xlsx") for p in (root / "failed").iterdir())
    assert "Errno" not in (root / ".sizing-log.jsonl").read_text(encoding="utf-8")


# ---------------------------------------------------------------- links, pipes and devices

def test_links_pipes_and_devices_are_moved_aside_with_a_note_never_followed_or_opened(start, tmp_path):
    import stat
    root = tmp_path / "svc"
    w = running(start, root)
    secret = tmp_path / "secret.yaml"           # a valid intake the service must never read via a link
    secret.write_bytes(valid_yaml(7))
    staging = tmp_path / "staging"
    staging.mkdir()
    os.symlink(secret, staging / "link.yaml")
    os.symlink(tmp_path / "gone.yaml", staging / "dangling.yaml")
    os.symlink(tmp_path, staging / "folder-link.xlsx")
    os.mkfifo(staging / "pipe.xlsx")
    specials = ["link.yaml", "dangling.yaml", "folder-link.xlsx", "pipe.xlsx"]
    if os.geteuid() == 0:                       # only root may make a device node
        os.mknod(staging / "device.yaml", 0o600 | stat.S_IFCHR, os.makedev(1, 3))   # /dev/null's
        specials.append("device.yaml")
    for name in specials:
        os.rename(staging / name, root / "inbox" / name)
    drop(root, {"plain.yaml": valid_yaml(8)})
    names = [*specials, "plain.yaml"]
    wait_for(lambda: idle(root, names), 60, "every entry answered", w)
    assert w.stop() == 0
    ended = check_folder(root, names)
    assert ended == {**dict.fromkeys(specials, "failed"), "plain.yaml": "archive"}
    assert os.readlink(root / "failed" / "link.yaml") == str(secret)         # moved as itself
    assert stat.S_ISFIFO(os.lstat(root / "failed" / "pipe.xlsx").st_mode)
    assert not list((root / "outbox").glob("link*")) and secret.read_bytes() == valid_yaml(7)
    for name, kind in [("link.yaml", "a symbolic link"), ("pipe.xlsx", "a named pipe (FIFO)")]:
        note = (root / "failed" / f"{name}.reason.txt").read_text(encoding="utf-8")
        assert f"{name} is {kind}, not a file: the service does not follow links" in note
        assert any(r.get("event") == "refused" and r.get("file") == name for r in log_records(root))


# ---------------------------------------------------------------- formulas dropped into the inbox

def test_formulas_in_dropped_workbooks_never_reach_an_output(start, tmp_path):
    """A link formula in the Customer cell (saved with its result, as LibreOffice saves it) is
    refused at its cell; a calculated GPU count counts by its saved result, and the DDE call
    beside the form reaches the quote workbook as its value."""
    from openpyxl import load_workbook
    from test_intake_kit import BASE, filled, with_cached_formula
    from test_intake_values import DDE, LINK, cached_dde, formulas_in
    build = tmp_path / "build"
    build.mkdir()
    link = with_cached_formula(filled(build, BASE, typed={"customer": LINK}, name="l.xlsx"),
                               build / "link.xlsx", LINK[1:], "click me")
    counted = filled(build, BASE, typed={"gpu_count": "=4*2"}, name="c.xlsx")
    wb = load_workbook(counted)
    wb["Intake"]["H2"] = DDE
    wb.save(counted)
    counted = cached_dde(with_cached_formula(counted, build / "c2.xlsx", "4*2", "8"), build / "counted.xlsx")
    root = tmp_path / "svc"
    w = running(start, root)
    drop(root, {"link.xlsx": link.read_bytes(), "counted.xlsx": counted.read_bytes()})
    wait_for(lambda: idle(root, ["link.xlsx", "counted.xlsx"]), 60, "both workbooks", w)
    assert w.stop() == 0
    assert check_folder(root, ["link.xlsx", "counted.xlsx"]) == {"link.xlsx": "failed", "counted.xlsx": "archive"}
    reason = (root / "failed" / "link.xlsx.reason.txt").read_text(encoding="utf-8")
    assert f"Customer holds a formula ({LINK}); only number fields may be calculated" in reason
    assert formulas_in(root / "outbox" / "counted.quote.xlsx") == []
    assert load_workbook(root / "outbox" / "counted.quote.xlsx")["Intake"]["H2"].value == 0
