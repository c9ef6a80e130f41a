"""Which files a run store may make a reader open: the store itself and its archive.

A store's `trajectory` column, its manifest's `sources` and a record's `replay.mjcf` are
paths written into data, so a crafted or broken store could name any file
(`/home/x/.ssh/...`, `../../etc/...`). Nothing in them is trusted: readers (the dashboard,
`safevla replay` and `figure`) open them only inside these roots:

- the store directory;
- each archive the store was scored from, as its manifest's `sources` name them: a source
  must be a relative path (`safevla score` writes each archive named on its command line
  relative to the store), resolve to a directory or to a record file, and not resolve to
  the filesystem root. A directory allows itself and what lies below it; a record file
  allows that file alone. A source that is absolute, missing, of another kind or not a
  string allows nothing: it is never widened to its parent folder.
- A source that resolves outside the store (`../archive`, the layout `safevla score ARCHIVE
  --out STORE` writes) is followed only into a folder the user named where they read:
  `--archive DIR` of `safevla replay`, `figure` and `dashboard`, or $SAFEVLA_ARCHIVES
  (os.pathsep-separated). The bundled demo's archive is named by the package itself. A
  store cannot name a folder of your disk for you: `../../../../etc` allows nothing. A named
  folder that holds one of the store's sources is open whole (a suite folder scored alone
  shares its recording's `models/` with its siblings).

`ignored_sources` says which sources were left out and why.

Paths are compared after resolving symlinks, so a link inside the store or the archive
that points elsewhere is refused too: the same rule as `safevla score`'s for the links of
an archive (`scoring.records.archive.list_archive`, docs/scoring.md "Symbolic links").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from scoring.errors import RecordError

RECORD_SUFFIXES = (".json", ".jsonl", ".npz")  # scoring.records.archive's (not imported: it loads numpy)
ENV_ARCHIVES = "SAFEVLA_ARCHIVES"  # archive folders a reader may follow a store's sources into, os.pathsep-separated
DEMO_ARCHIVE = Path(__file__).resolve().parents[2] / "assets" / "demo" / "archive"  # named by the package itself


def named_archives(archives: Iterable[str | os.PathLike] | None = None) -> tuple[str, ...]:
    """The resolved folders (or record files) the user named as archives where they read:
    `archives` (`--archive`), then $SAFEVLA_ARCHIVES; the bundled demo's archive always.
    Names that do not exist are left out."""
    env = os.environ.get(ENV_ARCHIVES, "").split(os.pathsep)
    named = [os.path.realpath(p) for p in [*(archives or ()), *env, DEMO_ARCHIVE] if p and os.path.exists(p)]
    return tuple(dict.fromkeys(named))


def malformed_source(store: str | os.PathLike, source) -> str:
    """Why `source` can never be an archive of the store (not a path, absolute, resolving to the
    filesystem root); "" when it is a relative path, whether or not it exists now."""
    if not isinstance(source, str) or not source:
        return f"{source!r:.80} is not a path"
    if "\x00" in source:
        return f"{source!r:.80} holds a NUL byte"
    if os.path.isabs(source) or os.path.splitdrive(source)[0]:
        return f"{source!r:.80} is absolute (a store names its archives relative to itself)"
    path = os.path.realpath(os.path.join(store, source))
    if path == os.path.dirname(path):
        return f"{source!r:.80} resolves to the filesystem root"
    return ""


def source_root(store: str | os.PathLike, source, named: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """(the resolved directory or file a manifest source allows, None if it allows nothing;
    why not, "" when it is allowed). `store` is the store directory, `named` the resolved
    archives the user named (`named_archives`): a source outside the store must lie in one."""
    why = malformed_source(store, source)
    if why:
        return None, why
    path = os.path.realpath(os.path.join(store, source))
    if not os.path.exists(path):
        return None, f"{source!r:.80} does not exist"
    if not (os.path.isdir(path) or (os.path.isfile(path) and os.path.splitext(source)[1] in RECORD_SUFFIXES)):
        return None, f"{source!r:.80} is neither a directory nor a record file"
    if not is_inside(path, (os.path.realpath(store), *named)):
        return None, (f"{source!r:.80} lies outside the store, at {path}, a folder you did not name "
                      f"(to read its trajectories, name it: --archive {path})")
    return path, ""


def manifest_sources(manifest: Mapping | None) -> list:
    """The manifest's `sources` as a list (whatever it holds; a lone value is a list of one)."""
    sources = (manifest or {}).get("sources") or []
    return sources if isinstance(sources, list) else [sources]


