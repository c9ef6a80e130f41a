"""`safevla score` with archives or the store at storage URIs (`s3://`, `gs://`).

The scoring itself is `scoring.store.write.score_archive` (or its Ray engine) on local mirrors
(`scoring.store.uri_mirror`): remote archives are downloaded into the cache, a remote store's
tables are pulled into its mirror, scored there under the usual local lock, and what
changed is uploaded: trajectories first, then the tables, `manifest.json` last, each one
PUT, so a reader of the bucket never sees a manifest naming files that are not there yet.

One run writes a remote store at a time: `scoring.store.uri_lease` (object stores have no
flock), taken before anything is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from scoring.errors import RecordError
from scoring.store.job_plan import _store_relative
from scoring.store.read import EPISODES, ERRORS, MANIFEST, SPEC_RESULTS
from scoring.store.uri import is_uri
from scoring.store.uri_lease import LEASE, store_lease
from scoring.store.uri_mirror import Remote, fetch, pull_archive, push, remote, snapshot

TABLES_LAST = (SPEC_RESULTS, EPISODES, ERRORS, MANIFEST)  # upload order: the manifest is the last word
NOT_UPLOADED = (".lock", ".parts/", "trajectories/.staging/", ".safevla-driver-marker")


def _place(where: str) -> str:
    """'local', or 'scheme://bucket': where a store's relative paths can reach."""
    if not is_uri(where):
        return "local"
    scheme, rest = where.split("://", 1)
    return f"{scheme.lower()}://{rest.split('/', 1)[0].split('?', 1)[0]}"


def score_with_uris(archives: list[str], out: str, *, score: Callable, copy_trajectories: bool = False,
                    wait_for_lock: bool = False, **options):
    """`score(paths, out, ...)` (score_archive or score_archive_ray) with URIs mirrored in and out.

    Trajectories are copied into the store unless every archive lives where the store
    does (all local, or all in the store's bucket): a store cannot point at files its
    readers cannot reach.
    """
    copy = copy_trajectories or {_place(a) for a in archives} != {_place(out)}
    store_remote = remote(out) if is_uri(out) else None  # a bad store URI fails before any download
    if store_remote is None:
        local_archives, mirrors, problems, left_out = _pull_archives(archives, Path(out), options)
        _rename_errors(Path(out), [(rem.uri, str(rem.mirror)) for rem in mirrors])
        summary = score(local_archives, out, copy_trajectories=copy, wait_for_lock=wait_for_lock,
                        extra_problems=problems, **options)
        return _with_left_out(_as_uris(summary, mirrors, Path(out)), left_out)
    with store_lease(store_remote, wait=wait_for_lock):  # before downloading: a busy store is refused at once
        store = store_remote.mirror
        store.mkdir(parents=True, exist_ok=True)
        for name in TABLES_LAST:  # the bucket is the truth: the mirror's tables are replaced
            fetch(store_remote, name)
        local_archives, mirrors, problems, left_out = _pull_archives(archives, store, options)
        _rename_errors(store, [(rem.uri, str(rem.mirror)) for rem in [*mirrors, store_remote]])
        before = snapshot(store)
        summary = score(local_archives, str(store), copy_trajectories=copy, wait_for_lock=wait_for_lock,
                        extra_problems=problems, **options)
        summary = _with_left_out(_as_uris(summary, [*mirrors, store_remote], store), left_out)
        _upload(store_remote, before)
    return dataclasses.replace(summary, store=store_remote.uri)


def _pull_archives(archives: list[str], store: Path, options: dict
                   ) -> tuple[list[str], list[Remote], list[RecordError], int]:
    """(local paths to score, mirrors of the remote ones, keys refused while mirroring, files not
    downloaded because the store already holds their episodes)."""
    done = _scored_sources(store, options)
    local, mirrors, problems, left_out = [], [], [], 0
    for archive in archives:
        if is_uri(archive):
            rem = remote(archive)
            path, refused, skipped = pull_archive(rem, scored=lambda p: _store_relative(str(p), str(store)) in done)
            problems.extend(refused)
            left_out += skipped
            local.append(str(path))
            mirrors.append(rem)
        else:
            local.append(archive)
    return local, mirrors, problems, left_out


def _scored_sources(store: Path, options: dict) -> set[str]:
    """Store-relative sources the store holds under this registry, scorer and force sampling: the
    files `score_archive` would skip, so a re-run on a fresh machine does not download them."""
    from scoring.registry.lookup import load_registry
    from scoring.store.write import _current, _existing
    try:
        eps, _ = _existing(store)
    except RecordError:
        return set()  # a corrupt table: score_archive reports it
    if not eps:
        return set()
    reg = load_registry(options.get("registry_path"))
    done: set[str] = set()
    for table in eps:
        done.update(table.filter(_current(table, reg, options.get("force_sampling", "peak")))["source"].to_pylist())
    return done


def _with_left_out(summary, left_out: int):
    return dataclasses.replace(summary, skipped=summary.skipped + left_out, total=summary.total + left_out)


def _upload(rem: Remote, before: dict) -> None:
    after = snapshot(rem.mirror)
    changed = [rel for rel, stamp in after.items()
               if before.get(rel) != stamp and not rel.startswith(NOT_UPLOADED) and rel != LEASE]
    for rel in sorted(changed, key=lambda r: (r in TABLES_LAST, TABLES_LAST.index(r) if r in TABLES_LAST else 0, r)):
        push(rem, rel)


def _as_uris(summary, mirrors: list[Remote], store: Path):
    """The summary and STORE/errors.json with mirror paths written as the URIs the user gave."""
    _rename_errors(store, [(str(rem.mirror), rem.uri) for rem in mirrors])
    if not summary.errors or not mirrors:
        return summary
    errors = tuple({k: _renamed(v, [(str(rem.mirror), rem.uri) for rem in mirrors]) for k, v in e.items()}
                   for e in summary.errors)
    return dataclasses.replace(summary, errors=errors)


def _renamed(text, pairs: list[tuple[str, str]]):
    if isinstance(text, str):
        for old, new in pairs:
            text = text.replace(old, new)
    return text


def _rename_errors(store: Path, pairs: list[tuple[str, str]]) -> None:
    """Rewrites the files named in STORE/errors.json. Before a run URIs become mirror paths, so
    the store matches its earlier errors with this run's item by item; after it, back to URIs."""
    path = store / ERRORS
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # none yet (or unreadable: the store itself replaces it)
    renamed = [{k: _renamed(v, pairs) for k, v in e.items()} if isinstance(e, dict) else e for e in rows]
    if renamed != rows:
        from scoring.records.io import atomic_write_bytes
        atomic_write_bytes(path, json.dumps(renamed, indent=1).encode())
