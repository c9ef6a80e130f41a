"""`safevla rollout --engine ray`: LIBERO rollouts on a Ray cluster.

Three kinds of process take part:

- **Env workers** (`EnvWorker` actors, one CPU each). A worker keeps one LIBERO env and
  reuses it for every episode of the same task; it receives episodes as
  `(suite, task, k)` and runs them through the same `replay.record.rollout.run_episode` as the
  local engine, so the records are the same. Each finished episode is written
  atomically into the archive when the worker sees it (shared storage), or shipped back
  to the driver with its result when it does not (`replay.record.ray_transport`); an episode
  whose file exists is skipped, so a resumed or retried run never records an episode twice.
- **The policy server** (`PolicyServer`, a threaded actor). Every env worker calls it once
  per control step. Requests that queue up while a batch is computed are answered
  together by one batched call (optionally waiting `max_wait_s` for every open episode to
  ask), the way one GPU VLA is shared by many simulators. Policy state is kept per worker
  and per episode (a session id), so batching never mixes episodes.
- **The driver** (`replay.record.ray_driver.run_jobs_ray`; it imports this module, never the
  other way round): hands episodes to free workers (a worker keeps its task while that
  task has episodes left), writes shipped records, shows a tqdm bar with per-node counts,
  and prints a per-node and per-worker summary and the server's batching figures.

Failures use Ray's own retry options: env workers and the server are restarted
(`max_restarts`); an episode call that died with its worker is re-run on the
restarted worker (`max_task_retries`), and one that lost the policy server is re-run
once the server is back (`retry_exceptions`); `max_retries` covers the scoring tasks.

Wrapping a VLA as the policy server: give `--policy module:Factory` a factory (class)
whose product has `act_batch(sessions, observations, languages) -> list of (7,)
actions` (and optionally `open_session(session, task_info)` / `close_session(session)`).
The server builds it once and calls it with whole batches. Actor options come from a
`ray_actor_options` attribute on the factory, e.g. `{"num_gpus": 1}`. See docs/cluster.md.

Ray is imported lazily: nothing else in the package imports it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scoring.errors import SafeVLAError


ENV_WORKER_RESTARTS = 3
EPISODE_RETRIES = 3
BATCH_WAIT_S = 0.05  # longest wait for a full batch (batched policies)


def _ray():
    from scoring.store.ray_connect import ray_module
    return ray_module()


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> bool:
    """Connects to the cluster at `address` or starts a private local instance (`scoring.store.ray_connect`).

    Returns True if this call started Ray. Every node must import the rollout code.
    """
    from scoring.store.ray_connect import connect
    return connect(address, modules=("scoring", "replay.record.rollout", "replay.record.hosts.libero"), **init_kwargs)


# ----------------------------------------------------------------------------- policy server

class PerWorkerPolicies:
    """Adapts a plain per-episode policy (`(obs, language) -> action`) to batched serving.

    One policy object per env worker, reused across that worker's episodes with
    `set_task` and `reset` at the start of each (as the local engine does); a batch is
    answered by calling each request's own policy, so episodes never share state.
    """

    def __init__(self, factory: Callable[[], Any]):
        self.factory = factory
        self.by_worker: dict[str, Any] = {}
        self.by_session: dict[str, Any] = {}

    def open_session(self, session: str, task_info: Any, worker: str) -> None:
        policy = self.by_worker.get(worker)
        if policy is None:
            policy = self.by_worker[worker] = self.factory()
        if task_info is not None and hasattr(policy, "set_task"):
            policy.set_task(task_info)
        if hasattr(policy, "reset"):
            policy.reset()
        self.by_session[session] = policy

    def close_session(self, session: str) -> None:
        self.by_session.pop(session, None)

    def act_batch(self, sessions: Sequence[str], observations: Sequence[dict], languages: Sequence[str]) -> list:
        return [self.by_session[s](o, lang) for s, o, lang in zip(sessions, observations, languages)]


class _Request:
    __slots__ = ("session", "obs", "language", "done", "result", "error")

    def __init__(self, session: str, obs: dict, language: str):
        self.session, self.obs, self.language = session, obs, language
        self.done, self.result, self.error = False, None, None


class PolicyServer:
    """The policy-server actor body (wrapped with `ray.remote` by `policy_server_actor`).

    A threaded actor: each env worker's `act` call waits in its own thread. Whichever
    waiting call finds the server idle becomes the leader: it takes every queued request
    (up to `max_batch`), answers them with one `act_batch`, and wakes the others. Requests
    that arrive while a batch is being computed form the next batch, so a slow model (a
    GPU VLA) gets batches as large as the number of workers waiting, at no added latency.
    With `max_wait_s > 0` the leader also waits up to that long for every open episode
    to ask. The default is 0 for plain per-worker policies and `BATCH_WAIT_S` (or the
    backend's `batch_wait_s`) for batched ones: without it, two workers sharing a slow
    model fall into lock-step alternation with batches of 1.
    """

    def __init__(self, policy_spec: str, *, max_batch: int = 64, max_wait_s: float | None = None,
                 policy_options: dict | None = None, policy_sources: dict[str, bytes] | None = None):
        from replay.record.policies import load_policy
        from replay.record.policy_files import install_bundle
        install_bundle(policy_sources or {})
        _, factory = load_policy(policy_spec, **(policy_options or {}))
        probe = factory() if not isinstance(factory, type) or hasattr(factory, "act_batch") else None
        self.batched = probe is not None and hasattr(probe, "act_batch")
        self.backend = probe if self.batched else PerWorkerPolicies(factory)
        self.max_batch = int(max_batch)
        if max_wait_s is None:
            # a model (act_batch) waits for every open episode so batches stay full and
            # workers stay in step; per-worker plain policies gain nothing from waiting
            max_wait_s = getattr(self.backend, "batch_wait_s", BATCH_WAIT_S) if self.batched else 0.0
        self.max_wait_s = float(max_wait_s)
        self.cv = threading.Condition()
        self.pending: list[_Request] = []
        self.computing = False
        self.session_of: dict[str, str] = {}  # worker -> its open session
        self.n_requests = 0
        self.n_batches = 0
        self.busy_s = 0.0
        self.first = self.last = None

    def open(self, worker: str, session: str, task_info: Any = None) -> None:
        """Starts an episode; a worker's previous session (e.g. lost in a crash) is closed."""
        with self.cv:
            old = self.session_of.pop(worker, None)
            if old is not None:
                self._backend_close(old)
            if isinstance(self.backend, PerWorkerPolicies):
                self.backend.open_session(session, task_info, worker)
            elif hasattr(self.backend, "open_session"):
                self.backend.open_session(session, task_info)
            self.session_of[worker] = session

    def close(self, worker: str, session: str) -> None:
        with self.cv:
            if self.session_of.get(worker) == session:
                del self.session_of[worker]
            self._backend_close(session)
            self.cv.notify_all()  # one fewer episode to wait for

    def _backend_close(self, session: str) -> None:
        if hasattr(self.backend, "close_session"):
            self.backend.close_session(session)

    def act(self, session: str, obs: dict, language: str):
        req = _Request(session, obs, language)
        with self.cv:
            self.pending.append(req)
            deadline = time.monotonic() + self.max_wait_s
            while not req.done:
                if not self.computing and self.pending:
                    target = min(self.max_batch, max(1, len(self.session_of)))
                    now = time.monotonic()
                    if len(self.pending) >= target or now >= deadline:
                        self._lead()
                        continue
                    self.cv.wait(timeout=deadline - now)
                else:
                    self.cv.wait()
        if req.error is not None:
            raise req.error
        return req.result

    def _lead(self) -> None:
        """Computes one batch; called with the lock held, releases it while computing."""
        batch, self.pending = self.pending[:self.max_batch], self.pending[self.max_batch:]
        self.computing = True
        self.cv.release()
        t0 = time.perf_counter()
        try:
            try:
                actions = list(self.backend.act_batch([r.session for r in batch], [r.obs for r in batch],
                                                      [r.language for r in batch]))
                if len(actions) != len(batch):
                    raise ValueError(f"act_batch returned {len(actions)} actions for {len(batch)} requests")
                for r, a in zip(batch, actions):
                    r.result = np.asarray(a)
            except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                for r in batch:
                    r.error = exc
        finally:
            t1 = time.perf_counter()
            self.cv.acquire()
            for r in batch:
                r.done = True
            self.computing = False
            self.busy_s += t1 - t0
            self.first = t0 if self.first is None else self.first
            self.last = t1
            self.n_requests += len(batch)
            self.n_batches += 1
            self.cv.notify_all()

    def name(self) -> str:
        import ray
        return ray.get_runtime_context().get_actor_name()

    def stats(self) -> dict:
        with self.cv:
            span = (self.last - self.first) if self.first is not None else 0.0
            return {"requests": self.n_requests, "batches": self.n_batches,
                    "mean_batch": self.n_requests / self.n_batches if self.n_batches else 0.0,
                    "requests_per_s": self.n_requests / span if span > 0 else 0.0,
                    "busy_s": self.busy_s, "batched_backend": self.batched}

    def reset_stats(self) -> None:
        with self.cv:
            self.n_requests = self.n_batches = 0
            self.busy_s = 0.0
            self.first = self.last = None


class BatchedScripted:
    """Template for serving a VLA from the policy server: one model, whole batches.

    Replace the body of `act_batch` with one forward pass of your model over the batch
    (stack `observations`, run on the GPU, split the output). Keep per-episode state
    (action chunks, history) in a dict keyed by session. `ray_actor_options` puts the
    server where the model fits, e.g. `{"num_gpus": 1}`. Here the model is the scripted
    profile `profile`, and `latency_s` sleeps once per batch to stand in for inference.

        safevla rollout ... --engine ray --policy replay.record.ray_engine:BatchedScripted
    """

    ray_actor_options: dict = {}  # a VLA: {"num_gpus": 1}
    profile = "careful"
    latency_s = 0.0

    def __init__(self):
        from replay.record.policies import scripted
        self.factory = scripted(self.profile)
        self.sessions: dict[str, Any] = {}

    def open_session(self, session: str, task_info: Any) -> None:
        policy = self.factory()
        if task_info is not None:
            policy.set_task(task_info)
        policy.reset()
        self.sessions[session] = policy

    def close_session(self, session: str) -> None:
        self.sessions.pop(session, None)

    def act_batch(self, sessions: Sequence[str], observations: Sequence[dict], languages: Sequence[str]) -> list:
        if self.latency_s:
            time.sleep(self.latency_s)  # one "forward pass" per batch
        return [self.sessions[s](o, lang) for s, o, lang in zip(sessions, observations, languages)]


class SimulatedVLA(BatchedScripted):
    """`BatchedScripted` with 20 ms of simulated inference per batch (benchmarks, docs)."""

    latency_s = 0.020


def policy_server_actor(policy_spec: str, *, options: dict | None = None, max_batch: int = 64,
                        max_wait_s: float | None = None, max_concurrency: int = 64,
                        policy_options: dict | None = None):
    """Starts the policy-server actor. `options` go to `.options()` (e.g. num_gpus=1).

    A policy from a file or from a module in the current directory has its sources
    shipped with the actor's arguments (`replay.record.policy_files`), so the actor imports it
    wherever it runs.
    """
    ray = _ray()
    from replay.record.policies import load_policy
    from replay.record.policy_files import policy_bundle, ray_policy_spec
    _, factory = load_policy(policy_spec, **(policy_options or {}))
    try:
        actor_spec, ship = ray_policy_spec(policy_spec)
        sources = policy_bundle(ship)
    except ValueError as exc:
        raise SafeVLAError(f"--policy: {exc}") from None
    opts = {"num_cpus": 0, "max_restarts": ENV_WORKER_RESTARTS, "max_task_retries": 0,
            "max_concurrency": max_concurrency}
    opts.update(getattr(factory, "ray_actor_options", None) or {})
    opts.update(options or {})
    opts.setdefault("name", f"safevla-policy-server-{uuid.uuid4().hex[:12]}")
    cls = ray.remote(PolicyServer)
    return cls.options(**opts).remote(actor_spec, max_batch=max_batch, max_wait_s=max_wait_s,
                                      policy_options=policy_options, policy_sources=sources)


# ----------------------------------------------------------------------------- env workers

class RemotePolicy:
    """What `run_episode` sees inside an env worker: a stub that asks the policy server."""

    def __init__(self, server, worker: str):
        self.server, self.worker = server, worker
        self.task_info = None
        self.session: str | None = None
        self.label = "episode"
        self.requests = 0
        self.wait_s = 0.0

    def set_task(self, task_info) -> None:
        self.task_info = task_info

    def reset(self) -> None:
        import ray
        self.session = f"{self.worker}/{self.label}/{uuid.uuid4().hex[:8]}"
        ray.get(self.server.open.remote(self.worker, self.session, self.task_info))

    def __call__(self, obs, language):
        import ray
        t0 = time.perf_counter()
        try:
            out = ray.get(self.server.act.remote(self.session, obs, language))
        except ray.exceptions.RayTaskError as exc:
            raise _plain_cause(exc) from None
        self.wait_s += time.perf_counter() - t0
        self.requests += 1
        return out

    def close(self) -> None:
        import ray
        if self.session is not None:
            ray.get(self.server.close.remote(self.worker, self.session))
            self.session = None


@dataclasses.dataclass(frozen=True)
class EpisodeOutcome:
    """One episode as an env worker reports it."""

    path: str
    suite: str
    task: int
    episode: int
    success: bool | None
    steps: int
    skipped: bool
    worker: str
    seconds: float       # wall time of the episode (reset to write)
    build_s: float       # env build time charged to this episode (0 when reused)
    policy_wait_s: float  # time spent waiting for the policy server
    pid: int = 0          # the worker process (a restarted worker has a new one)
    node: str = ""        # 'IP/node id' of the node that ran it
    shipped: Any = None   # a ShippedEpisode when the worker cannot see the archive (the driver writes it)
    timing_s: dict | None = None  # simulation, rendering and policy seconds (replay.record.rollout)


class EnvWorker:
    """The env-worker actor body (wrapped with `ray.remote` by `env_worker_actors`)."""

    def __init__(self, worker: str, server: str, *, archive: str, policy_spec: str, seed: int,
                 max_steps: int | None, model: str, cwd: str | None = None, host_options: dict | None = None,
                 provenance: dict | None = None, marker=None):
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)  # a relative --out means the same place as on the driver
        import ray
        from replay.record.ray_transport import node_label, sees_driver_files
        # the server by name, so a restarted worker finds it without object-store arguments
        self.worker, self.server = worker, ray.get_actor(server)
        self.archive, self.policy_spec, self.seed = archive, policy_spec, int(seed)
        self.max_steps, self.model = max_steps, model
        self.host_options, self.provenance = dict(host_options or {}), provenance
        self.host = None
        self.key: tuple[str, int] | None = None
        self.node = node_label()
        # decided here, on the node this (possibly restarted) worker runs on
        self.shared = marker is None or sees_driver_files(marker)

    def where(self) -> tuple[str, bool]:
        """(node, writes in place) of this worker."""
        return self.node, self.shared

    def pid(self) -> int:
        return os.getpid()

    def prepare(self, suite: str, task: int) -> float:
        """Makes sure the env of (suite, task) is built; returns the build seconds (0 if reused)."""
        if self.key == (suite, task):
            return 0.0
        from replay.record.hosts.libero import LiberoHost
        if self.host is not None:
            self.host.close()
            self.host, self.key = None, None
        t0 = time.perf_counter()
        self.host = LiberoHost(suite, task, **self.host_options)
        self.key = (suite, task)
        return time.perf_counter() - t0

    def run(self, suite: str, task: int, k: int) -> EpisodeOutcome:
        from replay.record.rollout import episode_path, run_episode, store_mjcf
        from scoring.records.io import save_record
        from replay.record.rollout import mjcf_name
        from replay.record.ray_transport import ShippedEpisode
        from scoring.records.io import record_to_npz_bytes
        t0 = time.perf_counter()
        path = episode_path(self.archive, suite, task, self.model, k)
        if self.shared and path.exists():  # done by an earlier run, or by this call before a crash
            return EpisodeOutcome(str(path), suite, task, k, None, 0, True, self.worker, 0.0, 0.0, 0.0, os.getpid(),
                                  self.node)
        build = self.prepare(suite, task)
        archive = self.archive
        scenes: dict[str, bytes] = {}

        def stored(xml: str, where: Path = path.parent) -> str:
            if self.shared:
                return os.path.relpath(store_mjcf(archive, xml), where)
            scenes[mjcf_name(xml)] = xml.encode()  # shipped with the record; the same relative name
            return os.path.relpath(Path(archive) / mjcf_name(xml), where)
        policy = RemotePolicy(self.server, self.worker)
        policy.label = f"{suite}/{task}/{k}"
        try:
            rec, success, steps = run_episode(self.host, policy, init_state=k, seed=self.seed + k, model=self.model,
                                              max_steps=self.max_steps, mjcf=stored, provenance=self.provenance)
        finally:
            policy.close()
        shipped = None
        if self.shared:
            save_record(rec, path, compress=True)
        else:
            shipped = ShippedEpisode(os.path.relpath(path, archive), record_to_npz_bytes(rec, compress=True),
                                     tuple(sorted(scenes.items())))
        return EpisodeOutcome(str(path), suite, task, k, bool(success), int(steps), False, self.worker,
                              time.perf_counter() - t0, build, policy.wait_s, os.getpid(), self.node, shipped,
                              timing_s=rec.meta.get("timing_s"))

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
            self.host, self.key = None, None


def env_worker_actors(n: int, server: str, *, archive: str, policy_spec: str, seed: int, max_steps: int | None,
                      model: str, options: dict | None = None, host_options: dict | None = None,
                      provenance: dict | None = None, marker=None) -> list:
    """`n` env workers, spread over the nodes (so losing one node loses as few as possible)."""
    ray = _ray()
    opts = {"num_cpus": 1, "max_restarts": ENV_WORKER_RESTARTS, "max_task_retries": EPISODE_RETRIES,
            "scheduling_strategy": "SPREAD"}
    opts.update(options or {})
    cls = ray.remote(EnvWorker)
    return [cls.options(**opts).remote(f"w{i}", server, archive=archive, policy_spec=policy_spec, seed=seed,
                                       max_steps=max_steps, model=model, cwd=os.getcwd(),
                                       host_options=host_options, provenance=provenance, marker=marker)
            for i in range(n)]


# ----------------------------------------------------------------------------- driver

def _plain_cause(exc: BaseException) -> BaseException:
    """Our own errors (e.g. a policy server that is down) without Ray's remote traceback around them,
    so the CLI prints the same one line as the local engine; anything else as Ray raised it."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, SafeVLAError):
        return type(cause)(*cause.args)
    return exc
