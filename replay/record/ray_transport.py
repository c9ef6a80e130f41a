"""Where an env worker's records go: in place on shared storage, or back to the driver through Ray.

The driver plants a marker file (a random token) in the archive before it starts any
worker. A worker that reads the token at the same path shares the driver's filesystem
and writes episodes in place (the fast path, no copy through Ray). A worker that does
not (a cloud node with its own disk, a KubeRay pod) records into memory and returns the
episode's `.npz` bytes and its scene XML with the outcome; the driver writes them into
`--out`. Each worker decides for itself when it starts, so a worker restarted on
another node decides again: records never land where the driver cannot read them.
When `--out` is a storage URI (`s3://`, `gs://`) every record is shipped and the driver
puts it into the bucket through pyarrow (`land_uri`).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from pathlib import Path

from scoring.records.io import atomic_write_bytes

MARKER = ".safevla-driver-marker"


@dataclasses.dataclass(frozen=True)
class Marker:
    path: str   # absolute path on the driver
    token: str


def plant_marker(archive: str | os.PathLike) -> Marker:
    path = Path(archive).resolve() / MARKER
    token = secrets.token_hex(16)
    atomic_write_bytes(path, token.encode())
    return Marker(str(path), token)


NOWHERE = Marker("", "")  # for a storage URI: no worker writes in place, every record is shipped


def remove_marker(marker: Marker | None) -> None:
    if marker is not None and marker.path:
        Path(marker.path).unlink(missing_ok=True)


def sees_driver_files(marker: Marker | None) -> bool:
    """True when this process reads the driver's marker: the archive is shared storage."""
    if marker is None or not marker.path:
        return False
    try:
        return Path(marker.path).read_text() == marker.token
    except OSError:
        return False


def node_label() -> str:
    """'IP/node-id prefix' of the node this process runs on (several nodes may share an IP)."""
    import ray
    return f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:6]}"


@dataclasses.dataclass(frozen=True)
class ShippedEpisode:
    """An episode recorded where the archive is not visible: its files, relative to the archive."""

    relpath: str                          # e.g. libero_spatial/task_0/m/ep_000.npz
    data: bytes                           # the compressed .npz, as save_record writes it
    scenes: tuple[tuple[str, bytes], ...]  # (models/<digest>.xml, XML) the record names


def land_uri(filesystem, root: str, shipped: ShippedEpisode) -> bool:
    """`land` into a storage URI's filesystem (pyarrow): scenes first, the episode unless present."""
    from scoring.store.uri import existing, join, write_bytes
    names = [join(root, name) for name, _ in shipped.scenes]
    have = existing(filesystem, [*names, join(root, shipped.relpath)])
    for path, (_, xml) in zip(names, shipped.scenes):
        if path not in have:
            write_bytes(filesystem, path, xml)
    if join(root, shipped.relpath) in have:
        return False
    write_bytes(filesystem, join(root, shipped.relpath), shipped.data)
    return True


def land(archive: str | os.PathLike, shipped: ShippedEpisode) -> bool:
    """Writes a shipped episode (scenes first) unless it is there already; True if written.

    A retried episode can arrive twice; the first copy stays (the files are the same
    bytes: episode k is deterministic), so every episode is recorded exactly once.
    """
    root = Path(archive)
    for name, xml in shipped.scenes:
        if not (root / name).exists():
            atomic_write_bytes(root / name, xml)
    path = root / shipped.relpath
    if path.exists():
        return False
    atomic_write_bytes(path, shipped.data)
    return True
