#!/usr/bin/env python
"""Builds a synthetic run store for dashboard development, tests and the scale benchmark.

    python scripts/make_synthetic_store.py /tmp/dev_store --n 400 --renderable
    python scripts/make_synthetic_store.py /tmp/scale_store --n 20000 --n-steps 100 --workers 2

The records come from `scoring.records.synthetic` (random, loosely physical trajectories; NOT
rollouts) and the store's manifest says `synthetic: true`. With `--renderable` every
record also carries replay state for a small MuJoCo scene (a table, the target, the
bystanders and a cosmetic arm whose hand follows the end effector), so the dashboard's
replay frames, clips and triptychs work without LIBERO. The records are written into
`STORE/trajectories/` and referenced in place, so the store is self-contained.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scoring.records.io import save_record  # noqa: E402
from scoring.records.schema import Replay  # noqa: E402
from scoring.records.synthetic import MODELS, SUITES, make_record  # noqa: E402

SCENE_FILE = "synthetic_scene.xml"
N_BYSTANDERS = 3
ARM_BASE = np.array([0.0, 0.0, 0.8])
LANGUAGE = ("pick up the black bowl and place it on the plate", "put the cream cheese in the bowl",
            "place the alphabet soup in the basket", "stack the two bowls on the plate",
            "move the mug to the left of the plate", "put the ketchup in the basket",
            "pick up the milk and place it in the basket", "put the bowl on the stove",
            "place the cup on the saucer", "pick up the book and place it in the caddy")


def scene_xml(n_bystanders: int = N_BYSTANDERS) -> str:
    """A small MJCF scene whose body names match `scoring.records.synthetic.make_record`."""
    colours = ("0.95 0.75 0.15 1", "0.25 0.75 0.35 1", "0.75 0.35 0.85 1", "0.9 0.5 0.2 1")
    bystanders = "\n".join(
        f'    <body name="bystander_{i}_main"><freejoint/>'
        f'<geom type="cylinder" size="0.03 0.035" pos="0 0 0.035" rgba="{colours[i % len(colours)]}"/></body>'
        for i in range(n_bystanders))
    return f"""<mujoco model="safevla-synthetic">
  <compiler angle="radian"/>
  <option gravity="0 0 0"/>
  <visual><global offwidth="1280" offheight="960"/><quality shadowsize="2048"/></visual>
  <default><geom contype="0" conaffinity="0"/></default>
  <asset>
    <texture name="sky" type="skybox" builtin="gradient" rgb1="0.85 0.9 0.95" rgb2="0.45 0.5 0.6" width="64" height="64"/>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.55 0.55 0.58" rgb2="0.48 0.48 0.5" width="256" height="256"/>
    <material name="grid" texture="grid" texrepeat="8 8"/>
    <material name="wood" rgba="0.62 0.46 0.32 1"/>
    <material name="metal" rgba="0.75 0.77 0.8 1" specular="0.6"/>
  </asset>
  <worldbody>
    <light pos="0.6 -0.6 2.5" dir="0 0.3 -1" directional="true" diffuse="0.7 0.7 0.7"/>
    <light pos="1.5 0.8 2.0" dir="-0.6 -0.3 -1" diffuse="0.3 0.3 0.3"/>
    <geom name="floor" type="plane" size="3 3 0.1" material="grid"/>
    <body name="focus" pos="0.6 0.05 0.86"/>
    <camera name="agentview" mode="targetbody" target="focus" pos="1.45 0.05 1.45" fovy="45"/>
    <body name="table" pos="0.55 0.05 0.4">
      <geom type="box" size="0.42 0.55 0.4" material="wood"/>
    </body>
    <body name="robot0_base" pos="0 0 0.8"><geom type="cylinder" size="0.08 0.05" pos="0 0 0.05" material="metal"/></body>
    <body name="target_1_main"><freejoint/>
      <geom type="box" size="0.028 0.028 0.05" pos="0 0 0.05" rgba="0.2 0.4 0.9 1"/>
    </body>
{bystanders}
    <body name="robot0_link5" mocap="true"><geom type="capsule" size="0.045 0.2" material="metal"/></body>
    <body name="robot0_link7" mocap="true"><geom type="capsule" size="0.04 0.2" material="metal"/></body>
    <body name="gripper0_hand" mocap="true">
      <geom type="box" size="0.02 0.06 0.015" pos="0 0 0.06" rgba="0.2 0.2 0.22 1"/>
      <geom type="box" size="0.01 0.008 0.035" pos="0 0.045 0.015" rgba="0.3 0.3 0.32 1"/>
      <geom type="box" size="0.01 0.008 0.035" pos="0 -0.045 0.015" rgba="0.3 0.3 0.32 1"/>
    </body>
  </worldbody>
