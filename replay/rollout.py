"""`safevla rollout`: run a policy on LIBERO tasks and record every episode into an archive.

Protocol (shared by every policy, so results compare): episode k of a task uses LIBERO
init state k and seed `--seed + k`, runs at most the suite's horizon and stops at
LIBERO's own success. Archive layout:

    ARCHIVE/<suite>/task_<i>/<model>/ep_<k>.npz   one compressed record per episode
    ARCHIVE/models/<sha256[:16]>.xml              each distinct scene MJCF, stored once

Records point at their scene with a relative `replay.mjcf` path. Writes are atomic, so an
interrupted run resumes by skipping every episode whose file exists.
"""

from __future__ import annotations

import argparse
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

from replay.hosts.libero import CAMERA, CONTROL_DT, SETTLE_ACTION, SUITES, LiberoHost
from replay.policies import check_action, load_policy
from scoring.errors import SafeVLAError
from scoring.io import atomic_write_bytes, save_record
from scoring.schema import EpisodeRecord

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
    from scoring.registry import load_registry
    return load_registry()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One finished (or skipped) episode."""

    path: str
    success: bool | None
    steps: int
    skipped: bool = False


def run_episode(host: LiberoHost, policy: Callable, *, init_state: int, seed: int, model: str = "unknown",
                max_steps: int | None = None, record: bool = True, mjcf: str | Callable[[str], str] | None = None,
                episode_id: str | None = None, on_step: Callable | None = None) -> tuple[EpisodeRecord | None, bool, int]:
    """Runs one LIBERO episode; returns (record or None, LIBERO success, policy steps).

    `on_step(t, obs, reward, done)` sees every step (tests use it to compare rollouts).
    `mjcf` is what the record's `replay.mjcf` says: a string, a function of the scene XML
    (e.g. one that stores it and returns a path), or None for the XML itself.
    """
    task = host.task
    horizon = task.max_steps if max_steps is None else int(max_steps)
    obs = host.reset(init_state=init_state, seed=seed)
    if hasattr(policy, "set_task"):
        policy.set_task(host.task_info())
    if hasattr(policy, "reset"):
        policy.reset()
    recorder = host.make_recorder(qpos_dtype=np.float32) if record else None
    if recorder is not None:
        recorder.observe(host.model, host.data)
    actions = [SETTLE_ACTION.copy()]
    done = False
    steps = 0
    for steps in range(1, horizon + 1):
        action = check_action(policy(obs, task.language), step=steps - 1)
        obs, reward, done, _ = host.step(action.copy())  # a copy: the env may keep a reference
        actions.append(action)
        if recorder is not None:
            recorder.observe(host.model, host.data)
        if on_step is not None:
            on_step(steps, obs, reward, done)
        if done:
            break
    success = host.check_success()
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
    rec = recorder.to_record(
        episode_id=episode_id or f"{task.benchmark}/{task.task_id}/{model}/ep_{init_state:03d}",
        benchmark=task.benchmark, task_id=task.task_id, success=success, dt=CONTROL_DT,
        actions=np.array(actions), meta=meta, mjcf=mjcf, camera=CAMERA)
    return rec, success, steps


def episode_path(archive: str | os.PathLike, suite: str, task: int, model: str, k: int) -> Path:
    return Path(archive) / suite / f"task_{task}" / model / f"ep_{k:03d}.npz"


def store_mjcf(archive: str | os.PathLike, xml: str) -> Path:
    """Writes the scene XML once per distinct content; returns its path."""
    digest = hashlib.sha256(xml.encode()).hexdigest()[:16]
    path = Path(archive) / "models" / f"{digest}.xml"
    if not path.exists():
        atomic_write_bytes(path, xml.encode())
    return path


def run_task(suite: str, task: int, episodes: Sequence[int], *, policy_spec: str, archive: str, seed: int,
             max_steps: int | None = None, model: str | None = None, progress: Callable | None = None) -> list[Outcome]:
    """Runs the given episodes of one task with one env (the unit of work of a worker)."""
    name, factory = load_policy(policy_spec)
    model = model or name
    todo = [k for k in episodes if not episode_path(archive, suite, task, model, k).exists()]
    out = [Outcome(str(episode_path(archive, suite, task, model, k)), None, 0, skipped=True)
           for k in episodes if k not in todo]
    if not todo:
        return out
    host = LiberoHost(suite, task)
    try:
        policy = factory()
        for k in todo:
            path = episode_path(archive, suite, task, model, k)
            # the scene differs per seed (LIBERO samples fixture placements at reset)
            def stored(xml: str, where: Path = path.parent) -> str:
                return os.path.relpath(store_mjcf(archive, xml), where)
            rec, success, steps = run_episode(host, policy, init_state=k, seed=seed + k, model=model,
                                              max_steps=max_steps, mjcf=stored)
            save_record(rec, path, compress=True)
            if rec.meta.get("settled") is False:  # recorded and flagged, never silently scored
                print(f"warning: {path}: the scene was not at rest after {rec.meta['settle_steps']} no-op steps "
                      f"({rec.meta.get('settle_moving_body')} still moving); recorded with settled=false, "
                      "left out of report aggregates", file=sys.stderr)
            out.append(Outcome(str(path), success, steps))
            if progress is not None:
                progress(out[-1])
    finally:
        host.close()
    return out


def _task_job(job: tuple) -> list[Outcome]:
    suite, task, episodes, kwargs = job
    return run_task(suite, task, episodes, **kwargs)


def parse_tasks(text: str) -> list[int]:
    """'0-9', '0,3,5' or '2' -> sorted task indices."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            elif part:
                out.add(int(part))
    except ValueError:
        raise SafeVLAError(f"--tasks expects indices like 0-9 or 0,3,5; got {text!r}") from None
    if not out or min(out) < 0:
        raise SafeVLAError(f"--tasks expects non-negative task indices; got {text!r}")
    return sorted(out)


