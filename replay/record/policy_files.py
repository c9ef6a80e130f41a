"""User policies from the current directory or a file, in this process and in workers.

`safevla` is a console script: Python puts the script's folder, not the current directory,
on `sys.path`, so `--policy policies:Zero` run next to `policies.py` used to fail with
"No module named 'policies'". A user policy is therefore imported with the current
directory first on the import path, and `file.py:Name` is loaded from the file itself.

Local workers are spawned in the same directory and resolve the same spec the same way.
Ray actors may run elsewhere (another node, another working directory): the policy's
sources travel with the actor's arguments (`policy_bundle`: the file and the .py files
beside it, or the package), are written into a private folder on the actor's
`sys.path` (`install_bundle`) and imported by module name (`ray_policy_spec`). Ray's own
`py_modules` would do the same, but takes local paths only at `ray.init`, not per actor,
so it cannot serve a Ray that is already running.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


def is_file_spec(module_part: str) -> bool:
    return module_part.endswith(".py") or os.sep in module_part or "/" in module_part


def import_policy_module(module_part: str) -> ModuleType:
    """Imports `module_part`: a dotted module name (cwd first on the path) or a .py file path."""
    if is_file_spec(module_part):
        return _load_file(Path(module_part))
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_part)
    except ImportError as exc:
        raise ValueError(f"cannot import policy module {module_part!r} (looked in {cwd} and on the "
                         f"Python path): {exc}") from None


def _load_file(path: Path) -> ModuleType:
    path = path.expanduser().resolve()
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"policy file {str(path)!r} does not exist or is not a .py file")
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) and Path(loaded.__file__).resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    # the file's own folder first, so it can import its neighbours as when run as a script
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ValueError(f"cannot load policy file {str(path)!r}: {type(exc).__name__}: {exc}") from None
    return module


def absolute_spec(spec: str) -> str:
    """`file.py:Name` with the file made absolute (workers may start elsewhere); others unchanged."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep or "://" in spec or not is_file_spec(module_part):
        return spec
    return f"{Path(module_part).expanduser().resolve()}:{attr}"


MAX_BUNDLE_BYTES = 20 * 1024 * 1024


def ray_policy_spec(spec: str) -> tuple[str, list[str]]:
    """The spec Ray actors resolve, and the local file or package folder they need.

    A policy defined in a file or in a module found in the current directory needs its
    source shipped; one that is installed (importable without the current directory)
    does not.
    """
    module_part, sep, attr = spec.rpartition(":")
    if not sep or "://" in spec:
        return spec, []
    if is_file_spec(module_part):
        path = Path(module_part).expanduser().resolve()
        if not path.stem.isidentifier():
            raise ValueError(f"policy file {path.name!r}: --engine ray imports it by its name, "
                             "which must be a Python identifier (rename it, e.g. with underscores)")
        return f"{path.stem}:{attr}", [str(path)]
    top = module_part.split(".")[0]
    if _importable_without_cwd(top):
        return spec, []  # installed: the actors import it as the driver does
    import_policy_module(module_part)
    found = importlib.util.find_spec(top)
    if found is None or not found.origin:
        return spec, []
    origin = Path(found.origin).resolve()
    ship = origin.parent if found.submodule_search_locations else origin
    return spec, [str(ship)]


def policy_bundle(paths: list[str]) -> dict[str, bytes]:
    """The sources to ship: each file with the .py files beside it, each package with its tree.

    Files beside the policy file come along because a policy file usually imports its
    neighbours, as it would when run as a script. Keys are paths relative to the folder
    that goes on the actor's `sys.path`.
    """
    files: dict[str, bytes] = {}
    for p in map(Path, paths):
        if p.is_dir():
            members = [f for f in p.rglob("*.py") if "__pycache__" not in f.parts]
            root = p.parent
        else:
            members = sorted(p.parent.glob("*.py"))
            root = p.parent
        for f in members:
            files[str(f.relative_to(root))] = f.read_bytes()
    size = sum(map(len, files.values()))
    if size > MAX_BUNDLE_BYTES:
        raise ValueError(f"the policy's sources ({', '.join(paths)}) with the .py files beside them make "
                         f"{size / 2**20:.0f} MB; move the policy into a folder of its own, or pip install it")
    return files


def install_bundle(files: dict[str, bytes]) -> str | None:
    """Writes shipped sources into a private folder and puts it first on `sys.path`."""
    if not files:
        return None
    import tempfile
    root = tempfile.mkdtemp(prefix="safevla-policy-")
    for rel, data in files.items():
        target = Path(root) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    sys.path.insert(0, root)
    return root


def _importable_without_cwd(top: str) -> bool:
    """Whether `top` is found by the import system with the current directory off the path."""
    cwd = os.path.realpath(os.getcwd())
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if p != "" and os.path.realpath(p) != cwd]
    try:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is not None and find(top, None) is not None:
                return True
        return False
    finally:
        sys.path[:] = saved
