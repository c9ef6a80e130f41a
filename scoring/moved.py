"""Old module paths that still import after a module moved (issue 17), with a warning.

A package registers a table {old dotted path: new dotted path}; `import OLD` then returns the
new module object itself (the same object, so classes, isinstance checks and pickles made
before the move keep working) and warns once with a DeprecationWarning naming the new path.
Nothing is left in the tree at the old path. Imports only the standard library.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Mapping

class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder + loader over one table of moves. It answers only for the table's old names."""

    def __init__(self, table: Mapping[str, str]):
        self.table = dict(table)
        self._real_specs: dict[str, object] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.table:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = self.table[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there (the old path will go away)",
                      DeprecationWarning, stacklevel=2)  # warnings skips importlib's frames: the import line
        module = importlib.import_module(new)
        self._real_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system has just stamped the alias's spec on the real module: put its own back.
        module.__spec__ = self._real_specs.pop(module.__spec__.name)


def install(table: Mapping[str, str]) -> None:
    """Make every old path in `table` import as its new module (once per table; idempotent)."""
    for finder in sys.meta_path:
        if isinstance(finder, _MovedModules):
            finder.table.update(table)
            return
    sys.meta_path.append(_MovedModules(table))


def moves() -> dict[str, str]:
    """Every registered move, old path -> new path (for docs and tests)."""
    table: dict[str, str] = {}
    for finder in sys.meta_path:
        if isinstance(finder, _MovedModules):
            table.update(finder.table)
    return table
