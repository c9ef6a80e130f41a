"""Which archive items a `score_archive` run scores, cut into jobs for the workers.

An item is an `.npz`/`.json` file or one JSONL line as a byte range (`scoring.records.archive.jsonl_spans`),
so a scheduler never holds megabyte-long lines. Items already in the store, by their
store-relative source, are skipped. Jobs are sized for load balance at the end of the run
(`_batch_size`), and the last few shrink so the workers finish together (`_jobs`).
`scoring.store.jobs` runs the jobs.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
from collections.abc import Iterator
from pathlib import Path

from scoring.records.archive import jsonl_spans


@dataclasses.dataclass(frozen=True)
class _Job:
    """A batch of work for one worker: npz/json files, or JSONL lines as byte ranges."""

    items: tuple  # ("file", path, path), ("span", (path, offset, length), "path:line") or ("error", row, path)


def _store_relative(source: str, store: str) -> str:
    """`source` ("path" or "path:line") with the path relative to the store, so stores move."""
    path, sep, line = source.rpartition(":")
    if not (sep and line.isdigit()):
        path, sep, line = source, "", ""
    return _relpath(path, store) + sep + line


def _relpath(path: str, start: str) -> str:
    """os.path.relpath, with the directory part cached: it costs more than scoring otherwise."""
    head, tail = os.path.split(path)
    rel = _relpath_dir(head, start)
    return tail if rel == "." else os.path.join(rel, tail)


@functools.lru_cache(maxsize=4096)
def _relpath_dir(directory: str, start: str) -> str:
    return os.path.relpath(os.path.abspath(directory or "."), os.path.abspath(start))


def _batch_size(files: list[Path], workers: int) -> int:
    """Episodes per job: ~8 jobs per worker, within [16, 256].

    Each job costs the parent a few ms of pool bookkeeping, so jobs are as large as
    load balance at the end of the run allows. JSONL lines are not counted up front;
    each costs ~10x a columnar episode, so their jobs are small.
    """
    n = sum(p.suffix != ".jsonl" for p in files)
    if not n:
        return 16
    return max(16, min(256, -(-n // (max(workers, 1) * 8))))


def _jobs(paths: list[Path], done_sources: set[str], batch: int, skipped: list[int], store: Path, *,
          workers: int = 1) -> Iterator[_Job]:
    """Jobs of `batch` items, then, for the last few, smaller and smaller jobs.

    Equal jobs leave one worker idle while another finishes the last one (half a job on
    average, ~5% of a 300-line JSONL run). Items are planned a few jobs ahead, so the
    tail is known before it is handed out and can shrink to a quarter of `batch`.
    """
    pending: collections.deque = collections.deque()
    lookahead = batch * (workers + 1)
    for item in _items(paths, done_sources, skipped, store):
        pending.append(item)
        if len(pending) >= lookahead:
            yield _Job(tuple(pending.popleft() for _ in range(batch)))
    while pending:
        size = batch if workers <= 1 else max(batch // 4, 1, -(-len(pending) // (2 * workers)))
        yield _Job(tuple(pending.popleft() for _ in range(min(size, batch, len(pending)))))


def _items(paths: list[Path], done_sources: set[str], skipped: list[int], store: Path) -> Iterator[tuple]:
    for path in paths:
        if _store_relative(str(path), str(store)) in done_sources:
            skipped[0] += 1
            continue
        if path.suffix == ".jsonl":
            try:
                for offset, length, lineno in jsonl_spans(path):
                    yield "span", (str(path), offset, length), f"{path}:{lineno}"
            except OSError as exc:  # unreadable: reported by the worker like any bad item, the rest go on
                message = f"file {str(path)!r}: cannot read ({exc.strerror}); its remaining lines were not scored"
                yield "error", {"file": str(path), "episode": None, "field": None, "message": message}, str(path)
        else:
            yield "file", str(path), str(path)
