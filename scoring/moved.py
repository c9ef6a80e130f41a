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
    # First in line: otherwise the path finder would load a submodule of a moved package
    # (replay.hosts.libero) a second time under its old name, through the alias's __path__.
    sys.meta_path.insert(0, _MovedModules(table))


def forward(package: str, module: str):
    """A module `__getattr__` for a package that took the place of the module `package`.

    The names the old module defined are found on the package, imported from `module` on first
    use; a submodule of the package is imported as such (so `from scoring.store import lock` never
    loads `module`).
    """
    def __getattr__(name: str):
        if not name.startswith("__"):
            if importlib.util.find_spec(f"{package}.{name}") is not None:
                return importlib.import_module(f"{package}.{name}")
            try:
                return getattr(importlib.import_module(module), name)
            except AttributeError:
                pass
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__


def moves() -> dict[str, str]:
    """Every registered move, old path -> new path (for docs and tests)."""
    table: dict[str, str] = {}
    for finder in sys.meta_path:
        if isinstance(finder, _MovedModules):
            table.update(finder.table)
    return table
