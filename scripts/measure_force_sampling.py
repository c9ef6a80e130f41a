"""Measures what substep peaks and per-pair forces change on real LIBERO episodes.

    python scripts/measure_force_sampling.py --suite libero_goal --tasks 1,4 --episodes 3 --policy hasty

Records each episode with the current recorder (per-pair forces, substep peaks), then
rebuilds from its replay state (qpos, qvel, ctrl through `mj_forward`, which reproduces
the recorded forces within 1%) what the old recorder wrote: one entry per contact point,
the control-step value only. It scores the episode three ways:

- point/control: the old recorder (per-point maximum, sampled once per control step);
- pair/control:  `safevla score --force-sampling control` on the new record;
- pair/peak:     the default, per-pair peaks over the physics substeps.

Prints one JSON line per episode on stderr and a summary JSON line on stdout: the
median and largest ratios of episode force maxima, and per variant the share of
episodes that violate max_contact_force, joint_torque, and that are safe.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

VARIANTS = ("point/control", "pair/control", "pair/peak")


def per_point_record(rec):
    """The record as the old recorder wrote it: one contact entry per point, control-step forces."""
    import mujoco

    from replay.scene.contact_forces import world_forces
    from scoring.records.schema import Contacts
    model = mujoco.MjModel.from_xml_string(rec.replay.mjcf)
    data = mujoco.MjData(model)
    index = {b: i for i, b in enumerate(rec.bodies)}
    body_of = np.full(model.nbody, -1)
    for b in range(model.nbody):  # parents come first
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b)
        body_of[b] = index.get(name, body_of[model.body_parentid[b]] if b else -1)
    steps, a, b, force = [], [], [], []
    for t in range(rec.n_steps):
        data.qpos[:], data.qvel[:], data.ctrl[:] = rec.replay.qpos[t], rec.replay.qvel[t], rec.replay.ctrl[t]
        mujoco.mj_forward(model, data)
        geom, world = world_forces(model, data)
        steps += [t] * len(geom)
        a += body_of[model.geom_bodyid[geom[:, 0]]].tolist()
        b += body_of[model.geom_bodyid[geom[:, 1]]].tolist()
        force += np.linalg.norm(world, axis=1).tolist()
    contacts = Contacts(step=np.array(steps, np.int32), a=np.array(a, np.int32), b=np.array(b, np.int32),
                        force=np.array(force, np.float32))
    return dataclasses.replace(rec, contacts=contacts, joint_torque_peak=None,
                               meta={**rec.meta, "force_sampling": "control"})


def scored(rec, legacy) -> dict:
    from scoring.evaluate.score import score_episode
    out = {}
    for name, record, sampling in (("point/control", legacy, "control"), ("pair/control", rec, "control"),
                                   ("pair/peak", rec, "peak")):
        res = score_episode(record, force_sampling=sampling)
        specs = {s.family: s for s in res.specs}
        out[name] = {"max_force": specs["max_contact_force"].extreme, "torque_ratio": specs["joint_torque"].extreme,
                     "force_violated": specs["max_contact_force"].violated,
                     "torque_violated": specs["joint_torque"].violated, "safe": res.safe}
    return out


def measure(suite: str, tasks: list[int], episodes: int, policy: str) -> list[dict]:
    from replay.record.hosts.libero import LiberoHost
    from replay.record.policies import scripted
    from replay.record.rollout import run_episode
    rows = []
    for task in tasks:
        host = LiberoHost(suite, task)
        try:
            for k in range(episodes):
                rec, success, steps = run_episode(host, scripted(policy)(), init_state=k, model=policy)
                row = {"suite": suite, "task": task, "episode": k, "steps": steps, "success": success,
                       **scored(rec, per_point_record(rec))}
                print(json.dumps(row), file=sys.stderr)
                rows.append(row)
        finally:
            host.close()
    return rows


def summary(rows: list[dict]) -> dict:
    def ratio(num, den):
        r = np.array([row[num]["max_force"] / max(row[den]["max_force"], 1e-9) for row in rows])
        return {"median": round(float(np.median(r)), 2), "max": round(float(r.max()), 2)}
    out = {"episodes": len(rows),
           "max_force_ratio_pair_over_point": ratio("pair/control", "point/control"),
           "max_force_ratio_peak_over_sample": ratio("pair/peak", "pair/control"),
           "max_force_ratio_peak_pair_over_old": ratio("pair/peak", "point/control")}
    for v in VARIANTS:
        out[v] = {"max_force_N_median": round(float(np.median([r[v]["max_force"] for r in rows])), 1),
                  "max_force_violated": round(float(np.mean([r[v]["force_violated"] for r in rows])), 3),
                  "torque_violated": round(float(np.mean([r[v]["torque_violated"] for r in rows])), 3),
                  "safe": round(float(np.mean([r[v]["safe"] for r in rows])), 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="libero_goal")
    p.add_argument("--tasks", default="1", help="comma-separated task indices")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--policy", default="hasty", help="scripted profile: careful, hasty or sloppy")
    args = p.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # LIBERO prints to stdout
        rows = measure(args.suite, [int(t) for t in args.tasks.split(",")], args.episodes, args.policy)
    print(json.dumps({"suite": args.suite, "tasks": args.tasks, "policy": args.policy, **summary(rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
