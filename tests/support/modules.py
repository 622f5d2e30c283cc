"""Loads a Python file that is not in a package (a script, the samples' maker) as a module, for tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_file(path: Path) -> ModuleType:
    """The module `path` defines, executed once; its `if __name__ == "__main__"` block does not run."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
