"""The modules setup.py compiles (its ``COMPILED_MODULES``), and their interpreted twins from the same ``.py``.

``TXMQ_INTERPRETED=1`` makes the suite import those modules from their ``.py`` files instead of the built
extensions (``tests/conftest.py``), so the interpreted source can be run through the whole suite too.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
INTERPRETED = os.environ.get("TXMQ_INTERPRETED") == "1"


def compiled_modules() -> dict[str, Path]:
    """Module name -> source path, read from setup.py's ``COMPILED_MODULES`` without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COMPILED_MODULES" for t in node.targets):
            paths = ast.literal_eval(node.value)
            break
    else:
        raise AssertionError("setup.py has no COMPILED_MODULES list")
    return {".".join(Path(p).with_suffix("").parts[1:]): ROOT / p for p in paths}


def load_interpreted(name: str) -> ModuleType:
    """A fresh module run from ``name``'s ``.py`` by the interpreter (its imports of other modules as usual)."""
    source = compiled_modules()[name]
    spec = importlib.util.spec_from_file_location(f"_interpreted_{name.replace('.', '_')}", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` files ahead of their extensions."""

    def __init__(self) -> None:
        self.sources = compiled_modules()

    def find_spec(self, name: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        source = self.sources.get(name)
        return importlib.util.spec_from_file_location(name, source) if source is not None else None


def install_source_first() -> None:
    if INTERPRETED and not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())