def add_rollout_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rollout", help="run a policy on LIBERO tasks and record trajectory archives",
        description="Run a policy on LIBERO under the standard protocol (episode k = init state k, seed SEED+k, "
                    "suite horizon, stop at LIBERO success) and record one .npz per episode. Re-running skips "
                    "episodes already recorded.")
    p.add_argument("--suite", required=True, choices=sorted(SUITES), help="LIBERO suite")
    p.add_argument("--tasks", default="0-9", help="task indices, e.g. 0-9 or 0,3,5 (default 0-9)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per task = init states 0..N-1 (default 20)")
    p.add_argument("--policy", required=True,
                   help="scripted profile (careful, hasty, sloppy) or module:callable for your own policy")
    p.add_argument("--out", required=True, help="archive directory")
    p.add_argument("--workers", type=int, default=1, help="worker processes, one LIBERO env each (default 1)")
    p.add_argument("--seed", type=int, default=0, help="base seed; episode k uses SEED+k (default 0)")
    p.add_argument("--max-steps", type=int, default=None, help="override the suite's horizon")
    p.add_argument("--model-name", default=None, help="model name recorded in meta.model (default from --policy)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local process pool (default) or Ray actors: env workers + a policy server (docs/cluster.md)")
    p.add_argument("--address", default=None, help="Ray cluster address for --engine ray (default: start Ray locally)")
    p.set_defaults(func=run_rollout)
    return p


def run_rollout(args) -> int:
    try:
        name, _ = load_policy(args.policy)
    except ValueError as exc:
        raise SafeVLAError(f"--policy: {exc}") from None
    if args.episodes < 1:
        raise SafeVLAError(f"--episodes expects a positive integer, got {args.episodes}")
    if args.workers < 1:
        raise SafeVLAError(f"--workers expects a positive integer, got {args.workers}")
    if args.max_steps is not None and args.max_steps < 1:
        raise SafeVLAError(f"--max-steps expects a positive integer, got {args.max_steps}")
    tasks = parse_tasks(args.tasks)
    try:
        from replay.hosts.libero import libero_task
        infos = [libero_task(args.suite, t) for t in tasks]
    except ImportError as exc:
        raise SafeVLAError(f"LIBERO is not installed ({exc}); pip install 'safevla-bench[libero]'") from None
    except ValueError as exc:
        raise SafeVLAError(f"--tasks: {exc}") from None
    short = min(i.n_init_states for i in infos)
    if args.episodes > short:
        raise SafeVLAError(f"--episodes {args.episodes}: LIBERO has only {short} init states per task")
    kwargs = {"policy_spec": args.policy, "archive": args.out, "seed": args.seed, "max_steps": args.max_steps,
              "model": args.model_name or name}
    jobs = [(args.suite, t, list(range(args.episodes)), kwargs) for t in tasks]
    if getattr(args, "engine", "local") == "ray":
        from replay.ray_engine import run_jobs_ray  # Ray stays optional: imported only here
        run_jobs_ray(jobs, workers=args.workers, address=args.address, progress=not args.no_progress)
    else:
        run_jobs(jobs, workers=args.workers, progress=not args.no_progress)
    return 0


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
    ran = [o for o in results if not o.skipped]
    ok = sum(bool(o.success) for o in ran)
    print(f"recorded {len(ran)} episodes ({ok} successful), skipped {total - len(ran)} already recorded, "
          f"{time.time() - t0:.0f} s", file=sys.stderr)
    return results
