"""`sizing rules check` passes on the shipped rules and points at each planted mistake by file:line."""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def rules_check(home):
    """The command in-process (fast); one test below runs it as a real subprocess."""
    import contextlib
    import io

    from engine.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["rules", "check", str(home)])
    return code, out.getvalue()


def append_rule(home, filename, text):
    """Append a rule at the end of a file's `rules:` list; return the line where it starts."""
    path = home / "rules" / filename
    lines = path.read_text(encoding="utf-8").splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("examples:") or line.startswith("warnings:"))
    lines[end:end] = text.rstrip("\n").splitlines()
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return end + 1


def test_shipped_rules_and_catalogs_are_clean():
    proc = subprocess.run([sys.executable, "-m", "engine", "rules", "check"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok:")


@pytest.mark.parametrize("rule, words", [
    ("  - name: broken_total\n    formula: params * gpu_cuont\n", "unknown name `gpu_cuont`. Did you mean `gpu_count`?"),
    ("  - name: broken_import\n    formula: __import__('os')\n", "no function `__import__`"),
    ("  - name: broken_attr\n    formula: gpu.memory\n", "attribute access"),
    ("  - name: broken_type\n    formula: workload * 2\n", "`*` needs numbers, but `workload` is text"),
    ("  - name: broken_compare\n    formula: gpu_count == \"eight\"\n", "always false"),
    ("  - name: broken_key\n    formula: 1\n    unti: GB\n", "unknown rule field `unti`. Did you mean `unit`?"),
])
def test_each_planted_rule_mistake_is_reported_at_its_file_and_line(home_copy, rule, words):
    line = append_rule(home_copy, "cost.yaml", rule)
    code, out = rules_check(home_copy)
    assert code == 1
    hit = [row for row in out.splitlines() if words in row]
    assert hit, out
    where = hit[0].split(": ", 1)[0]
    assert where.startswith("rules/cost.yaml:")
    # The problem points at the rule (or its offending field) just added.
    assert line <= int(where.rsplit(":", 1)[1]) <= line + 3, out


def test_a_duplicate_rule_names_both_places(home_copy):
    line = append_rule(home_copy, "cost.yaml", "  - name: params\n    formula: 1\n")
    code, out = rules_check(home_copy)
    assert code == 1
    row = next(r for r in out.splitlines() if "rule `params` is defined twice" in r)
    # cost.yaml loads before model.yaml, so the model file's copy is the one reported as second.
    assert row.startswith("rules/model.yaml:") and f"rules/cost.yaml:{line}" in row, row


def test_a_cycle_names_the_loop_the_way_the_formulas_read(home_copy):
    line = append_rule(home_copy, "cost.yaml", "  - name: loop_a\n    formula: loop_b + 1\n"
                                               "  - name: loop_b\n    formula: loop_c * 2\n"
                                               "  - name: loop_c\n    formula: loop_a - 1\n")
    code, out = rules_check(home_copy)
    assert code == 1
    row = next(r for r in out.splitlines() if "in a loop" in r)
    # Whichever rule it starts from, each one named reads the next: a reads b, b reads c, c reads a.
    chain = re.findall(r"`(loop_\w)`", row.split("loop:", 1)[1])
    assert len(chain) == 4 and chain[0] == chain[-1], row
    reads = {"loop_a": "loop_b", "loop_b": "loop_c", "loop_c": "loop_a"}
    assert all(reads[a] == b for a, b in zip(chain, chain[1:])), row
    # reported on the `formula:` line of the first rule named
    start = {"loop_a": line + 1, "loop_b": line + 3, "loop_c": line + 5}[chain[0]]
    assert row.startswith(f"rules/cost.yaml:{start}:"), row


def test_yaml_syntax_error_shows_the_numbered_lines_around_it(home_copy):
    path = home_copy / "rules" / "cost.yaml"
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = next(i for i, line in enumerate(lines) if "formula: 30" in line)
    lines[bad] = "    formula: [30"          # an unclosed bracket
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out = rules_check(home_copy)
    assert code == 1
    assert "rules/cost.yaml:" in out and "the `[` is never closed: add `]`" in out
    assert "formula: [30" in out           # the offending line is quoted with its number


def test_an_empty_rule_file_mid_save_is_reported(home_copy):
    (home_copy / "rules" / "cost.yaml").write_text("", encoding="utf-8")
    code, out = rules_check(home_copy)
    assert code == 1
    assert "rules/cost.yaml:1" in out


def test_a_catalog_mistake_points_at_the_entry(home_copy):
    path = home_copy / "catalogs" / "gpus.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("memory_gb: 80", "memory_gb: eighty", 1), encoding="utf-8")
    bad_line = text[: text.index("memory_gb: 80")].count("\n") + 1
    code, out = rules_check(home_copy)
    assert code == 1
    assert f"catalogs/gpus.yaml:{bad_line}: `memory_gb`" in out, out


def test_rule_examples_pass():
    proc = subprocess.run([sys.executable, "-m", "engine", "rules", "test"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert " 0 failed" in proc.stdout


def test_a_wrong_example_fails_with_its_location(home_copy):
    path = home_copy / "rules" / "cost.yaml"
    path.write_text(path.read_text(encoding="utf-8").replace("expect: {gpu_hours: 80,", "expect: {gpu_hours: 81,"),
                    encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine", "rules", "test", str(home_copy)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1
    assert "rules/cost.yaml:" in proc.stdout and "expected gpu_hours = 81, got 80" in proc.stdout


@pytest.mark.parametrize("content, words", [
    # An alias flood ("billion laughs") would expand to 9**6 values; it is refused, not expanded.
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "too many values"),
    ("rules: !!python/object/apply:os.system [echo hacked]\n", "is not allowed"),
    ("rules: !!python/name:os.system\n", "are not allowed"),
    ("group: cost\ngroup: cost\nrules: []\n", "appears twice"),
    ("\x00\x01\x02 binary junk \xff", "characters that are not text"),
    ("- just\n- a list\n", "a rule file is a mapping"),
])
def test_hostile_rule_files_are_refused_with_a_message(home_copy, content, words):
    (home_copy / "rules" / "cost.yaml").write_text(content, encoding="utf-8", errors="surrogateescape") \
        if "\xff" not in content else (home_copy / "rules" / "cost.yaml").write_bytes(content.encode("latin-1"))
    code, out = rules_check(home_copy)
    assert code == 1
    assert "rules/cost.yaml" in out and words in out, out


def test_a_huge_rule_file_is_refused_before_parsing(home_copy):
    (home_copy / "rules" / "cost.yaml").write_text("# padding\n" * 300_000, encoding="utf-8")
    code, out = rules_check(home_copy)
    assert code == 1
    assert "rules/cost.yaml: the file is" in out and "the limit is" in out


def test_an_alias_shared_by_two_gpus_is_reported(home_copy):
    path = home_copy / "catalogs" / "gpus.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("aliases: [", "aliases: [V100, ", 2), encoding="utf-8")
    code, out = rules_check(home_copy)
    assert code == 1
    assert "alias `V100`" in out and "already used by" in out, out
