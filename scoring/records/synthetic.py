"""Synthetic trajectory records for tests, benchmarks and scale checks.

These are NOT rollouts: they are random, loosely physical trajectories with the shapes
and value ranges of real LIBERO records (a pick-and-place arc, bystanders, contacts,
torques, occasional violations of each family). Stores built from them say so in their
manifest (`synthetic: true`).
"""

from __future__ import annotations

import numpy as np

from scoring.records.schema import EpisodeRecord

MODELS = ("policy-a", "policy-b", "policy-c", "policy-d")
SUITES = ("libero-spatial", "libero-object", "libero-goal", "libero-10")


def _quat_about(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    axis = axis / np.linalg.norm(axis)
    half = angle / 2
    return np.concatenate([np.cos(half)[:, None], np.sin(half)[:, None] * axis[None, :]], axis=1)


def make_record(rng: np.random.Generator, *, episode_id: str, benchmark: str = "libero-spatial",
                task_id: str = "task_0", model: str = "policy-a", n_steps: int = 300,
                contacts_per_step: int = 40, n_bystanders: int = 3, severity: float = 1.0,
                with_replay: bool = False, substep_peaks: bool = False) -> EpisodeRecord:
    """One random episode: a target carried in an arc, bystanders, robot links, furniture.

    `severity` scales how often and how hard the episode violates specs (0 = clean).
    Bodies: 2 robot links, 1 gripper, 1 target, `n_bystanders` bystanders, 1 furniture
    (8 bodies with the defaults). `substep_peaks` adds peak channels above the sampled
    ones (force_sampling "substep_peak") and replay controls; without it, the random
    stream, hence the record, is what it always was for a seed.
    """
    T = n_steps
    bodies = {"robot0_link5": "robot", "robot0_link7": "robot", "gripper0_hand": "gripper",
              "target_1_main": "target", **{f"bystander_{i}_main": "bystander" for i in range(n_bystanders)},
              "table": "furniture"}
    names = list(bodies)
    s = np.linspace(0.0, 1.0, T)
    start = np.array([0.5, -0.1, 0.9]) + rng.normal(0, 0.02, 3)
    goal = start + np.array([0.1, 0.25, 0.0])
    eef = start + (goal - start) * s[:, None] + np.array([0, 0, 0.15]) * np.sin(np.pi * s)[:, None]
    eef += rng.normal(0, 0.0005, (T, 3))
    grasp_on, grasp_off = int(0.25 * T), int(0.8 * T)
    grip = np.zeros(T, dtype=bool)
    grip[grasp_on:grasp_off] = True
    tgt = np.repeat(start[None, :] - np.array([0, 0, 0.1]), T, axis=0)
    tgt[grasp_on:grasp_off] = eef[grasp_on:grasp_off] - np.array([0, 0, 0.1])
    tgt[grasp_off:] = tgt[grasp_off - 1]
    if rng.random() < 0.15 * severity:  # slip in the hand
        k = rng.integers(grasp_on + 5, grasp_off - 5)
        tgt[k:grasp_off, 2] -= rng.uniform(0.005, 0.06)
    by_pos = np.repeat(rng.uniform([0.4, -0.3, 0.8], [0.7, 0.3, 0.8], (1, n_bystanders, 3)), T, axis=0)
    if rng.random() < 0.3 * severity:  # a bystander pushed
        k = rng.integers(T // 4, T)
        by_pos[k:, rng.integers(n_bystanders), :2] += rng.uniform(0.001, 0.02, 2)
    pose_bodies = ["target_1_main", *[f"bystander_{i}_main" for i in range(n_bystanders)]]
    body_pos = np.concatenate([tgt[:, None, :], by_pos], axis=1)
    angle = np.zeros(T)
    if rng.random() < 0.2 * severity:  # tilted carry
        angle[grasp_on:grasp_off] = np.radians(rng.uniform(5, 40)) * np.sin(np.linspace(0, np.pi, grasp_off - grasp_on))
    tq = _quat_about(rng.normal(size=3), angle)
    body_quat = np.concatenate([tq[:, None, :], np.tile([1.0, 0, 0, 0], (T, n_bystanders, 1))], axis=1)
    torque = rng.normal(0, 1, (T, 7)) * np.array([20, 20, 20, 20, 3, 3, 3])
    if rng.random() < 0.05 * severity:
        torque[rng.integers(T), 1] = rng.uniform(80, 120)
    step = np.repeat(np.arange(T, dtype=np.int32), contacts_per_step)
    n_c = step.size
    a = rng.integers(0, len(names), n_c).astype(np.int32)
    b = rng.integers(0, len(names), n_c).astype(np.int32)
    robot_ids = [i for i, r in enumerate(bodies.values()) if r in ("robot", "gripper")]
    # keep self-contacts rare: remap random robot x robot pairs onto the table
    rr = np.isin(a, robot_ids) & np.isin(b, robot_ids)
    b[rr] = names.index("table")
    force = rng.exponential(2.0, n_c)
    if rng.random() < 0.25 * severity:
        force[rng.integers(n_c)] = rng.uniform(150, 600)
    if rng.random() < 0.02 * severity:
        i = rng.integers(n_c)
        a[i], b[i] = robot_ids[0], robot_ids[1]
    gi = names.index("gripper0_hand")
    ti = names.index("target_1_main")
    g_steps = np.nonzero(grip)[0]
    step = np.concatenate([step, g_steps.astype(np.int32)])
    a = np.concatenate([a, np.full(g_steps.size, gi, np.int32)])
    b = np.concatenate([b, np.full(g_steps.size, ti, np.int32)])
    force = np.concatenate([force, rng.uniform(2, 7, g_steps.size)])
    order = np.argsort(step, kind="stable")
    fields = dict(
        episode_id=episode_id, benchmark=benchmark, task_id=task_id, success=bool(rng.random() < 0.85),
        dt=0.05, target_object="target_1_main", body_roles=bodies, eef_pos=eef, pose_bodies=pose_bodies,
        body_pos=body_pos, quat_bodies=pose_bodies, body_quat=body_quat, joint_torque=torque,
        gripper_contact=grip,
        # the compact dtypes a host writes: int16 indices (steps in int32 past int16's range), float32 forces
        contacts={"step": step[order].astype(np.int16 if T <= np.iinfo(np.int16).max + 1 else np.int32),
                  "a": a[order].astype(np.int16),
                  "b": b[order].astype(np.int16), "force": force[order].astype(np.float32)},
        meta={"model": model, "suite": benchmark, "seed": int(rng.integers(1 << 30)), "synthetic": True})
    if with_replay:
        fields["replay"] = {"mjcf": "<mujoco/>", "qpos": np.zeros((T, 0)), "qvel": np.zeros((T, 0))}
    if substep_peaks:
        sampled = fields["contacts"]["force"]
        # impacts between control steps: peaks 1-10x the end-of-step sample, a few far above
        fields["contacts"]["force_peak"] = (sampled * (1 + rng.exponential(0.5, sampled.size))
                                            + rng.exponential(1.0, sampled.size)).astype(np.float32)
        fields["joint_torque_peak"] = torque * (1 + rng.exponential(0.3, torque.shape))
        fields["meta"]["force_sampling"] = "substep_peak"
        if with_replay:
            fields["replay"]["ctrl"] = rng.normal(0, 10, (T, 8)).astype(np.float32)
    return EpisodeRecord.build(**fields)


def make_archive(directory, n_episodes: int, *, seed: int = 0, n_steps: int = 300, contacts_per_step: int = 40,
                 compress: bool = False, models=MODELS, suites=SUITES) -> list:
    """Writes `n_episodes` synthetic `.npz` records into `directory`; returns their paths."""
    from pathlib import Path

    from scoring.records.io import save_record
    rng = np.random.default_rng(seed)
    directory = Path(directory)
    paths = []
    for i in range(n_episodes):
        model = models[i % len(models)]
        suite = suites[(i // len(models)) % len(suites)]
        task = f"task_{(i // (len(models) * len(suites))) % 10}"
        rec = make_record(rng, episode_id=f"{suite}/{task}/{model}/ep_{i:06d}", benchmark=suite, task_id=task,
                          model=model, n_steps=n_steps, contacts_per_step=contacts_per_step,
                          severity=1.0 + 0.5 * models.index(model))
        paths.append(save_record(rec, directory / f"ep_{i:06d}.npz", compress=compress))
    return paths
