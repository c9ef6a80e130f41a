"""`safevla score --engine ray`: score archive shards as Ray tasks, merge into one run store.

The work is cut into the same `_Job` batches as the local engine (`scoring.store.job_plan._jobs`);
each batch is one Ray task running `scoring.store.jobs._run_job`, and `ray_engine` hands the
columnar `_Batch` results back in submission order to `score_archive` itself, which merges
and writes the store exactly as for the local engine. The Parquet tables are therefore byte-for-byte the
ones `--engine local` writes (the manifest differs only in its timestamps).

Paths: tasks run in the driver's working directory when it exists on the node (so
relative archive paths mean the same files). When some node cannot see the driver's
store, every job carries its items' bytes instead (`scoring.store.ray_ship`) and the driver
writes what the tasks wrote; the tables are the same. Failed tasks are retried by Ray
(`max_retries`), on another node if theirs is lost. Ray is imported lazily, and
connecting is `scoring.store.ray_connect`'s.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Iterable

from scoring.registry.lookup import load_registry
from scoring.store.jobs import _run_job
from scoring.store.ray_ship import absolute, land, pack, plant_marker, run_shipped, sees_marker
from scoring.store.write import ScoreSummary, score_archive

TASK_RETRIES = 3
_REGISTRY: dict = {}


def _score_task(job, store: str, copy: bool, registry_path, cwd: str, force_sampling: str = "peak", shipped=None):
    if os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    key = str(registry_path)
    if key not in _REGISTRY:
        _REGISTRY[key] = load_registry(registry_path)
    run_job = functools.partial(_run_job, force_sampling=force_sampling)
    if shipped is not None:
        return run_shipped(job, shipped, store, copy, _REGISTRY[key], run_job)
    return run_job(job, store, copy, _REGISTRY[key]), ()


def ray_engine(jobs, run, *, address: str | None = None, max_inflight: int | None = None, on_batch=None):
    """A `score_archive` engine: each job is one Ray task; batches come back in submission order.

    `on_batch(i)` is called on the driver after the i-th batch (tests remove a node there).
    """
    from scoring.store.ray_connect import connect, on_each_node, ray_module
    ray = ray_module()
    started = connect(address)
    task = ray.remote(_score_task).options(num_cpus=1, max_retries=TASK_RETRIES)
    window = max_inflight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    reg_ref = None if run.registry_path is None else str(run.registry_path)
    cwd = os.getcwd()
    queue: deque = deque()
    done = 0
    try:
        marker = plant_marker(run.store)
        try:  # shared storage on every node: score in place; else the bytes travel with the jobs
            ship = not all(r is True for r in on_each_node(sees_marker, marker).values())
        finally:
            os.unlink(marker[0])
        store = os.path.abspath(run.store) if ship else run.store
        while True:
            while len(queue) < window:
                job = next(jobs, None)
                if job is None:
                    break
                if ship:
                    job = absolute(job)
                queue.append(task.remote(job, store, run.copy, reg_ref, cwd, run.force_sampling,
                                         pack(job) if ship else None))
            if not queue:
                return
            batch, written = ray.get(queue.popleft())  # in submission order, as the local pool's imap
            land(run.store, written)  # trajectories a node without the store wrote for it
            yield batch
            done += 1
            if on_batch is not None:
                on_batch(done)
    finally:
        for ref in queue:
            ray.cancel(ref)
        if started:
            ray.shutdown()


def score_archive_ray(paths: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                      address: str | None = None, max_inflight: int | None = None, on_batch=None,
                      **options) -> ScoreSummary:
    """`scoring.store.write.score_archive` with the batches scored as Ray tasks (same options, same store)."""
    from scoring.store.ray_connect import ray_module
    ray_module()  # a missing Ray is a one-line error before any work
    engine = functools.partial(ray_engine, address=address, max_inflight=max_inflight, on_batch=on_batch)
    return score_archive(paths, out, engine=engine, **options)
