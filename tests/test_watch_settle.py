"""The "is this file finished?" tracker and the ignore list, on real files with a fake clock."""

import os
import shutil
import subprocess

import pytest

from engine.services.watch.settle import SettleTracker, ignored_reason


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.mark.parametrize("name, ignored", [
    ("~$quote.xlsx", True),
    ("~$QUOTE.XLSX", True),
    (".~lock.quote.xlsx#", True),      # LibreOffice lock file
    (".hidden.yaml", True),
    (".DS_Store", True),
    ("._quote.xlsx", True),            # macOS resource fork on a share
    ("Thumbs.db", True),
    ("thumbs.db", True),
    ("desktop.ini", True),
    ("quote.xlsx.tmp", True),
    ("ABC123.TMP", True),
    ("quote.xlsx.part", True),
    ("quote.xlsx.crdownload", True),
    ("quote.yaml~", True),
    ("quote.xlsx", False),
    ("quote.yaml", False),
    ("report.pdf", False),             # not an intake, but a person dropped it: answer them
    ("empty", False),
])
def test_ignored_names(name, ignored):
    assert (ignored_reason(name) is not None) is ignored


def test_a_file_is_ready_only_after_the_quiet_period(tmp_path, clock):
    tracker = SettleTracker(quiet=1.0, clock=clock)
    f = tmp_path / "a.yaml"
    f.write_text("customer: A\n")
    tracker.changed(f)
    assert tracker.ready() == []
    clock.now += 0.9
    assert tracker.ready() == []
    clock.now += 0.2
    assert tracker.ready() == [f]


def test_growing_file_restarts_the_quiet_period(tmp_path, clock):
    tracker = SettleTracker(quiet=1.0, clock=clock)
    f = tmp_path / "a.yaml"
    f.write_text("customer: A\n")
    tracker.seen(f)
    for _ in range(5):               # a slow writer, seen only by polling (no events)
        clock.now += 0.6
        with open(f, "a") as out:
            out.write("project: P\n")
        assert tracker.ready() == []
    clock.now += 1.0
    assert tracker.ready() == [f]


def test_an_event_restarts_the_quiet_period_even_without_a_visible_change(tmp_path, clock):
    tracker = SettleTracker(quiet=1.0, clock=clock)
    f = tmp_path / "a.yaml"
    f.write_text("x")
    tracker.changed(f)
    clock.now += 0.8
    tracker.changed(f)               # e.g. a same-size rewrite within the mtime resolution
    clock.now += 0.8
    assert tracker.ready() == []
    clock.now += 0.3
    assert tracker.ready() == [f]


def test_a_scan_does_not_delay_a_waiting_file(tmp_path, clock):
    tracker = SettleTracker(quiet=1.0, clock=clock)
    f = tmp_path / "a.yaml"
    f.write_text("x")
    tracker.changed(f)
    clock.now += 0.8
    tracker.seen(f)
    clock.now += 0.3
    assert tracker.ready() == [f]


def test_copy_with_old_timestamp_still_waits(tmp_path, clock):
    """`cp -p` gives the file an old mtime: the quiet period runs on our clock, not the file's."""
    src = tmp_path / "src.yaml"
    src.write_text("customer: A\n")
    os.utime(src, (946684800, 946684800))          # the year 2000
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    subprocess.run(["cp", "-p", str(src), str(inbox)], check=True)
    tracker = SettleTracker(quiet=1.0, clock=clock)
    tracker.changed(inbox / "src.yaml")
    assert tracker.ready() == []
    clock.now += 1.0
    assert tracker.ready() == [inbox / "src.yaml"]


def test_a_replaced_file_counts_as_changed(tmp_path, clock):
    tracker = SettleTracker(quiet=1.0, clock=clock)
    f = tmp_path / "a.yaml"
    f.write_text("one")
    tracker.seen(f)
    clock.now += 0.9
    other = tmp_path / "b.part"
    other.write_text("two")
    st = f.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))   # same size and mtime, new inode
    os.replace(other, f)
    clock.now += 0.2
    assert tracker.ready() == []


def test_vanished_files_are_forgotten(tmp_path, clock):
    tracker = SettleTracker(quiet=0.5, clock=clock)
    f = tmp_path / "a.yaml"
    f.write_text("x")
    tracker.changed(f)
    f.unlink()
    clock.now += 1
    assert tracker.ready() == [] and len(tracker) == 0
    tracker.changed(tmp_path / "never-existed.yaml")
    assert len(tracker) == 0


def test_folders_are_not_files(tmp_path, clock):
    tracker = SettleTracker(quiet=0.5, clock=clock)
    (tmp_path / "sub").mkdir()
    tracker.changed(tmp_path / "sub")
    assert len(tracker) == 0


def test_ready_files_come_oldest_first_and_stay_until_forgotten(tmp_path, clock):
    tracker = SettleTracker(quiet=0.5, clock=clock)
    names = ["c.yaml", "a.yaml", "b.yaml"]
    for name in names:
        (tmp_path / name).write_text(name)
        tracker.changed(tmp_path / name)
        clock.now += 0.1
    clock.now += 1
    assert tracker.ready() == [tmp_path / n for n in names]
    assert tracker.ready() == [tmp_path / n for n in names]
    tracker.forget(tmp_path / "a.yaml")
    assert tracker.ready() == [tmp_path / "c.yaml", tmp_path / "b.yaml"]


def test_move_in_from_elsewhere_is_tracked_under_its_new_name(tmp_path, clock):
    elsewhere = tmp_path / "elsewhere"
    inbox = tmp_path / "inbox"
    elsewhere.mkdir()
    inbox.mkdir()
    (elsewhere / "a.yaml").write_text("customer: A\n")
    tracker = SettleTracker(quiet=0.5, clock=clock)
    shutil.move(str(elsewhere / "a.yaml"), str(inbox / "a.yaml"))
    tracker.changed(inbox / "a.yaml")
    clock.now += 0.6
    assert tracker.ready() == [inbox / "a.yaml"]
