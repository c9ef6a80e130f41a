"""Storage URIs (`s3://bucket/prefix`, `gs://bucket/prefix`) through pyarrow's filesystem layer.

Used where a Ray rollout writes to storage every node can reach instead of a local path
(`safevla rollout --engine ray --out s3://...`), and by `safevla score` for archives and
stores at URIs (`scoring.store.score_uri`, through local mirrors). Credentials and endpoints come from the
usual places (AWS_* variables, `~/.aws`, GCS application credentials) or from the URI's
query (`s3://bucket/x?endpoint_override=127.0.0.1:9000&scheme=http`), as pyarrow reads them.
"""

from __future__ import annotations

import posixpath
import re

from scoring.errors import SafeVLAError

_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")


def is_uri(text) -> bool:
    """True for 'scheme://...' other than file:// (a local path stays a path)."""
    text = str(text)
    return bool(_SCHEME.match(text)) and not text.startswith("file://")


def open_uri(uri: str):
    """(pyarrow filesystem, root path inside it) for `uri`, or a one-line error."""
    try:
        from pyarrow import fs
        filesystem, root = fs.FileSystem.from_uri(uri)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid/OSError/ValueError here
        raise SafeVLAError(f"cannot open storage URI {uri!r} ({' '.join(str(exc).split())[:200]}); expected "
                           "s3://bucket/prefix or gs://bucket/prefix with credentials set") from None
    return filesystem, root.rstrip("/")


def join(root: str, relpath: str) -> str:
    return posixpath.join(root, str(relpath).replace("\\", "/"))


def existing(filesystem, paths: list[str]) -> set[str]:
    """The subset of `paths` that exist (one listing call for all)."""
    from pyarrow import fs
    if not paths:
        return set()
    infos = filesystem.get_file_info(list(paths))
    return {p for p, info in zip(paths, infos) if info.type != fs.FileType.NotFound}


def write_bytes(filesystem, path: str, data: bytes) -> None:
    """One object PUT: readers see the whole object or none (object stores have no half-written files)."""
    with filesystem.open_output_stream(path) as out:
        out.write(data)
