"""A local mirror of a storage-URI prefix (`s3://bucket/prefix`), and syncing it back.

`safevla score` reads archives and writes stores through local paths. For a URI it works
on a mirror: `CACHE/<scheme>/<bucket>/<key>`, so an archive and a store in one bucket keep
the same relative layout as on disk (`../archive/x.npz`) and the Parquet tables are the
bytes a local run of the same layout writes. A key is mirrored only if it stays below the
prefix the user gave: keys with `..`, `.` or empty segments, or backslashes, are refused
one by one (the rest of the archive is still scored). Files already mirrored with the
same size are not downloaded again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from scoring.errors import RecordError, SafeVLAError
from scoring.store.uri import open_uri

CACHE_ENV = "SAFEVLA_CACHE"
GCS_RETRY_ENV = "SAFEVLA_GCS_RETRY_SECONDS"


def cache_root() -> Path:
    """Where mirrors live: $SAFEVLA_CACHE, else $XDG_CACHE_HOME/safevla/remote, else ~/.cache/safevla/remote."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "safevla" / "remote"


class Remote(NamedTuple):
    """A storage URI, its pyarrow filesystem and root key, and its local mirror directory."""

    uri: str
    filesystem: object
    root: str  # "bucket/prefix", no trailing slash
    mirror: Path


def _short(exc: BaseException) -> str:
    """The error on one line, cut to a readable length (pyarrow's GCS/S3 messages run on)."""
    return " ".join(str(exc).split())[:400]


def remote(uri: str, *, cache: Path | None = None) -> Remote:
    """Opens `uri` (one-line error if it cannot be) and names its mirror under `cache`."""
    scheme = uri.split("://", 1)[0].lower()
    _check_key(uri.split("://", 1)[1].split("?", 1)[0].rstrip("/"), what=f"storage URI {uri!r}", fatal=True)
    filesystem, root = open_uri(_bounded_retries(uri, scheme))
    if not root:
        raise SafeVLAError(f"storage URI {uri!r} names no bucket; expected {scheme}://bucket/prefix")
    return Remote(uri.split("?", 1)[0].rstrip("/"), filesystem, root, (cache or cache_root()) / scheme / root)


def _bounded_retries(uri: str, scheme: str) -> str:
    """gs:// retries for 15 minutes by default (seen: no credentials here, no output for minutes);
    bound it to $SAFEVLA_GCS_RETRY_SECONDS (60) unless the URI sets retry_limit_seconds itself."""
    if scheme != "gs" or "retry_limit_seconds=" in uri:
        return uri
    seconds = os.environ.get(GCS_RETRY_ENV, "60")
    return f"{uri}{'&' if '?' in uri else '?'}retry_limit_seconds={seconds}"


def _check_key(rel: str, *, what: str, fatal: bool = False) -> str | None:
    """None if `rel` is a plain relative key, else why not (raised when `fatal`)."""
    parts = rel.split("/")
    why = None
    if "\\" in rel or rel.startswith("/"):
        why = "has a backslash or a leading slash"
    elif any(p in ("", ".", "..") for p in parts):
        why = "has an empty, '.' or '..' segment"
    if why and fatal:
        raise SafeVLAError(f"{what} {why}; expected scheme://bucket/prefix with plain path segments")
    return why


def list_files(rem: Remote) -> list[tuple[str, int]]:
    """(key relative to the root, size) of every object below the root; [] if there is none."""
    from pyarrow import fs
    try:
        infos = rem.filesystem.get_file_info(fs.FileSelector(rem.root, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise SafeVLAError(f"cannot list {rem.uri} ({_short(exc)})") from None
    prefix = rem.root + "/"
    return sorted((i.path[len(prefix):], i.size) for i in infos
                  if i.type == fs.FileType.File and i.path.startswith(prefix))


def is_single_object(rem: Remote) -> bool:
    from pyarrow import fs
    try:
        return rem.filesystem.get_file_info(rem.root).type == fs.FileType.File
    except OSError as exc:
        raise SafeVLAError(f"cannot read {rem.uri} ({_short(exc)})") from None


def pull_archive(rem: Remote, *, scored: Callable[[Path], bool] = lambda path: False
                 ) -> tuple[Path, list[RecordError], int]:
    """Mirrors the archive at `rem` (a prefix or a single object).

    Returns the local path, the refused keys, and how many files were left out because
    `scored(mirror path)` says the store already holds them (not downloaded again).
    """
    problems: list[RecordError] = []
    if is_single_object(rem):
        _download(rem, rem.root, rem.mirror, size=None)
        return rem.mirror, problems, 0
    left_out = 0
    listing = list_files(rem)
    if not listing:
        raise SafeVLAError(f"{rem.uri}: no such archive (no objects below this prefix)")
    rem.mirror.mkdir(parents=True, exist_ok=True)  # listed even when every file is already scored
    for rel, size in listing:
        why = _check_key(rel, what="key")
        if why:
            # named by its mirror path like every other item (scoring.store.score_uri shows them all as URIs)
            problems.append(RecordError(f"object key {why}; refused, it was not read", file=f"{rem.mirror}/{rel}"))
            continue
        if any(part.startswith(".") for part in rel.split("/")):
            continue  # hidden files are not part of an archive (as on disk)
        dest = rem.mirror / rel
        try:
            if dest.is_file() and dest.stat().st_size == size:
                continue  # mirrored by an earlier run
            if scored(dest):
                left_out += 1
                continue
            _download(rem, f"{rem.root}/{rel}", dest, size=size)
        except (OSError, SafeVLAError) as exc:
            problems.append(RecordError(f"cannot download ({_short(exc)})",
                                        file=f"{rem.mirror}/{rel}"))
    return rem.mirror, problems, left_out


def _download(rem: Remote, key: str, dest: Path, *, size: int | None) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    try:
        with rem.filesystem.open_input_stream(key) as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 22):
                out.write(chunk)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SafeVLAError(f"cannot read {rem.uri.split('://')[0]}://{key} ({_short(exc)})") \
            from None
    os.replace(tmp, dest)


def fetch(rem: Remote, rel: str) -> bool:
    """Downloads one object below the root into the mirror; False (and the mirror copy removed) if absent."""
    from pyarrow import fs
    key, dest = f"{rem.root}/{rel}", rem.mirror / rel
    try:
        info = rem.filesystem.get_file_info(key)
    except OSError as exc:
        raise SafeVLAError(f"cannot read {rem.uri}/{rel} ({_short(exc)})") from None
    if info.type != fs.FileType.File:
        dest.unlink(missing_ok=True)
        return False
    _download(rem, key, dest, size=None)
    return True


def push(rem: Remote, rel: str) -> None:
    """Uploads one mirrored file: a single PUT, so readers see the old object or the new one."""
    from scoring.store.uri import write_bytes
    try:
        write_bytes(rem.filesystem, f"{rem.root}/{rel}", (rem.mirror / rel).read_bytes())
    except OSError as exc:
        raise SafeVLAError(f"cannot upload {rem.uri}/{rel} ({_short(exc)}); the store in the "
                           "bucket keeps its previous tables: re-run to finish") from None


def delete(rem: Remote, rel: str) -> None:
    try:
        rem.filesystem.delete_file(f"{rem.root}/{rel}")
    except (OSError, FileNotFoundError):
        pass  # already gone


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of the files below `directory`."""
    out = {}
    for dirpath, _, names in os.walk(directory):
        for name in names:
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            out[os.path.relpath(full, directory).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return out