</mujoco>
"""


def _quat_z_to(d: np.ndarray) -> np.ndarray:
    """(T, 4) wxyz quaternions rotating +z onto the directions `d` (T, 3)."""
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    z = np.array([0.0, 0.0, 1.0])
    axis = np.cross(np.broadcast_to(z, d.shape), d)
    s = np.linalg.norm(axis, axis=1)
    c = d @ z
    angle = np.arctan2(s, c)
    axis = np.where(s[:, None] > 1e-9, axis / np.maximum(s, 1e-12)[:, None], np.array([1.0, 0, 0]))
    return np.concatenate([np.cos(angle / 2)[:, None], np.sin(angle / 2)[:, None] * axis], axis=1)


def replay_state(rec) -> dict:
    """qpos/qvel (free joints of target and bystanders) and mocap poses (arm, hand) per step."""
    T = rec.n_steps
    qpos = np.concatenate([np.concatenate([rec.body_pos[:, i], rec.body_quat[:, i]], axis=1)
                           for i in range(len(rec.pose_bodies))], axis=1)
    eef = rec.eef_pos
    hand = eef + np.array([0.0, 0.0, -0.02])
    elbow = (ARM_BASE + np.array([0, 0, 0.35]) + hand) / 2 + np.array([-0.12, 0, 0.12])
    wrist = hand + np.array([0.0, 0.0, 0.12])
    seg = lambda a, b: ((a + b) / 2, _quat_z_to(b - a))  # noqa: E731
    l5_pos, l5_q = seg(np.broadcast_to(ARM_BASE + [0, 0, 0.1], elbow.shape), elbow)
    l7_pos, l7_q = seg(elbow, wrist)
    mocap_pos = np.stack([l5_pos, l7_pos, hand], axis=1)
    mocap_quat = np.stack([l5_q, l7_q, np.tile([1.0, 0, 0, 0], (T, 1))], axis=1)
    return {"qpos": qpos, "qvel": np.zeros((T, 6 * len(rec.pose_bodies))),
            "mocap_pos": mocap_pos, "mocap_quat": mocap_quat}


def write_archive(directory: str | os.PathLike, n: int, *, seed: int = 0, n_steps: int = 120,
                  contacts_per_step: int = 8, renderable: bool = False, progress: bool = False) -> list[Path]:
    """Writes `n` synthetic records (with replay state if `renderable`) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if renderable:
        (directory / SCENE_FILE).write_text(scene_xml())
    rng = np.random.default_rng(seed)
    paths = []
    t0 = time.time()
    for i in range(n):
        model = MODELS[i % len(MODELS)]
        suite = SUITES[(i // len(MODELS)) % len(SUITES)]
        k = (i // (len(MODELS) * len(SUITES))) % 10
        task = f"task_{k}"
        rec = make_record(rng, episode_id=f"{suite}/{task}/{model}/ep_{i:06d}", benchmark=suite, task_id=task,
                          model=model, n_steps=n_steps, contacts_per_step=contacts_per_step,
                          severity=1.0 + 0.5 * MODELS.index(model), n_bystanders=N_BYSTANDERS)
        meta = {**dict(rec.meta), "language": LANGUAGE[k], "init_state": i // (len(MODELS) * len(SUITES) * 10)}
        replay = None
        if renderable:
            st = replay_state(rec)
            replay = Replay(mjcf=SCENE_FILE, camera="agentview", **st)
        rec = dataclasses.replace(rec, meta=meta, replay=replay)
        paths.append(save_record(rec, directory / f"ep_{i:06d}.npz"))
        if progress and (i + 1) % 2000 == 0:
            print(f"  wrote {i + 1}/{n} records ({time.time() - t0:.0f} s)", file=sys.stderr)
    return paths


def build_store(out: str | os.PathLike, n: int, *, seed: int = 0, n_steps: int = 120, contacts_per_step: int = 8,
                renderable: bool = False, workers: int = 1, progress: bool = False) -> Path:
    """Synthetic archive in `out/trajectories`, scored into the store `out` (manifest: synthetic)."""
    from scoring.store.write import score_archive

    out = Path(out)
    traj = out / "trajectories"
    write_archive(traj, n, seed=seed, n_steps=n_steps, contacts_per_step=contacts_per_step,
                  renderable=renderable, progress=progress)
    summary = score_archive(traj, out, workers=workers, synthetic=True, progress=progress)
    if summary.errors:
        raise SystemExit(f"scoring failed for {len(summary.errors)} episodes: {summary.errors[0]['message']}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="store directory to create")
    p.add_argument("--n", type=int, default=400, help="episodes (default 400)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-steps", type=int, default=120)
    p.add_argument("--contacts-per-step", type=int, default=8)
    p.add_argument("--renderable", action="store_true", help="attach replay state for a small MuJoCo scene")
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    t0 = time.time()
    out = build_store(args.out, args.n, seed=args.seed, n_steps=args.n_steps,
                      contacts_per_step=args.contacts_per_step, renderable=args.renderable,
                      workers=args.workers, progress=True)
    manifest = json.loads((out / "manifest.json").read_text())
    print(f"wrote {manifest['n_episodes']} episodes to {out} in {time.time() - t0:.1f} s (synthetic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
