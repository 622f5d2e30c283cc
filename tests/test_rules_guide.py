"""docs/rules.md runs: each section's edits are applied to a copy of the shipped rules and catalogs, and each
command it shows is run on that copy and must print what the guide says it prints."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.cli import main
from tests.conftest import ROOT

GUIDE = ROOT / "docs" / "rules.md"
NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"


@dataclass
class Section:
    title: str
    steps: list = field(default_factory=list)     # ("edit", path, lines) or ("run", command, expected lines)


def sections(text: str) -> list[Section]:
    out, current, block, kind = [], None, None, None
    for line in text.splitlines():
        if block is not None:
            if line.startswith("```"):
                current.steps.extend(_steps(kind, block))
                block = None
            else:
                block.append(line)
        elif line.startswith("## "):
            current = Section(line[3:].strip())
            out.append(current)
        elif current is not None and line.strip() in ("```diff", "```console"):
            block, kind = [], line.strip()[3:]
    return [s for s in out if s.steps]


def _steps(kind: str, lines: list[str]):
    if kind == "diff":
        assert lines[0].startswith("--- "), f"a diff block starts with `--- file`: {lines[0]!r}"
        body = [ln for ln in lines[1:] if not ln.startswith("+++ ")]
        yield ("edit", lines[0][4:].strip(), body)
        return
    command, expected = None, []
    for line in lines:
        if line.startswith("$ "):
            if command:
                yield ("run", command, expected)
            command, expected = line[2:], []
        else:
            expected.append(line)
    if command:
        yield ("run", command, expected)


def apply(home: Path, name: str, body: list[str]) -> None:
    """A diff block: ` ` context, `-` removed, `+` added; a line `...` skips any lines of the file."""
    path = home / name
    text = path.read_text(encoding="utf-8")
    chunks, current = [], []
    for line in body:
        if line.strip() == "...":
            chunks.append(current)
            current = []
        else:
            current.append(line)
    chunks.append(current)
    befores = ["".join(ln[1:] + "\n" for ln in c if ln[:1] in (" ", "-", "")) for c in chunks]
    afters = ["".join(ln[1:] + "\n" for ln in c if ln[:1] in (" ", "+", "")) for c in chunks]
    pattern = "((?:.*\n)*?)".join(re.escape(b) for b in befores)
    match = re.search(pattern, text)
    assert match, f"docs/rules.md: this edit of {name} no longer applies to the shipped file:\n" + "\n".join(body)
    new = afters[0] + "".join(skip + after for skip, after in zip(match.groups(), afters[1:]))
    path.write_text(text[: match.start()] + new + text[match.end():], encoding="utf-8")


def run(home: Path, command: str) -> str:
    words = shlex.split(command)
    assert words[0] == "sizing", command
    args = words[1:]
    if args[:2] in (["rules", "check"], ["rules", "test"], ["rules", "publish"]):
        args.append(str(home))
    elif args[:2] == ["rules", "diff"]:
        args += [str(home), "--against", str(ROOT)]      # the edited copy against the shipped files
    elif args[0] == "explain":
        args = ["explain", str(ROOT / args[1]), *args[2:], "--rules", str(home)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        main(args)
    return out.getvalue()


def line_pattern(expected: str) -> re.Pattern:
    """A line as the guide shows it: `…` stands for anything; numbers (but not percentages) for any number,
    so the guide's examples keep passing when others change a coefficient."""
    parts = []
    for piece in expected.strip().split("…"):
        escaped = _numbers(re.escape(piece))
        parts.append(re.sub(r"(\\ )+", r"\\s+", escaped))
    return re.compile(".*?".join(parts))


def _numbers(escaped: str) -> str:
    # re.escape turns "1,234.5" into "1,234\\.5" and "-3" into "\\-3": match the escaped forms.
    return re.sub(r"(?<![\w\\.])(?:\\[-+])?\d[\d,]*(?:\\\.\d+)?(?![\d%]|\\\.\d|\\%)",
                  lambda m: NUMBER, escaped)


def check_output(out: str, expected: list[str], command: str, title: str) -> None:
    actual = [ln.strip() for ln in out.splitlines()]
    at = 0
    for want in (ln for ln in expected if ln.strip() and ln.strip() != "…"):
        pattern = line_pattern(want)
        found = next((i for i in range(at, len(actual)) if pattern.fullmatch(actual[i])), None)
        assert found is not None, (f"docs/rules.md, “{title}”: `{command}` no longer prints\n  {want.strip()}\n"
                                   f"(after line {at} of its output). It printed:\n{out}")
        at = found + 1


SECTIONS = sections(GUIDE.read_text(encoding="utf-8"))


def test_the_guide_has_its_worked_examples():
    titles = " | ".join(s.title for s in SECTIONS).lower()
    for topic in ("price", "add a gpu", "default", "add a rule", "table", "diff", "unit", "explain", "publish",
                  "family", "gib"):
        assert topic in titles, titles


@pytest.mark.parametrize("section", SECTIONS, ids=[s.title for s in SECTIONS])
def test_each_worked_example_does_what_the_guide_says(tmp_path, section):
    for name in ("rules", "catalogs", "templates"):
        shutil.copytree(ROOT / name, tmp_path / name)
    for step in section.steps:
        if step[0] == "edit":
            apply(tmp_path, step[1], step[2])
        else:
            check_output(run(tmp_path, step[1]), step[2], step[1], section.title)


def test_the_guide_lists_every_allowed_unit():
    from engine.calc.schema import load_schema
    text = GUIDE.read_text(encoding="utf-8")
    listed = text.split("## The allowed units", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([^`]+)` \|", listed, flags=re.M)) == set(load_schema(ROOT / "catalogs").units)


def test_the_matcher_can_fail():
    check_output("cost_total  14,342 → 17,222 USD  (+20.1%)", ["cost_total  1 → 2 USD  (+20.1%)"], "x", "t")
    with pytest.raises(AssertionError):
        check_output("cost_total  14,342 → 17,222 USD  (+20.1%)", ["cost_total  1 → 2 USD  (+20.2%)"], "x", "t")
    with pytest.raises(AssertionError):
        check_output("b\na", ["a", "b"], "x", "t")          # in order


def test_the_guide_names_every_4_bit_format_the_catalog_has():
    """Issue 23: the guide covers FP4 and the block-scaled formats; a format added without a word there fails."""
    from engine.calc.catalogs import load_catalogs
    text = GUIDE.read_text(encoding="utf-8").split("## FP4 and the other 4-bit formats", 1)[1].split("\n## ", 1)[0]
    precisions = load_catalogs(ROOT / "catalogs").precisions
    four_bit = [pid for pid, entry in precisions.items() if entry.get("bytes") == 0.5]
    assert {"fp4", "nvfp4", "mxfp4", "awq"} <= set(four_bit)
    for pid in four_bit:
        assert f"`{pid}`" in text, pid
