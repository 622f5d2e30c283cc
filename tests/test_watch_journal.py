"""The folder service's SQLite journal: stems, crash redo, duplicates, several processes."""

import multiprocessing
import sqlite3

from engine.services.watch.journal import Journal, file_sha256


def test_a_new_job_gets_the_file_stem_and_is_found_again_after_a_crash(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    entry, earlier = journal.begin("t1", "acme.xlsx", "h1", "rs-1")
    assert (entry.stem, entry.status, entry.done, earlier) == ("acme", "working", False, None)
    journal.close()
    again = Journal(tmp_path / "j.sqlite3")                  # a restart
    entry2, _ = again.begin("t1", "acme.xlsx", "h1", "rs-1")
    assert entry2 == entry


def test_stems_never_collide(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    stems = [journal.begin(f"t{i}", "intake.xlsx", f"h{i}", "rs")[0].stem for i in range(3)]
    stems.append(journal.begin("t9", "intake.yaml", "h9", "rs")[0].stem)
    assert stems == ["intake", "intake-2", "intake-3", "intake-4"]


def test_stems_used_on_disk_are_skipped(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    entry, _ = journal.begin("t1", "acme.xlsx", "h1", "rs", taken=lambda stem: stem == "acme")
    assert entry.stem == "acme-2"


def test_same_content_and_rule_set_finds_the_earlier_answer(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    first, _ = journal.begin("t1", "a.xlsx", "same", "rs-1")
    journal.finish("t1", "quoted", ["outbox/a.quote.json"], [], 0.1, "rs-1")
    second, earlier = journal.begin("t2", "b.xlsx", "same", "rs-1")
    assert earlier.token == "t1" and earlier.outputs == ("outbox/a.quote.json",)
    _, other_rules = journal.begin("t3", "c.xlsx", "same", "rs-2")
    assert other_rules is None                       # new rules may give a new answer
    _, other_content = journal.begin("t4", "d.xlsx", "different", "rs-1")
    assert other_content is None


def test_failed_jobs_are_not_answers(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    journal.begin("t1", "a.xlsx", "same", "rs")
    journal.finish("t1", "invalid", ["failed/a.errors.xlsx"], ["Intake!C4: missing"], 0.1, "rs")
    _, earlier = journal.begin("t2", "a.xlsx", "same", "rs")
    assert earlier is None
    assert [e.name for e in journal.recent_problems()] == ["a.xlsx"]
    assert journal.counts() == {"invalid": 1, "working": 1}


def test_a_finished_job_is_done_on_redo(tmp_path):
    journal = Journal(tmp_path / "j.sqlite3")
    journal.begin("t1", "a.xlsx", "h", "rs")
    done = journal.finish("t1", "quoted", ["outbox/a.quote.json"], [], 0.2, "rs")
    entry, earlier = journal.begin("t1", "a.xlsx", "h", "rs")
    assert entry == done and entry.done and earlier is None


def test_wal_mode(tmp_path):
    Journal(tmp_path / "j.sqlite3").close()
    mode = sqlite3.connect(tmp_path / "j.sqlite3").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_file_sha256(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"abc")
    assert file_sha256(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def _claim_many(path, prefix, count, out):
    journal = Journal(path)
    out.put([journal.begin(f"{prefix}{i}", "intake.xlsx", f"{prefix}{i}", "rs")[0].stem
             for i in range(count)])


def test_several_processes_never_get_the_same_stem(tmp_path):
    path = tmp_path / "j.sqlite3"
    Journal(path).close()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(path, p, 25, out)) for p in "abcd"]
    for p in procs:
        p.start()
    stems = [s for _ in procs for s in out.get(timeout=60)]
    for p in procs:
        p.join(timeout=60)
    assert len(stems) == 100 and len(set(stems)) == 100
