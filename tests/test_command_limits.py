"""One-shot commands under the services' limits, and files whose names no disk takes as they are:
real `sizing` processes on real files."""

import subprocess
import sys
import time

import pytest
from support.faults import endless_workbook

from tests.conftest import ROOT

SEED = ROOT / "samples" / "seed002-bert-base-8xv100.yaml"


def sizing(*args, cwd=ROOT, timeout=180):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def endless(tmp_path_factory):
    """A 14 KB workbook whose reading grows by about 100 MB a second, for ever (see faults.py)."""
    path = tmp_path_factory.mktemp("endless") / "endless.xlsx"
    path.write_bytes(endless_workbook())
    return path


@pytest.mark.parametrize("command", [("quote",), ("sweep", "--gpu", "H100"), ("explain", "{}", "cost_total")])
def test_past_the_memory_limit_a_plain_sentence_and_exit_2(command, endless, tmp_path):
    args = [a.format(endless) for a in command] if "{}" in command else [*command[:1], endless, *command[1:]]
    proc = sizing(*args, "--memory-limit-mb", "250", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"{endless}: this workbook needed more than 250 MB of memory to read "
                                   "— is it the sizing intake? (--memory-limit-mb sets the limit)")
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr


def test_past_the_time_limit_the_same_and_the_next_input_is_still_quoted(endless, tmp_path):
    # The limit from a baseline measured now: a whole `sizing quote` of the seed, thrice over, so
    # that the seed itself fits under it on a busy machine (the endless workbook never finishes).
    started = time.monotonic()
    assert sizing("quote", SEED, "-o", tmp_path / "baseline").returncode == 0
    limit = round(max(1.5, 3 * (time.monotonic() - started)), 1)
    proc = sizing("quote", endless, SEED, "-o", tmp_path, "--time-limit-seconds", str(limit),
                  "--memory-limit-mb", "8000")
    assert proc.returncode == 2, proc.stderr
    assert (f"{endless}: this workbook took longer than {limit:g} s to read — is it the sizing intake? "
            "(--time-limit-seconds sets the limit)") in proc.stderr
    assert (tmp_path / "seed002-bert-base-8xv100.quote.json").is_file()      # the next one went on
    assert "Traceback" not in proc.stderr


def test_the_limits_default_to_the_services_and_refuse_nonsense(tmp_path):
    from engine.services.watch.settings import SETTINGS
    help_text = sizing("quote", "--help").stdout
    assert f"(default: {SETTINGS['time_limit_seconds'][0]})" in help_text.replace("\n", " ")
    proc = sizing("quote", SEED, "--time-limit-seconds", "nan")
    assert proc.returncode == 2 and "must be a positive number" in proc.stderr


def test_a_name_of_83_chinese_characters_is_quoted_under_a_short_stem(tmp_path):
    name = ("客戶需求估算表" * 12)[:83] + ".yaml"            # 249 + 5 bytes: the name limit is 255
    (tmp_path / name).write_bytes(SEED.read_bytes())
    proc = sizing("quote", tmp_path / name, "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    # the customer's xlsx, html and json and the salesperson's audit workbook
    assert len(written) == 4 and all(len(n.encode()) <= 255 for n in written), written
    stem = written[0].split(".")[0]
    assert stem.startswith("客戶需求估算表") and len(stem.rpartition("-")[2]) == 8     # the short hash


def test_a_reader_that_goes_away_stops_the_quotes_quietly(tmp_path):
    """`sizing quote a b | head -1`: the second input's process finds the pipe closed; the command
    stops as Unix tools do, without blaming the file."""
    from engine.cli import BROKEN_PIPE
    proc = subprocess.Popen([sys.executable, "-m", "engine", "quote", SEED, SEED.with_suffix(".xlsx"),
                             "-o", tmp_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=180) == BROKEN_PIPE, err
    assert "stopped unexpectedly" not in err and "Traceback" not in err


def test_a_caller_that_sends_stdout_to_a_file_of_its_own_gets_the_output(tmp_path):
    """The worker keeps descriptors 0–2 only: a stream on another descriptor (a file the caller
    opened, pytest's capture) is carried back, not written from the worker to a closed descriptor
    (which ended the worker: "the quoting process stopped unexpectedly", exit status 2)."""
    import contextlib
    from engine.cli import main
    out = tmp_path / "out.txt"
    with out.open("w", encoding="utf-8") as stream, contextlib.redirect_stdout(stream):
        assert stream.fileno() > 2
        code = main(["explain", str(SEED), "gpu_count"])
    assert code == 0
    assert "(gpu_count) = 8" in out.read_text(encoding="utf-8")
