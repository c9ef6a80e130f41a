"""Scoring on nodes that cannot see the archive or the store: the bytes travel with the job.

`safevla score --engine ray` first asks every node whether it reads a marker the driver
planted in the store (`scoring.store.ray_connect.on_each_node`). If all do, tasks read the
archive and write the store in place (the fast path). If any does not, each job carries
the bytes of its items. The task rebuilds them under a private folder T at their
absolute paths (JSONL lines at their byte offsets, in a sparse file), scores with the
store at T + STORE, and returns the batch together with the trajectory files it wrote;
the driver writes those into the real store. Store-relative paths are the same under T
as outside it, so the tables are the same bytes either way.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from scoring.records.io import atomic_write_bytes
from scoring.store.job_plan import _Job

MARKER = ".safevla-driver-marker"


def plant_marker(store: str) -> tuple[str, str]:
    path = os.path.join(os.path.abspath(store), MARKER)
    token = secrets.token_hex(16)
    atomic_write_bytes(path, token.encode())
    return path, token


def sees_marker(marker: tuple[str, str]) -> bool:
    try:
        return Path(marker[0]).read_text() == marker[1]
    except OSError:
        return False


def absolute(job: _Job) -> _Job:
    """The job with absolute paths (a node's working directory is not the driver's)."""
    items = []
    for kind, payload, source in job.items:
        if kind == "span":
            path, offset, length = payload
            items.append((kind, (os.path.abspath(path), offset, length),
                          f"{os.path.abspath(path)}:{source.rpartition(':')[2]}"))
        else:
            items.append((kind, os.path.abspath(payload), os.path.abspath(source)))
    return _Job(tuple(items))


def pack(job: _Job) -> tuple:
    """The bytes an (absolute) job reads: ((path, offset, data), ...)."""
    out = []
    for kind, payload, _ in job.items:
        if kind == "span":
            path, offset, length = payload
            with open(path, "rb") as fh:
                fh.seek(offset)
                out.append((path, offset, fh.read(length)))
        else:
            out.append((payload, 0, Path(payload).read_bytes()))
    return tuple(out)


def _under(root: str, path: str) -> str:
    return root + os.path.abspath(path)


def unpack(job: _Job, shipped: tuple, root: str) -> _Job:
    """Writes the shipped bytes under `root` and returns the job with its items moved there."""
    for path, offset, data in shipped:
        dest = Path(_under(root, path))
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "r+b" if dest.exists() else "wb") as fh:
            fh.seek(offset)
            fh.write(data)
    items = []
    for kind, payload, source in job.items:
        if kind == "span":
            path, offset, length = payload
            line = source.rpartition(":")[2]
            items.append((kind, (_under(root, path), offset, length), f"{_under(root, path)}:{line}"))
        else:
            items.append((kind, _under(root, payload), _under(root, source)))
    return _Job(tuple(items))


def run_shipped(job: _Job, shipped: tuple, store: str, copy: bool, registry, run_job):
    """`run_job` on a node without the archive; returns (batch, ((store-relative path, bytes), ...))."""
    import dataclasses
    root = tempfile.mkdtemp(prefix="safevla-ship-")
    try:
        local_store = _under(root, store)
        batch = run_job(unpack(job, shipped, root), local_store, copy, registry)
        written = []
        for dirpath, _, names in os.walk(local_store):
            for name in names:
                full = os.path.join(dirpath, name)
                written.append((os.path.relpath(full, local_store), Path(full).read_bytes()))
        errors = [{k: (v.replace(root, "") if isinstance(v, str) else v) for k, v in e.items()} for e in batch.errors]
        return dataclasses.replace(batch, errors=errors), tuple(written)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def land(store: str, written: tuple) -> None:
    for rel, data in written:
        atomic_write_bytes(os.path.join(store, rel), data)
