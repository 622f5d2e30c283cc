"""The house: each stage is a package, arrows only point down, and no import cycle anywhere."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parent.parent / "engine"

# Higher layers may import lower ones, never the reverse (DESIGN.md §3). A module's layer is
# that of the longest prefix listed here; siblings of one layer may import each other as
# long as no cycle forms.
LAYERS = {
    "engine.cli": 7, "engine.__main__": 7,
    "engine.commands": 6,
    "engine.services": 5, "engine.authoring": 5,   # the authors' tools, beside the services that consult the gate
    "engine.job": 4, "engine.validation": 4,
    "engine.quote": 3,
    "engine.intake": 2,
    "engine.calc": 1,
    "engine.problems": 0, "engine.files": 0, "engine.paths": 0, "engine.contract": 0,
    "engine": 0,
}
TOP_LEVEL_MODULES_AT_MOST = 10
# What calc must not know about: Excel, HTML, mail (DESIGN.md §3).
CALC_MUST_NOT_IMPORT = ("openpyxl", "jinja2", "markupsafe", "imapclient", "smtplib", "imaplib",
                        "email", "watchdog")


def module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """Every module this file imports, at the top, inside functions or for type checking alike."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def engine_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The engine modules among the imports (`from engine.quote import view` names view)."""
    return {name for name in imports(path) if name in known}


def layer(name: str) -> int:
    prefix = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: engine_imports(path, known) - {name} for name, path in known.items()}


def test_every_module_has_a_layer():
    for name in modules():
        assert layer(name) is not None, name


def test_no_module_imports_a_stage_above_it():
    upward = [f"{name} (layer {layer(name)}) imports {target} (layer {layer(target)})"
              for name, targets in graph().items() for target in sorted(targets)
              if layer(target) > layer(name)]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    sorter = graphlib.TopologicalSorter()
    for name, targets in graph().items():
        # a package's __init__ importing its own sub-modules is how packages read; a sub-module
        # importing its parent package (for a name in __init__) would close a loop and counts
        sorter.add(name, *targets)
    try:
        sorter.prepare()
    except graphlib.CycleError as e:
        pytest.fail("import cycle: " + " → ".join(e.args[1]))


def test_calc_knows_nothing_of_excel_html_or_mail():
    leaks = [f"{name} imports {target}" for name, path in modules().items()
             if name.startswith("engine.calc") for target in sorted(imports(path))
             if target.split(".")[0] in CALC_MUST_NOT_IMPORT]
    assert not leaks, "\n".join(leaks)


def test_engine_itself_holds_about_ten_modules():
    top = sorted(p.name for p in ENGINE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES_AT_MOST, top


def test_every_package_says_what_it_holds_and_must_not_know():
    for init in sorted(ENGINE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc.splitlines()[0]) > 20, f"{init} needs a one-line docstring"


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself can fail: a calc module that imports the quote stage is caught."""
    fake = tmp_path / "engine"
    (fake / "calc").mkdir(parents=True)
    (fake / "quote").mkdir()
    for init in (fake / "__init__.py", fake / "calc" / "__init__.py", fake / "quote" / "__init__.py"):
        init.write_text('"""A package docstring long enough to pass."""\n')
    (fake / "quote" / "view.py").write_text("from engine.calc import maths\n")
    (fake / "calc" / "maths.py").write_text("def f():\n    from engine.quote.view import x\n")
    monkeypatch.setattr(__import__(__name__), "ENGINE", fake)
    with pytest.raises(AssertionError, match="engine.calc.maths .layer 1. imports engine.quote.view"):
        test_no_module_imports_a_stage_above_it()
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_no_import_cycle()
