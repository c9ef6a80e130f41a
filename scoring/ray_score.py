"""`safevla score --engine ray`: score archive shards as Ray tasks, merge into one run store.

The work is cut into the same `_Job` batches as the local engine (`scoring.store._jobs`);
each batch is one Ray task running `scoring.store._run_job`, and the driver merges the
columnar `_Batch` results in submission order exactly as `score_archive` does, then writes
the store with the same `_consolidate`. The Parquet tables are therefore byte-for-byte the
ones `--engine local` writes (the manifest differs only in its timestamps).

Paths: tasks run in the driver's working directory when it exists on the node (so
relative archive paths mean the same files); on a cluster give absolute paths on shared
storage. Failed tasks are retried by Ray (`max_retries`). Ray is imported lazily.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

from scoring.errors import SafeVLAError
from scoring.registry import load_registry
from scoring.store import PARTS, ScoreSummary, _consolidate, _existing, _jobs, _run_job, _store_relative, \
    _write_parquet
from scoring.io import archive_files

TASK_RETRIES = 3
_REGISTRY: dict = {}


def _score_task(job, store: str, copy: bool, registry_path, cwd: str):
    if os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    key = str(registry_path)
    if key not in _REGISTRY:
        _REGISTRY[key] = load_registry(registry_path)
    return _run_job(job, store, copy, _REGISTRY[key])


def score_archive_ray(paths: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                      address: str | None = None, registry_path=None, copy_trajectories: bool = False,
                      progress: bool | None = None, checkpoint_every: int = 5000, batch: int = 64,
                      synthetic: bool = False, max_inflight: int | None = None) -> ScoreSummary:
    """`scoring.store.score_archive` with the batches scored as Ray tasks (same arguments, same store)."""
    try:
        import ray
    except ImportError as exc:
        raise SafeVLAError(f"--engine ray needs Ray ({exc}); pip install 'safevla-bench[ray]'") from None
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    files = archive_files(paths)
    reg = load_registry(registry_path)
    store = Path(out)
    store.mkdir(parents=True, exist_ok=True)
    old_eps, _ = _existing(store)
    done_ids: set[str] = set()
    done_sources: set[str] = set()
    for t in old_eps:
        cur = t.filter(pa.compute.equal(t["registry_hash"], reg.hash))
        done_ids.update(cur["episode_id"].to_pylist())
        done_sources.update(cur["source"].to_pylist())

    from tqdm.auto import tqdm
    has_lines = any(p.suffix == ".jsonl" for p in files)
    todo = None if has_lines else sum(_store_relative(str(p), str(store)) not in done_sources for p in files)
    errors: list[dict] = []
    seen: dict[str, str] = {}
    skipped = scored = 0
    parts_written = len(list((store / PARTS).glob("episodes-*.parquet")))
    pending: list[tuple[pa.Table, pa.Table]] = []
    pending_rows = 0

    def flush():
        nonlocal parts_written, pending, pending_rows
        if not pending:
            return
        (store / PARTS).mkdir(exist_ok=True)
        _write_parquet(pa.concat_tables([sp for _, sp in pending]),
                       store / PARTS / f"spec_results-{parts_written:05d}.parquet")
        _write_parquet(pa.concat_tables([ep for ep, _ in pending]),
                       store / PARTS / f"episodes-{parts_written:05d}.parquet")
        parts_written += 1
        pending, pending_rows = [], 0

    started = False
    if not ray.is_initialized():
        kwargs = {"include_dashboard": False}
        if address:
            kwargs["address"] = address
        ray.init(**kwargs)
        started = True
    task = ray.remote(_score_task).options(num_cpus=1, max_retries=TASK_RETRIES)
    window = max_inflight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    skipped_files = [0]
    jobs = _jobs(files, done_sources, batch, skipped_files, store)
    reg_ref = None if registry_path is None else str(registry_path)
    cwd = os.getcwd()
    bar = tqdm(total=todo, unit="ep", desc="scoring (ray)", disable=None if progress is None else not progress)
    queue: deque = deque()
    try:
        exhausted = False
        while True:
            while not exhausted and len(queue) < window:
                job = next(jobs, None)
                if job is None:
                    exhausted = True
                    break
                queue.append(task.remote(job, str(store), copy_trajectories, reg_ref, cwd))
            if not queue:
                break
            res = ray.get(queue.popleft())  # in submission order, as the local pool's imap
            errors.extend(res.errors)
            accept = []
            for eid, src in zip(res.episodes["episode_id"].to_pylist(), res.episodes["source"].to_pylist()):
                if eid in done_ids:
                    skipped += 1
                    accept.append(False)
                elif eid in seen:
                    errors.append({"file": src, "episode": eid, "field": "episode_id",
                                   "message": f"duplicate episode_id; already scored from {seen[eid]}"})
                    accept.append(False)
                else:
                    seen[eid] = src
                    accept.append(True)
            ep_tab, sp_tab = res.episodes, res.specs
            if not all(accept):
                ep_tab = ep_tab.filter(pa.array(accept, type=pa.bool_()))
                sp_tab = sp_tab.filter(pa.array(np.repeat(accept, res.spec_counts), type=pa.bool_()))
            if ep_tab.num_rows:
                pending.append((ep_tab, sp_tab))
                pending_rows += ep_tab.num_rows
                scored += ep_tab.num_rows
            if pending_rows >= checkpoint_every:
                flush()
            bar.update(res.n_items)
    finally:
        bar.close()
        for ref in queue:
            ray.cancel(ref)
        if started:
            ray.shutdown()
    flush()
    skipped += skipped_files[0]
    _consolidate(store, reg, [Path(p) for p in paths], errors, synthetic=synthetic)
    return ScoreSummary(store=store, scored=scored, skipped=skipped, errors=tuple(errors),
                        total=scored + skipped + len(errors))
