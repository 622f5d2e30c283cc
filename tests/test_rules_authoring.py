"""Edits a rule author makes to copies of the shipped rules and catalogs: each slip, each valid-but-wrong
edit and a changed coefficient get a plain message at the right line, a warning or a diff."""

from __future__ import annotations

import contextlib
import io
import re

import openpyxl
import pytest

from engine.cli import main
from tests.conftest import ROOT

JARGON = ("indicator", "EOF", "token", "invalid syntax", "mapping values", "scanner", "parser",
          "multi-line statement", "expected <", "could not find expected", "did not find expected")


def sizing(*args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([str(a) for a in args])
    return code, out.getvalue()


def edit(home, name, old, new):
    """Replace the first `old` in home/name by `new`; the (1-based) line where `old` began."""
    path = home / name
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} is no longer in {name}: update this test"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return text[: text.index(old)].count("\n") + 1


def sample_block(out, name):
    """The lines `rules diff` prints under one sample."""
    return re.split(r"\n  (?=\S)", out.split(f"\n  {name}:", 1)[1], maxsplit=1)[0]


def check(home):
    return sizing("rules", "check", home)


def line_of(out, words):
    """The `file:line` of the first reported line holding `words`."""
    hit = [row for row in out.splitlines() if words in row]
    assert hit, out
    return hit[0].split(": ", 1)[0]


# --------------------------------------------------------------------- slips, in plain words

@pytest.mark.parametrize("old, new, words, offset", [
    ("    formula: 30", "   formula: 30", "indent this line like the one above (4 spaces, not 3)", 0),
    ("    formula: 30", "      formula: 30", "indent this line like the one above (4 spaces, not 6)", 0),
    ("  - name: cost_total", " - name: cost_total",
     "indent this line like the other items of the list above (2 spaces before the `-`, not 1)", 0),
    ("    formula: 30", "    \tformula: 30", "replace the tab at column 5 with spaces", 0),
    ("    formula: 30", "    formula:30", "put a space after the colon", 0),
    ("label: {en: Days of service priced, zh-TW: 計價服務天數, zh-CN: 计价服务天数}",
     "label: {en: Days of service priced, zh-TW: 計價服務天數, zh-CN: 计价服务天数", "the `{` is never closed: add `}`", 0),
])
def test_yaml_slips_are_said_plainly_at_their_line(home_copy, old, new, words, offset):
    line = edit(home_copy, "rules/cost.yaml", old, new)
    code, out = check(home_copy)
    assert code == 1
    assert line_of(out, words) == f"rules/cost.yaml:{line + offset}"
    assert not any(word in out for word in JARGON), out


def test_a_tab_is_shown_where_it_is(home_copy):
    line = edit(home_copy, "rules/cost.yaml", "    formula: 30", "    \tformula: 30")
    _, out = check(home_copy)
    assert f">   {line} |     →formula: 30" in out, out


@pytest.mark.parametrize("old, new, words", [
    ('if(workload == "online-inference", gpu_count', "if(workload == online-inference, gpu_count",
     'put text in quotes: `workload == "online-inference"`'),
    ("formula: if(workload == \"online-inference\"", "formula: IF(workload == \"online-inference\"",
     "write `if(`, not `IF(`"),
    ("formula: if(workload == \"online-inference\"", "formula: =if(workload == \"online-inference\"",
     "a formula does not start with `=`"),
    ("    formula: job_hours * gpu_count", "    formula: job_hours * gpu_count * 40%", "write 0.4, not 40%"),
    ("    formula: job_hours * gpu_count", "    formula: min(job_hours * gpu_count, 10",
     "the `(` at column 4 is never closed: add `)`"),
    ("    formula: job_hours * gpu_count", "    formula: job_hours * gpu_count)",
     "the `)` at column 22 has no `(` before it"),
    ("    formula: job_hours * gpu_count", "    formula: job_hours * gpu_cuont",
     "unknown name `gpu_cuont`. Did you mean `gpu_count`?"),
    ("    formula: job_hours * gpu_count", "    formula: job_hours gpu_count",
     "this formula cannot be read at column 11, at `gpu_count`"),
    ('when: is_training or workload == "offline-inference"\n    formula: job_hours * gpu_count',
     'when: is_training or workload in [offline-inference]\n    formula: job_hours * gpu_count',
     'put text in quotes: `workload in ["offline-inference"]`'),
])
def test_formula_slips_are_said_plainly_at_the_formula_line(home_copy, old, new, words):
    line = edit(home_copy, "rules/cost.yaml", old, new)
    code, out = check(home_copy)
    assert code == 1
    assert line_of(out, words) == f"rules/cost.yaml:{line}", out
    assert not any(word in out for word in JARGON), out


