"""The policy server of `safevla rollout --engine ray` (replay/record/ray_engine.py says how the
processes fit together): one threaded actor answers every env worker's per-step request,
batching the requests that queue up while a batch is computed, with policy state kept per
worker and per episode (a session id). `BatchedScripted` and `SimulatedVLA` are runnable
templates of a batched VLA factory. Ray is imported lazily.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scoring.errors import SafeVLAError

ENV_WORKER_RESTARTS = 3  # Ray restarts of an env worker or the policy server before a run gives up
BATCH_WAIT_S = 0.05  # longest wait for a full batch (batched policies)


def _ray():
    from scoring.store.ray_connect import ray_module
    return ray_module()


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
