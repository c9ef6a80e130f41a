"""Run a policy on LIBERO tasks and record every episode into an archive (the local engine;
`replay.record.rollout_cli` is the `safevla rollout` subcommand, `replay.record.ray_engine` the Ray one).

Protocol (shared by every policy, so results compare): episode k of a task uses LIBERO
init state k and seed `--seed + k`, runs at most the suite's horizon and stops at
LIBERO's own success. Archive layout:

    ARCHIVE/<suite>/task_<i>/<model>/ep_<k>.npz   one compressed record per episode
    ARCHIVE/models/<sha256[:16]>.xml              each distinct scene MJCF, stored once

Records point at their scene with a relative `replay.mjcf` path. Writes are atomic, so an
interrupted run resumes by skipping every episode whose file exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import multiprocessing
import os
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from replay.record.adapters import PolicyServerError
from replay.record.hosts.libero import CAMERA, CONTROL_DT, SETTLE_ACTION, LiberoHost
from replay.record.observations import ObservationSpec, requested_spec
from replay.record.policies import check_action, describe_policy, load_policy
from scoring.records.io import atomic_write_bytes, save_record
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


def run_episode(host: LiberoHost, policy: Callable, *, init_state: int, seed: int, model: str = "unknown",
                max_steps: int | None = None, record: bool = True, mjcf: str | Callable[[str], str] | None = None,
                episode_id: str | None = None, on_step: Callable | None = None,
                provenance: dict | None = None) -> tuple[EpisodeRecord | None, bool, int]:
    """Runs one LIBERO episode; returns (record or None, LIBERO success, policy steps).

    `on_step(t, obs, reward, done)` sees every step (tests use it to compare rollouts).
    `mjcf` is what the record's `replay.mjcf` says: a string, a function of the scene XML
    (e.g. one that stores it and returns a path), or None for the XML itself.
    `provenance` (adapter, model id, replan steps, image size) goes to `meta.policy`.
    A `PolicyServerError` (server down, slow, malformed) is re-raised naming the episode.
    """
    task = host.task
    horizon = task.max_steps if max_steps is None else int(max_steps)
    episode_id = episode_id or f"{task.benchmark}/{task.task_id}/{model}/ep_{init_state:03d}"
    try:
        return _run_episode(host, policy, init_state=init_state, seed=seed, model=model, horizon=horizon,
                            record=record, mjcf=mjcf, episode_id=episode_id, on_step=on_step,
                            provenance=provenance)
    except PolicyServerError as exc:
        raise PolicyServerError(f"episode {episode_id} (not recorded): {exc}") from None


def _run_episode(host, policy, *, init_state, seed, model, horizon, record, mjcf, episode_id, on_step, provenance):
    task = host.task
    obs = host.reset(init_state=init_state, seed=seed)
    if hasattr(policy, "set_task"):
        policy.set_task(host.task_info())
    if hasattr(policy, "reset"):
        policy.reset()
    recorder = host.make_recorder(qpos_dtype=np.float32) if record else None
    if recorder is not None:
        recorder.observe(host.model, host.data)
    actions = [SETTLE_ACTION.copy()]
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
    meta = {"model": model, "suite": task.suite, "seed": int(seed), "init_state": int(init_state),
            "language": task.language, "signal_tags": list(SIGNAL_TAGS),
            "joint_torque_limit_nm": list(_registry().joint_torque_limits(task.benchmark)),
            "actuator_limit_nm": host.torque_limits(),
            "success_step": steps if success else None, **host.settle.meta(), "max_steps": horizon,
            "host": "libero", "libero_task": task.name, "policy_steps": steps}
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


def run_task(suite: str, task: int, episodes: Sequence[int], *, policy_spec: str, archive: str, seed: int,
             max_steps: int | None = None, model: str | None = None, progress: Callable | None = None,
             policy_options: dict | None = None, observations: ObservationSpec | None = None) -> list[Outcome]:
    """Runs the given episodes of one task with one env (the unit of work of a worker).

    `policy_options` go to `load_policy` (adapter options such as `replan_steps`);
    `observations` says which cameras the env renders (default: what the policy asks for).
    """
    name, factory = load_policy(policy_spec, **(policy_options or {}))
    model = model or name
    if observations is None:
        observations = requested_spec(factory)
    provenance = describe_policy(policy_spec, factory, observations)
    todo = [k for k in episodes if not episode_path(archive, suite, task, model, k).exists()]
    out = [Outcome(str(episode_path(archive, suite, task, model, k)), None, 0, skipped=True)
           for k in episodes if k not in todo]
    if not todo:
        return out
    host = LiberoHost(suite, task, **observations.host_options())
    policy = None
    try:
        policy = factory()
        for k in todo:
            path = episode_path(archive, suite, task, model, k)
            # the scene differs per seed (LIBERO samples fixture placements at reset)
            def stored(xml: str, where: Path = path.parent) -> str:
                return os.path.relpath(store_mjcf(archive, xml), where)
            rec, success, steps = run_episode(host, policy, init_state=k, seed=seed + k, model=model,
                                              max_steps=max_steps, mjcf=stored, provenance=provenance)
            save_record(rec, path, compress=True)
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