def test_an_unknown_name_in_a_condition_is_reported_on_the_when_line(home_copy):
    line = edit(home_copy, "rules/cost.yaml", 'when: is_training or workload == "offline-inference"',
                'when: is_trainig or workload == "offline-inference"')
    _, out = check(home_copy)
    assert line_of(out, "unknown name `is_trainig`. Did you mean `is_training`?") == f"rules/cost.yaml:{line}"


# ------------------------------------------------------- valid but wrong: caught by the schema

@pytest.mark.parametrize("name, old, new, words", [
    ("catalogs/gpus.yaml", "    price_usd_per_gpu_hour: 2.49", "    price_usd_per_hour: 2.49",
     "`price_usd_per_hour` of `nvidia-h100-sxm5-80gb` is not a field of catalogs/gpus.yaml. "
     "Did you mean `price_usd_per_gpu_hour`?"),
    ("rules/cost.yaml", 'gpu_spec(gpu, "price_usd_per_gpu_hour")', 'gpu_spec(gpu, "price_per_gpu_hour")',
     'gpu_spec(..., "price_per_gpu_hour"): catalogs/gpus.yaml has no field `price_per_gpu_hour`. '
     "Did you mean `price_usd_per_gpu_hour`?"),
    ("rules/cost.yaml", "    unit: days\n    formula: 30", "    unit: dyas\n    formula: 30",
     "unknown unit `dyas`. Did you mean `days`?"),
    ("rules/cost.yaml", "    unit: currency\n    formula: if(", "    unit: curency\n    formula: if(",
     "unknown unit `curency`. Did you mean `currency`?"),
    ("catalogs/gpus.yaml", "    architecture: hopper", "    architecture: hoper",
     "is `hoper`, which is not one of volta, turing, ampere, ada, hopper"),
])
def test_a_valid_but_wrong_edit_is_an_error_at_its_line(home_copy, name, old, new, words):
    line = edit(home_copy, name, old, new)
    code, out = check(home_copy)
    assert code == 1
    assert line_of(out, words) == f"{name}:{line}", out


def test_a_gpu_without_a_price_is_an_error_at_its_entry(home_copy):
    edit(home_copy, "catalogs/gpus.yaml", "    price_usd_per_gpu_hour: 2.49\n", "")
    code, out = check(home_copy)
    entry = (ROOT / "catalogs" / "gpus.yaml").read_text(encoding="utf-8").splitlines().index(
        "  - id: nvidia-h100-sxm5-80gb") + 1
    assert code == 1
    assert line_of(out, "entry `nvidia-h100-sxm5-80gb` lacks `price_usd_per_gpu_hour`") == f"catalogs/gpus.yaml:{entry}"


def test_an_implausible_price_is_an_error_and_a_warning_with_the_fix(home_copy):
    line = edit(home_copy, "catalogs/gpus.yaml", "    price_usd_per_gpu_hour: 2.49", "    price_usd_per_gpu_hour: 210")
    code, out = check(home_copy)
    # far off the other Hopper datacenter prices (median 2.245 with the 96 GB H100 priced as the SXM5's 2.49;
    # 210 / 2.245 = 94×): an error naming the slip ...
    assert code == 1
    assert line_of(out, "`price_usd_per_gpu_hour` of `nvidia-h100-sxm5-80gb` is 210 USD/GPU-hour, 94× its "
                        "neighbours (median 2.245) — the decimal point two places off? Then write 2.1") \
        == f"catalogs/gpus.yaml:{line}"
    # ... and outside the declared range: a warning naming it
    assert line_of(out, "warning: `price_usd_per_gpu_hour` of `nvidia-h100-sxm5-80gb` is 210 USD/GPU-hour, "
                        "outside the plausible range 0.05–50 USD/GPU-hour") == f"catalogs/gpus.yaml:{line}"


