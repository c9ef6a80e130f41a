"""`safevla score --engine ray`: score archive shards as Ray tasks, merge into one run store.

The work is cut into the same `_Job` batches as the local engine (`scoring.job_plan._jobs`);
each batch is one Ray task running `scoring.store_jobs._run_job`, and `ray_engine` hands the
columnar `_Batch` results back in submission order to `score_archive` itself, which merges
and writes the store exactly as for the local engine. The Parquet tables are therefore byte-for-byte the
ones `--engine local` writes (the manifest differs only in its timestamps).

Paths: tasks run in the driver's working directory when it exists on the node (so
relative archive paths mean the same files); on a cluster give absolute paths on shared
storage. Failed tasks are retried by Ray (`max_retries`). Ray is imported lazily.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Iterable

from scoring.errors import SafeVLAError
from scoring.registry import load_registry
from scoring.store import ScoreSummary, score_archive
from scoring.store_jobs import _run_job

TASK_RETRIES = 3
_REGISTRY: dict = {}


def _score_task(job, store: str, copy: bool, registry_path, cwd: str, force_sampling: str = "peak"):
    if os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    key = str(registry_path)
    if key not in _REGISTRY:
        _REGISTRY[key] = load_registry(registry_path)
    return _run_job(job, store, copy, _REGISTRY[key], force_sampling)


def ray_engine(jobs, run, *, address: str | None = None, max_inflight: int | None = None):
    """A `score_archive` engine: each job is one Ray task; batches come back in submission order."""
    try:
        import ray
    except ImportError as exc:
        raise SafeVLAError(f"--engine ray needs Ray ({exc}); pip install 'safevla-bench[ray]'") from None
    started = False
    if not ray.is_initialized():
        kwargs = {"include_dashboard": False}
        if address:
            kwargs["address"] = address
        ray.init(**kwargs)
        started = True
    task = ray.remote(_score_task).options(num_cpus=1, max_retries=TASK_RETRIES)
    window = max_inflight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    reg_ref = None if run.registry_path is None else str(run.registry_path)
    cwd = os.getcwd()
    queue: deque = deque()
    try:
        while True:
            while len(queue) < window:
                job = next(jobs, None)
                if job is None:
                    break
                queue.append(task.remote(job, run.store, run.copy, reg_ref, cwd, run.force_sampling))
            if not queue:
                return
            yield ray.get(queue.popleft())  # in submission order, as the local pool's imap
    finally:
        for ref in queue:
            ray.cancel(ref)
        if started:
            ray.shutdown()


def score_archive_ray(paths: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                      address: str | None = None, max_inflight: int | None = None, **options) -> ScoreSummary:
    """`scoring.store.score_archive` with the batches scored as Ray tasks (same options, same store)."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise SafeVLAError(f"--engine ray needs Ray ({exc}); pip install 'safevla-bench[ray]'") from None
    engine = functools.partial(ray_engine, address=address, max_inflight=max_inflight)
    return score_archive(paths, out, engine=engine, **options)
