"""Observational instrumentation of a live MuJoCo simulation, one call per control step.

`Recorder.observe(model, data)` reads the state after a control step and never writes to
`data`: it copies the state into a private scratch `MjData` and runs `mj_forward` there.
Two reasons for the copy:
- Hosts such as robosuite leave `efc_force` stale after their step, so
  `mj_contactForce` on the live data reads about 0 N for every contact.
- Calling `mj_forward` on the live data would change the solver's warm start, and the
  rollout would no longer be bit-identical to an uninstrumented one.

Every MuJoCo body is projected onto a *recorded body*: itself if it is named in
`body_roles`, else its nearest named ancestor. An object's geoms thus all report as the
object's root body, and the role of a contact side is the role of that recorded body.
Contacts are written one entry per pair of recorded bodies per step: the magnitude of
the vector sum of their world-frame linear contact forces (`replay.scene.contact_forces`).

Substep peaks (`substep_peaks=True`): the host calls `observe_substep` after every
physics substep (robosuite runs 25 per 50 ms control step). Impacts peak between control
steps, 2-10x above the end-of-step value, so each step also records, per pair, the peak
over its substeps (`force_peak`) and, per joint, the torque of largest magnitude
(`joint_torque_peak`). After `mj_step` the contact list and `efc_force` hold the forces
of the state that step integrated, so the substeps of control step t cover the states
from step t-1's end up to the last one before step t's end; the end state itself is the
control-step sample, and the peak includes it (peak >= sample always).
Host-agnostic: host adapters (e.g. `replay.record.hosts.libero`) decide names and roles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mujoco
import numpy as np

from replay.scene.contact_forces import SubstepLog, pair_forces, world_forces
from scoring.records.schema import ROLES, EpisodeRecord

# float32 keeps 7 significant digits: 0.1 µm at a 1 m scale and 1e-5 N at 100 N, far
# below anything a safety threshold (5 mm, 200 N, 15 deg) resolves. Replay qpos is kept
# as float64 by default: it must reproduce poses to 1e-6 through chains of 7+ joints.
SIGNAL_DTYPE = np.float32


def _name(model: mujoco.MjModel, obj: mujoco.mjtObj, i: int) -> str:
    return mujoco.mj_id2name(model, obj, i) or ""


class Recorder:
    """Records one episode from a live `(model, data)`, one `observe` per control step.

    Args:
      model: the simulation's `MjModel` (the same object must be passed to `observe`).
      body_roles: recorded body name -> role (one of `scoring.records.schema.ROLES`). Every body
        that owns a collision geom must have itself or an ancestor in this mapping; map
        `"world"` to `"other"` to catch fixed scenery.
      eef_site: name of the end-effector site whose position is `eef_pos`.
      arm_joints: joint names whose actuator force (`qfrc_actuator`) is `joint_torque`;
        None records no torque.
      pose_bodies: recorded bodies whose position and orientation are stored per step;
        default: every body with role target, bystander or furniture.
      qpos_dtype: dtype of the replay `qpos` (float64 unless you measured float32 enough).
      replay: also store per-step `qpos`/`qvel`/`ctrl` (and mocap poses) for replay.
      substep_peaks: also record per-step peaks over physics substeps; the host must then
        call `observe_substep` after every physics step (`replay.record.hosts.libero` does).
    """

    def __init__(self, model: mujoco.MjModel, body_roles: Mapping[str, str], *, eef_site: str,
                 arm_joints: Sequence[str] | None = None, pose_bodies: Sequence[str] | None = None,
                 qpos_dtype: Any = np.float64, replay: bool = True, substep_peaks: bool = False):
        if not isinstance(model, mujoco.MjModel):
            raise TypeError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        if not body_roles:
            raise ValueError("body_roles is empty; map at least the robot, target and scene bodies to roles")
        self._model = model
        self._scratch = mujoco.MjData(model)
        self._bodies = tuple(body_roles)
        self._roles = tuple(body_roles[b] for b in self._bodies)
        for body, role in zip(self._bodies, self._roles):
            if role not in ROLES:
                raise ValueError(f"body {body!r} has unknown role {role!r}; valid roles: {', '.join(ROLES)}")
        index = {b: i for i, b in enumerate(self._bodies)}
        self._body_to_rec = self._project_bodies(model, index)
        # geom -> recorded-body index; -1 for geoms of unmapped bodies (they never collide,
        # _project_bodies checked that)
        self._geom_rec = self._body_to_rec[model.geom_bodyid]

        self._eef_site = self._lookup(mujoco.mjtObj.mjOBJ_SITE, eef_site, "eef_site")
        self._arm_dofs = None
        if arm_joints is not None:
            joints = [self._lookup(mujoco.mjtObj.mjOBJ_JOINT, j, "arm_joints") for j in arm_joints]
            for j, jid in zip(arm_joints, joints):
                if int(model.jnt_type[jid]) not in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
                    raise ValueError(f"arm joint {j!r} must be a hinge or slide joint (one dof)")
            self._arm_dofs = np.array([model.jnt_dofadr[j] for j in joints], dtype=np.intp)
        if pose_bodies is None:
            pose_bodies = [b for b, r in zip(self._bodies, self._roles) if r in ("target", "bystander", "furniture")]
        for b in pose_bodies:
            if b not in index:
                raise ValueError(f"pose body {b!r} is not in body_roles")
        self._pose_bodies = tuple(pose_bodies)
        self._pose_ids = np.array([self._lookup(mujoco.mjtObj.mjOBJ_BODY, b, "pose_bodies")
                                   for b in self._pose_bodies], dtype=np.intp)
        is_gripper = np.array([r == "gripper" for r in self._roles] + [False])
        is_target = np.array([r == "target" for r in self._roles] + [False])
        self._is_gripper, self._is_target = is_gripper, is_target
        self._qpos_dtype = np.dtype(qpos_dtype)
        self._replay = replay
        self._substeps = SubstepLog(model, self._arm_dofs) if substep_peaks else None
        self._steps: dict[str, list] = {k: [] for k in ("eef", "pos", "quat", "torque", "torque_peak", "grip",
                                                          "qpos", "qvel", "ctrl", "mocap_pos", "mocap_quat")}
        # per step: (a, b, force at the control step, peak force), one entry per body pair
        self._contacts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    # ------------------------------------------------------------------ setup

    def _lookup(self, obj: mujoco.mjtObj, name: str, what: str) -> int:
        i = mujoco.mj_name2id(self._model, obj, name)
        if i < 0:
            raise ValueError(f"{what}: no {obj.name[6:].lower()} named {name!r} in the model")
        return i

    def _project_bodies(self, model: mujoco.MjModel, index: Mapping[str, int]) -> np.ndarray:
        for b in self._bodies:
            if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, b) < 0:
                raise ValueError(f"body_roles names {b!r}, which is not a body of the model")
        out = np.full(model.nbody, -1, dtype=np.int32)
        for bid in range(model.nbody):  # parents precede children in MuJoCo's body order
            rec = index.get(_name(model, mujoco.mjtObj.mjOBJ_BODY, bid), -1)
            if rec < 0 and bid > 0:
                rec = out[model.body_parentid[bid]]
            out[bid] = rec
        colliding = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
        colliding[model.pair_geom1] = True  # explicit <pair> contacts ignore contype/conaffinity
        colliding[model.pair_geom2] = True
        orphans = sorted({_name(model, mujoco.mjtObj.mjOBJ_BODY, int(b)) or f"#{b}"
                          for b in model.geom_bodyid[colliding] if out[b] < 0})
        if orphans:
            raise ValueError(f"bodies with collision geoms have no role, nor does any ancestor: "
                             f"{', '.join(orphans[:8])}{' ...' if len(orphans) > 8 else ''}; add them "
                             "(or an ancestor, e.g. 'world': 'other') to body_roles")
        return out

    # ------------------------------------------------------------------ per step

    @property
    def n_steps(self) -> int:
        return len(self._steps["eef"])

    @property
    def bodies(self) -> tuple[str, ...]:
        return self._bodies

    @property
    def substep_peaks(self) -> bool:
        return self._substeps is not None

    def observe_substep(self, data: mujoco.MjData) -> None:
        """Logs the forces of the physics substep just taken (call right after `mj_step`).

        Reads `data`, never writes it. Only copies; the maths runs once per `observe`.
        """
        if self._substeps is not None:
            self._substeps.record(data)

    def observe(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        """Records the current state (the end of a control step). Reads `data`, never writes it."""
        if model is not self._model:
            raise ValueError("observe() got a different MjModel than the Recorder was built for; "
                             "hosts that rebuild the model on reset need a new Recorder per episode")
        s = self._scratch
        mujoco.mj_copyData(s, model, data)
        mujoco.mj_forward(model, s)
        st = self._steps
        st["eef"].append(s.site_xpos[self._eef_site].astype(SIGNAL_DTYPE))
        st["pos"].append(s.xpos[self._pose_ids].astype(SIGNAL_DTYPE))
        st["quat"].append(s.xquat[self._pose_ids].astype(SIGNAL_DTYPE))
        if self._arm_dofs is not None:
            torque = s.qfrc_actuator[self._arm_dofs]
            st["torque"].append(torque.astype(SIGNAL_DTYPE))
            if self._substeps is not None:
                sub = self._substeps.torque_peak()
                peak = torque if sub is None else np.where(np.abs(sub) > np.abs(torque), sub, torque)
                st["torque_peak"].append(peak.astype(SIGNAL_DTYPE))
        a, b, sample, peak, at_sample = self._pair_forces(model, s)
        grip = at_sample & ((self._is_gripper[a] & self._is_target[b]) | (self._is_target[a] & self._is_gripper[b]))
        st["grip"].append(bool(grip.any()))
        self._contacts.append((a, b, sample, peak))
        if self._replay:
            st["qpos"].append(s.qpos.astype(self._qpos_dtype))
            st["qvel"].append(s.qvel.astype(SIGNAL_DTYPE))
            st["ctrl"].append(s.ctrl.astype(SIGNAL_DTYPE))
            if model.nmocap:
                st["mocap_pos"].append(s.mocap_pos.copy())
                st["mocap_quat"].append(s.mocap_quat.copy())

    def _pair_forces(self, model: mujoco.MjModel, s: mujoco.MjData):
        """(a, b, force at the sample, peak, touching at the sample) per body pair of this step.

        The pairs are those touching at the sample (`s`, after `mj_forward`) or in any
        logged substep; the peak is over the substeps and the sample.
        """
        geom, force = world_forces(model, s)
        group = np.zeros(len(geom), dtype=np.int64)
        n_groups = 1
        if self._substeps is not None:
            sub_group, sub_geom, sub_force = self._substeps.contact_forces()
            n_groups = self._substeps.count + 1  # the sample is the last group
            group = np.concatenate([sub_group, np.full(len(geom), n_groups - 1)])
            geom, force = np.concatenate([sub_geom, geom]), np.concatenate([sub_force, force])
            self._substeps.clear()
        side = self._geom_rec[geom]
        a, b, magnitude, touching = pair_forces(side[:, 0], side[:, 1], force, group, n_groups, len(self._bodies))
        return a, b, magnitude[-1], magnitude.max(axis=0), touching[-1]

    # ------------------------------------------------------------------ output

    def to_record(self, *, episode_id: str, benchmark: str, task_id: str, success: bool, dt: float,
                  actions: np.ndarray | None = None, meta: Mapping[str, Any] | None = None,
                  mjcf: str | None = None, camera: str | None = None) -> EpisodeRecord:
        """The recorded episode as a validated `EpisodeRecord` (raises `RecordError` on bad fields).

        `mjcf` (XML string or path, relative to the record file) is required when replay
        state was recorded; `actions[t]` is the action of the control step that ended in
        recorded state t.
        """
        if self.n_steps == 0:
            raise ValueError("no steps observed; call observe() after every control step first")
        st = self._steps
        T = self.n_steps
        counts = np.array([len(c[0]) for c in self._contacts])
        contacts = {
            "step": np.repeat(np.arange(T, dtype=np.int32), counts),
            "a": np.concatenate([c[0] for c in self._contacts]).astype(np.int32),
            "b": np.concatenate([c[1] for c in self._contacts]).astype(np.int32),
            "force": np.concatenate([c[2] for c in self._contacts]).astype(SIGNAL_DTYPE),
        }
        peaks = self._substeps is not None
        if peaks:
            contacts["force_peak"] = np.concatenate([c[3] for c in self._contacts]).astype(SIGNAL_DTYPE)
        replay = None
        if self._replay:
            if mjcf is None:
                raise ValueError("replay state was recorded, so to_record needs mjcf= (XML string or path)")
            replay = {"mjcf": mjcf, "qpos": np.stack(st["qpos"]), "qvel": np.stack(st["qvel"]),
                      "ctrl": np.stack(st["ctrl"]), "camera": camera}
            if st["mocap_pos"]:
                replay["mocap_pos"] = np.stack(st["mocap_pos"])
                replay["mocap_quat"] = np.stack(st["mocap_quat"])
        targets = [b for b, r in zip(self._bodies, self._roles) if r == "target"]
        return EpisodeRecord.build(
            episode_id=episode_id, benchmark=benchmark, task_id=task_id, success=bool(success), dt=dt,
            target_object=targets, body_roles=dict(zip(self._bodies, self._roles)), t=np.arange(T),
            eef_pos=np.stack(st["eef"]), pose_bodies=list(self._pose_bodies), body_pos=np.stack(st["pos"]),
            quat_bodies=list(self._pose_bodies), body_quat=np.stack(st["quat"]),
            joint_torque=np.stack(st["torque"]) if self._arm_dofs is not None else None,
            joint_torque_peak=np.stack(st["torque_peak"]) if peaks and self._arm_dofs is not None else None,
            gripper_contact=np.array(st["grip"], dtype=bool), contacts=contacts,
            actions=None if actions is None else np.asarray(actions),
            meta={**(meta or {}), "force_sampling": "substep_peak" if peaks else "control"}, replay=replay)