def test_terabytes_typed_into_a_gigabyte_field_are_caught_with_the_fix(home_copy):
    line = edit(home_copy, "catalogs/gpus.yaml", "    memory_bandwidth_gb_s: 3350", "    memory_bandwidth_gb_s: 3.35")
    code, out = check(home_copy)
    assert code == 1
    assert line_of(out, "is 3.35 GB/s, outside the plausible range 50–20,000 GB/s; check the figure. "
                        "If it is in TB/s, write 3,350") == f"catalogs/gpus.yaml:{line}"
    # the other Hopper datacenter parts: median 3,625 GB/s (with the 96 GB H100's 2,400), 3,625 / 3.35 = 1,082 times more
    assert line_of(out, "is 3.35 GB/s, 1/1,082 of its neighbours (median 3,625) — a thousand times off") \
        == f"catalogs/gpus.yaml:{line}"


def test_every_unit_of_the_shipped_rules_is_in_the_list():
    from engine.calc.ruleset import load_ruleset
    rules = load_ruleset(ROOT / "rules", ROOT / "catalogs")
    assert {r.unit for r in rules.rules.values() if r.unit} <= set(rules.catalogs.schema.units)
    assert not rules.lint, rules.lint


# ------------------------------------------------------------------ a changed number: the diff

def test_a_changed_default_shows_in_the_diff(home_copy):
    line = edit(home_copy, "rules/cost.yaml", "    formula: 30\n", "    formula: 60\n")
    code, out = sizing("rules", "diff", home_copy, "--against", ROOT)
    assert code == 0, out
    assert f"rules/cost.yaml:{line}: rule `service_days` formula: 30 → 60" in out
    block = sample_block(out, "llama-70b-online-8xh100.yaml")
    # online serving is priced per day of service: twice the days, twice the cost
    assert re.search(r"cost_total\s+[\d,]+ → [\d,]+ USD\s+\(\+100\.0%\)", block), block
    assert "cost_total" not in sample_block(out, "seed002-bert-base-8xv100.yaml")   # training pays GPU-hours
    assert re.search(r"training\s+[\d.]+% → [\d.]+%\s+\(no figure moved\)", out), out


def test_a_changed_price_moves_the_cost_by_the_same_share(home_copy):
    text = (ROOT / "catalogs" / "gpus.yaml").read_text(encoding="utf-8")
    entry = text[text.index("  - id: nvidia-h100-sxm5-80gb"):]
    price_line = re.search(r"price_usd_per_gpu_hour: ([\d.]+)", entry)
    price = float(price_line.group(1))
    head = entry[: price_line.end()]                  # from the entry's id to its price: unique in the file
    edit(home_copy, "catalogs/gpus.yaml", head, head[: price_line.start(1)] + f"{price * 2:g}")
    code, out = sizing("rules", "diff", home_copy, "--against", ROOT)
    assert code == 0, out
    assert f"gpus `nvidia-h100-sxm5-80gb` price_usd_per_gpu_hour: {price:g} → {price * 2:g}" in out
    block = sample_block(out, "llama-70b-online-8xh100.xlsx")
    assert re.search(r"cost_total\s+[\d,]+ → [\d,]+ USD\s+\(\+100\.0%\)", block), block


def test_a_changed_coefficient_moves_the_validation_errors(home_copy):
    # The memory group is computed from bytes per parameter: a bigger optimizer state moves it.
    edit(home_copy, "catalogs/optimizers.yaml", "    state_bytes: 8 ", "    state_bytes: 12 ")
    code, out = sizing("rules", "diff", home_copy, "--against", ROOT)
    assert code == 0, out
    group = re.search(r"memory\s+([\d.]+)% → ([\d.]+)%\s+\((\d+) of (\d+) figures moved\)", out)
    assert group, out
    assert float(group.group(2)) > float(group.group(1))


