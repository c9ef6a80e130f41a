"""Which files a run store may make a reader open: the store itself and its archive.

A store's `trajectory` column and a record's `replay.mjcf` are paths written into data,
so a crafted store or record could name any file (`/home/x/.ssh/...`, `../../etc/...`).
Readers (the dashboard, `safevla replay`) open them only inside these roots:

- the store directory;
- each archive the store was scored from (`manifest.json` "sources", relative to the
  store): a directory, or the directory holding an archive file.

Paths are compared after resolving symlinks, so a link inside the store that points
elsewhere is refused too. A source that resolves to the filesystem root would allow
everything and is ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from scoring.errors import RecordError


def store_roots(store: str | os.PathLike, manifest: Mapping | None) -> tuple[str, ...]:
    """The resolved directories the store's paths may point into (the store first)."""
    store = os.path.realpath(store)
    roots = [store]
    sources = (manifest or {}).get("sources") or []
    for source in sources if isinstance(sources, list) else []:
        if not isinstance(source, str) or not source:
            continue
        path = os.path.realpath(os.path.join(store, source))
        root = path if os.path.isdir(path) else os.path.dirname(path)
        if root != os.path.dirname(root) and root not in roots:  # never "/"
            roots.append(root)
    return tuple(roots)


def roots_of_store(store: str | os.PathLike) -> tuple[str, ...]:
    """`store_roots` with the store's own manifest (just the store when it has none or it is unreadable)."""
    try:
        manifest = json.loads((Path(store) / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = None
    return store_roots(store, manifest if isinstance(manifest, dict) else None)


def is_inside(path: str | os.PathLike, roots: Iterable[str]) -> bool:
    """`path`, symlinks resolved, is one of `roots` or below one."""
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def confined(path: str | os.PathLike, roots: tuple[str, ...], *, what: str, file: str | None = None,
             episode: str | None = None, field: str | None = None) -> Path:
    """`path` if it lies inside `roots`; otherwise a RecordError saying it was refused and why."""
    if is_inside(path, roots):
        return Path(path)
    raise RecordError(f"{what} {str(path)!r} is outside the run store and its archive; refused (a store may only "
                      f"point at its own files: {', '.join(roots)})", file=file, episode=episode, field=field)
