"""`safevla rollout --engine ray`: LIBERO rollouts on a Ray cluster.

Three kinds of process take part:

- **Env workers** (`EnvWorker` actors, one CPU each). A worker keeps one LIBERO env and
  reuses it for every episode of the same task; it receives episodes as
  `(suite, task, k)` and runs them through the same `replay.record.rollout.run_episode` as the
  local engine, so the records are the same. Each finished episode is written
  atomically into the archive when the worker sees it (shared storage), or shipped back
  to the driver with its result when it does not (`replay.record.ray_transport`); an episode
  whose file exists is skipped, so a resumed or retried run never records an episode twice.
- **The policy server** (`PolicyServer`, a threaded actor, in replay/record/ray_policy_server.py).
  Every env worker calls it once per control step. Requests that queue up while a batch is computed are answered
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
import time
import uuid
from pathlib import Path
from typing import Any

from replay.record.ray_policy_server import (BATCH_WAIT_S, ENV_WORKER_RESTARTS, BatchedScripted,  # noqa: F401
                                            PerWorkerPolicies, PolicyServer, SimulatedVLA, _ray, policy_server_actor)
from scoring.errors import SafeVLAError

EPISODE_RETRIES = 3


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> bool:
    """Connects to the cluster at `address` or starts a private local instance (`scoring.store.ray_connect`).

    Returns True if this call started Ray. Every node must import the rollout code.
    """
    from scoring.store.ray_connect import connect
    return connect(address, modules=("scoring", "replay.record.rollout", "replay.record.hosts.libero"), **init_kwargs)


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

    def __init__(self, worker: str, server: str, *, archive: str, policy_spec: str, protocol,
                 model: str, cwd: str | None = None, host_options: dict | None = None,
                 provenance: dict | None = None, marker=None):
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)  # a relative --out means the same place as on the driver
        import ray
        from replay.record.ray_transport import node_label, sees_driver_files
        # the server by name, so a restarted worker finds it without object-store arguments
        self.worker, self.server = worker, ray.get_actor(server)
        self.archive, self.policy_spec, self.protocol, self.model = archive, policy_spec, protocol, model
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
        self.host = LiberoHost(suite, task, protocol=self.protocol, **self.host_options)
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
        if self.shared:  # the RNG states earlier records saved: fewer resets to replay for episode k
            from replay.record.rollout import RecordedHistory
            history = RecordedHistory(archive, suite, task, self.model)
            history.read([k - 1], self.protocol, suite)
            for j, state in history.rng_after.items():
                self.host.rng.know(j + 1, state)
        scenes: dict[str, bytes] = {}

        def stored(xml: str, where: Path = path.parent) -> str:
            if self.shared:
                return os.path.relpath(store_mjcf(archive, xml), where)
            scenes[mjcf_name(xml)] = xml.encode()  # shipped with the record; the same relative name
            return os.path.relpath(Path(archive) / mjcf_name(xml), where)
        policy = RemotePolicy(self.server, self.worker)
        policy.label = f"{suite}/{task}/{k}"
        try:
            rec, success, steps = run_episode(self.host, policy, init_state=k, episode=k, model=self.model,
                                              mjcf=stored, provenance=self.provenance)
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


def env_worker_actors(n: int, server: str, *, archive: str, policy_spec: str, protocol, model: str, options: dict | None = None, host_options: dict | None = None,
                      provenance: dict | None = None, marker=None) -> list:
    """`n` env workers, spread over the nodes (so losing one node loses as few as possible)."""
    ray = _ray()
    opts = {"num_cpus": 1, "max_restarts": ENV_WORKER_RESTARTS, "max_task_retries": EPISODE_RETRIES,
            "scheduling_strategy": "SPREAD"}
    opts.update(options or {})
    cls = ray.remote(EnvWorker)
    return [cls.options(**opts).remote(f"w{i}", server, archive=archive, policy_spec=policy_spec, protocol=protocol,
                                       model=model, cwd=os.getcwd(),
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