def test_diff_against_rules_that_lack_a_gpu_the_cases_name_leaves_those_cases_out_and_says_so(home_copy):
    # The version compared with has no GPU called H100-96GB-500W (an older catalog): the 13 torchtitan
    # cases that name it cannot be quoted with it. The diff compares the rest and says which were left out;
    # it crashed with a traceback before.
    edit(home_copy, "catalogs/gpus.yaml", "aliases: [H100-96GB-500W,", "aliases: [H100-96GB-500W-renamed,")
    code, out = sizing("rules", "diff", ROOT, "--against", home_copy)
    assert code == 0, out
    assert "13 cases left out: one of the versions cannot quote them" in out, out
    assert "no GPU called “H100-96GB-500W”" in out, out
    assert re.search(r"training\s+[\d.]+% → [\d.]+%\s+\(no figure moved\)", out), out


def test_diff_against_a_git_commit_reads_the_commit_not_the_work_tree(home_copy, tmp_path):
    import shutil
    import subprocess
    repo = tmp_path / "repo"
    shutil.copytree(home_copy, repo)
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "rules", "catalogs"], check=True)
    subprocess.run([*git, "commit", "-qm", "shipped"], check=True)
    edit(repo, "rules/cost.yaml", "    formula: 30\n", "    formula: 31\n")
    from engine.authoring.diff import export_git_ref
    rules_dir, catalogs_dir = export_git_ref("HEAD", tmp_path / "export", home=repo)
    assert "    formula: 30\n" in (rules_dir / "cost.yaml").read_text(encoding="utf-8")
    assert (catalogs_dir / "gpus.yaml").is_file()
    assert "formula: 31" in (repo / "rules" / "cost.yaml").read_text(encoding="utf-8")   # work tree untouched
    code, out = sizing("rules", "diff", repo / "rules", "--against", rules_dir)
    assert "rule `service_days` formula: 30 → 31" in out, out


def test_diff_against_an_unknown_ref_says_how_to_do_without_git(home_copy):
    code, out = sizing("rules", "diff", home_copy, "--against", "no-such-branch-xyz")
    assert code == 1
    assert "cannot read `no-such-branch-xyz` from git" in out and "--against DIR" in out


# ------------------------------------------------------------------ explain and the Audit sheet

def test_explain_names_every_rule_and_catalog_line_the_result_depends_on(ruleset):
    """Checked against an independent walk: the rules each formula reads, and the catalog lines of the
    GPU's and model's fields that those formulas name."""
    import ast
    from engine.calc.planner import planned
    from engine.job import read_checked
    sample = ROOT / "samples" / "llama-8b-pretraining-256xh100.zh-CN.xlsx"
    code, out = sizing("explain", sample, "training_time_days", "--full")
    assert code == 0, out
    intake = read_checked(sample, ruleset)
    results, _ = planned(intake, ruleset)           # the quote's own path: the planner's layout, then the rules
    applied = {s.name for s in results.trace if s.formula != "given in the intake"}
    wanted, stack = set(), ["training_time_days"]
    while stack:
        name = stack.pop()
        if name in wanted or name not in ruleset.rules:
            continue
        wanted.add(name)
        rule = ruleset.rules[name]      # a rule that did not apply depends only on its condition
        stack.extend(rule.reads if name in applied else rule.when.names)
    named = set(re.findall(r"^[│├└─ ]*(\w+) = ", out, flags=re.M))
    assert wanted <= named, wanted - named
    # Catalog lines: every gpu_spec/gpu_info call of a rule that ran names its field's line, unless it sits
    # in a later choice of first() or if(), which runs only when needed; and explain names no other line.
    gpu, model = results.inputs["gpu"], results.inputs["model"]
    lines = (ROOT / "catalogs" / "gpus.yaml").read_text(encoding="utf-8").splitlines()
    start = lines.index(f"  - id: {gpu}")
    must, may = set(), set()
    for name in wanted & applied:
        tree = ruleset.rules[name].formula.tree
        optional = {id(n) for call in ast.walk(tree) if isinstance(call, ast.Call)
                    and getattr(call.func, "id", "") in ("first", "_f") for arg in call.args[1:]
                    for n in ast.walk(arg)}
        for node in ast.walk(tree):
            function = getattr(getattr(node, "func", None), "id", "")
            if function in ("gpu_spec", "gpu_info", "dense_peak", "peak_precision", "has_precision"):
                field = node.args[1].value.split(".")[0] if function.startswith("gpu_") else "dense_tflops"
                at = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(f"    {field}:"))
                (may if id(node) in optional else must).add(f"catalogs/gpus.yaml:{at + 1}")
    named_lines = set(re.findall(r"\[(catalogs/gpus\.yaml:\d+)\]", out))
    assert must and must <= named_lines, must - named_lines
    assert named_lines <= must | may, named_lines - must - may
    assert f"models {model} layers" in out or "model = custom" in out
    assert "intake " in out and re.search(r"\[intake \S+!C\d+\]", out)   # intake cells, by sheet and cell