def store_roots(store: str | os.PathLike, manifest: Mapping | None,
                archives: Iterable[str | os.PathLike] | None = None) -> tuple[str, ...]:
    """The resolved directories (and record files) the store's paths may point into (the store
    first). `archives`: the folders the user named (`named_archives`)."""
    real, named = os.path.realpath(store), named_archives(archives)
    roots = [real]
    for source in manifest_sources(manifest):
        root, _ = source_root(real, source, named)
        if root is not None and root not in roots:
            roots.append(root)
    # a named archive that holds one of the sources is open whole: the scene models a recording
    # shares (ARCHIVE/models/) sit beside the suite folder that was scored
    roots += [n for n in named if n not in roots and any(is_inside(r, (n,)) for r in roots[1:])]
    return tuple(roots)


def ignored_sources(store: str | os.PathLike, manifest: Mapping | None,
                    archives: Iterable[str | os.PathLike] | None = None) -> list[str]:
    """Why each manifest source that allows nothing was ignored, one text each ("'/etc' is absolute ...")."""
    real, named = os.path.realpath(store), named_archives(archives)
    return [why for why in (source_root(real, s, named)[1] for s in manifest_sources(manifest)) if why]


def read_manifest_quietly(store: str | os.PathLike) -> dict | None:
    """The store's manifest as a dict, or None when it has none or it is unreadable."""
    try:
        manifest = json.loads((Path(store) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def roots_of_store(store: str | os.PathLike, archives: Iterable[str | os.PathLike] | None = None) -> tuple[str, ...]:
    """`store_roots` with the store's own manifest (just the store when it has none or it is unreadable)."""
    return store_roots(store, read_manifest_quietly(store), archives)


def is_inside(path: str | os.PathLike, roots: Iterable[str]) -> bool:
    """`path`, symlinks resolved, is one of `roots` or below one."""
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def trajectory_file(store: str | os.PathLike, rel) -> Path | None:
    """A store row's `trajectory` as a path (a relative one below `store`); None when the row
    names none. Not checked: see `is_inside`."""
    if not isinstance(rel, str) or not rel:
        return None
    p = Path(rel)
    return p if p.is_absolute() else Path(store) / p


def model_file_outside(rec, roots: Iterable[str]) -> str | None:
    """The MJCF file the record's `replay.mjcf` names when it lies outside `roots`, else None
    (a record without replay state or with its model embedded names no file)."""
    if rec.replay is None or rec.replay.mjcf_is_xml:
        return None
    from scoring.records.io import resolve_mjcf

    mjcf = resolve_mjcf(rec)
    return None if is_inside(mjcf, roots) else mjcf


def folder_to_name(path: str | os.PathLike, beside: str | os.PathLike) -> str:
    """The folder holding both `path` and `beside` (a record's scene model and the record), as
    the `--archive` to suggest when the model lies outside what was named; "" for the root."""
    common = os.path.commonpath([os.path.realpath(path), os.path.realpath(beside)])
    return "" if common == os.path.dirname(common) else common


def confined(path: str | os.PathLike, roots: tuple[str, ...], *, what: str, file: str | None = None,
             episode: str | None = None, field: str | None = None, ignored: Iterable[str] = ()) -> Path:
    """`path` if it lies inside `roots`; otherwise a RecordError saying it was refused and why.

    `ignored`: `ignored_sources` of the store, named in the message when there are any. For a
    record's model (`file` is the record), the folder holding both is suggested as `--archive`."""
    if is_inside(path, roots):
        return Path(path)
    note = "; ".join(ignored)
    note = f"; the manifest's sources that allow nothing: {note}" if note else ""
    both = folder_to_name(path, file) if file and field == "replay.mjcf" else ""
    note += f"; if that folder is yours, name it: --archive {both}" if both else ""
    raise RecordError(f"{what} {str(path)!r} is outside the run store and its archive; refused (a store may only "
                      f"point at its own files: {', '.join(roots)}{note})", file=file, episode=episode, field=field)