def test_explain_says_when_a_result_does_not_apply():
    code, out = sizing("explain", ROOT / "samples" / "llama-70b-online-8xh100.yaml", "training_time_days")
    assert code == 0
    assert "does not apply: `when: is_training`" in out
    code, out = sizing("explain", ROOT / "samples" / "llama-70b-online-8xh100.yaml", "training_time_days", "--full")
    assert code == 0 and "not applicable: `when: is_training` is false" in out


@pytest.mark.parametrize("said", ["cost_totl", "Total cots", "總成ben"])
def test_explain_a_name_that_matches_nothing_suggests_the_closest(said):
    """Issue 22: "Total cost: no rule or input has this name", and no suggestion."""
    code, out = sizing("explain", ROOT / "samples" / "llama-70b-online-8xh100.yaml", said)
    assert code == 2 and out.strip() == f"{said}: no figure or input has this name. Did you mean `cost_total` (Total cost)?"


def test_the_audit_sheet_links_each_input_to_its_row_and_names_catalog_lines(tmp_path):
    from engine.job import run_job
    job = run_job(ROOT / "samples" / "llama-70b-online-8xh100.xlsx", tmp_path, formats=("audit",))
    assert job.ok, job.problems
    wb = openpyxl.load_workbook(job.outputs[0])         # the salesperson's <stem>.audit.xlsx
    ws = wb[job.quote.m("sheets.audit")]
    header = [c.value for c in ws[1]]
    rule_col, value_col = header.index("Rule") + 1, header.index("Value") + 1
    links_col, sources_col = header.index("Go to each input") + 1, header.index("Catalog and table lines") + 1
    steps = {s.name: s for s in job.results.trace}
    checked = set()
    for row in range(2, ws.max_row + 1):
        step = steps[ws.cell(row=row, column=rule_col).value]
        for col in range(links_col, ws.max_column + 1):
            cell = ws.cell(row=row, column=col)
            if cell.value is None:
                continue
            assert cell.value in step.inputs
            sheet, coord = cell.hyperlink.location.rsplit("!", 1)
            target = wb[sheet.strip("'").replace("''", "'")][coord]
            if cell.value in steps:          # a rule: its own Audit row, showing its value
                assert target.column == value_col
                assert ws.cell(row=target.row, column=rule_col).value == cell.value
            else:                            # an intake input: its row of the intake as received, naming its cell
                listed = [c.value for c in target.parent[target.row]]
                source = job.intake.sources[cell.value]         # a default the form filled in says so
                assert listed[0] == cell.value
                assert listed[4] == (job.quote.m("assumed_source") if source == "default" else source)
            checked.add(cell.value)
        if step.sources:
            text = ws.cell(row=row, column=sources_col).value
            assert all(s.where in text for s in step.sources)
    assert {"gpu_count", "concurrency", "price_per_gpu_hour"} <= checked
    price = ws.cell(row=next(r for r in range(2, ws.max_row + 1)
                             if ws.cell(row=r, column=rule_col).value == "price_per_gpu_hour"), column=sources_col)
    assert re.match(r"catalogs/gpus\.yaml:\d+: gpus nvidia-h100-sxm5-80gb price_usd_per_gpu_hour = ", price.value)
