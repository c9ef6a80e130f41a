"""Trajectory record, schema v1: the in-memory columnar form every loader produces.

One `EpisodeRecord` holds one rollout as arrays (the fast path). The Appendix B JSON
record and the `.npz` columnar file both convert to and from it losslessly
(`scoring.records.io`). Construction goes through `EpisodeRecord.build`, which validates every
field and raises `RecordError` naming the file, episode and field on bad input.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from scoring.records.field_checks import FORCE_SAMPLINGS, FieldChecks  # noqa: F401  (FORCE_SAMPLINGS: the schema's)

SCHEMA_VERSION = 1
ROLES = ("robot", "gripper", "target", "bystander", "furniture", "other")
# Simulators store unit quaternions, but hand-written and rounded records do not quite:
# Appendix B's own example [0.99, 0.02, 0.01, 0.0] has norm 0.9903. Beyond 2% the data
# is not a rotation (a rotation vector, Euler angles, a scaled quaternion). Signals
# re-normalise before use, so the tolerance never changes a score.
QUAT_NORM_TOL = 0.02
# The control step `dt`, in seconds: from 1 MHz (faster than any robot's control loop) to one
# step a minute. Outside it no controller runs, and the derivative signals (speed, acceleration
# and jerk divide by dt, dt**2 and dt**3) leave double precision: dt = 1e-300 gave -inf robustness.
DT_RANGE = (1e-6, 60.0)
# The per-step `t` values (step indices or seconds; scoring reads dt, never t): within +-1e10,
# ten billion steps, or 317 years of seconds with Unix time included.
T_LIMIT = 1e10


@dataclasses.dataclass(frozen=True, eq=False)
class Contacts:
    """All contacts of an episode as flat arrays, one entry per body pair per step
    (records of other tools may list contact points; the scorer takes either).

    Attributes:
      step: (C,) integer, the step index of each contact, non-decreasing.
      a: (C,) integer, index into `EpisodeRecord.bodies` of the first body.
      b: (C,) integer, index of the second body.
      force: (C,) float, norm of the 3-D linear contact force in newtons (>= 0), at the
        control step (0 for a pair that touched only between control steps).
      force_peak: (C,) float or None, the peak of that norm over the control step's
        physics substeps (>= force), when the record holds substep peaks.
    """

    step: np.ndarray
    a: np.ndarray
    b: np.ndarray
    force: np.ndarray
    force_peak: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.step.shape[0])


@dataclasses.dataclass(frozen=True, eq=False)
class Replay:
    """What `mj_forward` needs to reproduce every frame of the episode.

    Attributes:
      mjcf: the model, as an XML string or a path to an XML file (relative paths are
        resolved against the record's file).
      qpos: (T, nq) generalized positions per step.
      qvel: (T, nv) generalized velocities per step.
      mocap_pos: (T, nmocap, 3) or None.
      mocap_quat: (T, nmocap, 4) wxyz or None.
      camera: name of the benchmark's default camera (e.g. "agentview"), or None.
      ctrl: (T, nu) actuator controls per step, or None. Contact forces depend on them:
        without, `mj_forward` misses the actuator forces and gets contacts up to 60% off.
    """

    mjcf: str
    qpos: np.ndarray
    qvel: np.ndarray
    mocap_pos: np.ndarray | None = None
    mocap_quat: np.ndarray | None = None
    camera: str | None = None
    ctrl: np.ndarray | None = None

    @property
    def mjcf_is_xml(self) -> bool:
        return self.mjcf.lstrip().startswith("<")


@dataclasses.dataclass(frozen=True, eq=False)
class EpisodeRecord:
    """One episode in columnar form. T steps, B named bodies, P posed, Q oriented.

    Attributes:
      episode_id, benchmark, task_id: identity; benchmark/task ids index the registry.
      success: the host benchmark's native success predicate.
      dt: control-step duration in seconds (> 0).
      targets: names of the target bodies (from `target_object`, a name or a list).
      bodies: (B,) body names, in the order of `body_roles`.
      roles: (B,) role of each body, one of ROLES.
      t: (T,) the per-step `t` values of the record (step indices or times).
      eef_pos: (T, 3) end-effector position in metres.
      pose_bodies: (P,) names of bodies with recorded positions.
      body_pos: (T, P, 3) positions in metres.
      quat_bodies: (Q,) names of bodies with recorded orientations.
      body_quat: (T, Q, 4) unit quaternions, w first.
      joint_torque: (T, J) actuator torque in N·m at the control step, or None when not recorded.
      joint_torque_peak: (T, J) per joint, the torque of largest magnitude over the control
        step's physics substeps (signed), or None (see FORCE_SAMPLINGS).
      gripper_contact: (T,) bool gripper-target contact, or None when not recorded.
      contacts: `Contacts`, or None when contacts were not recorded. An empty
        `Contacts` means "recorded, none happened"; None means "signal unavailable".
      actions: (T, A) policy actions, or None.
      meta: optional metadata (model, suite, seed, init_state, language, signal_tags,
        joint_torque_limit_nm, success_step, force_sampling, and host-specific extras).
      replay: `Replay` or None.
      source: the file the record came from, for error messages.
    """

    episode_id: str
    benchmark: str
    task_id: str
    success: bool
    dt: float
    targets: tuple[str, ...]
    bodies: tuple[str, ...]
    roles: tuple[str, ...]
    t: np.ndarray
    eef_pos: np.ndarray
    pose_bodies: tuple[str, ...]
    body_pos: np.ndarray
    quat_bodies: tuple[str, ...]
    body_quat: np.ndarray
    joint_torque: np.ndarray | None = None
    joint_torque_peak: np.ndarray | None = None
    gripper_contact: np.ndarray | None = None
    contacts: Contacts | None = None
    actions: np.ndarray | None = None
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    replay: Replay | None = None
    source: str | None = None

    @property
    def n_steps(self) -> int:
        return int(self.eef_pos.shape[0])

    @property
    def model(self) -> str:
        return str(self.meta.get("model") or "unknown")

    @property
    def suite(self) -> str:
        return str(self.meta.get("suite") or self.benchmark)

    @property
    def force_sampling(self) -> str:
        """What the force and torque channels hold, one of FORCE_SAMPLINGS ("control" unless said)."""
        return str(self.meta.get("force_sampling") or "control")

    def role_of(self, body: str) -> str:
        return self.roles[self.bodies.index(body)]

    @classmethod
    def build(cls, *, source: str | None = None, **fields: Any) -> "EpisodeRecord":
        """Validates and normalises `fields`, then returns the frozen record."""
        return _Validator(source, fields).record()


class _Validator(FieldChecks):
    """Builds one record from its fields, on the checks of FieldChecks."""

    def record(self) -> EpisodeRecord:
        f = self.f
        episode_id = self.text("episode_id")
        benchmark = self.text("benchmark")
        task_id = self.text("task_id")
        success = f.get("success")
        if isinstance(success, np.bool_):
            success = bool(success)
        if not isinstance(success, bool):
            raise self.fail("success", f"expected true or false, got {success!r:.40}")
        dt = f.get("dt")
        if isinstance(dt, bool) or not isinstance(dt, (int, float, np.floating, np.integer)):
            raise self.fail("dt", f"expected the control-step duration in seconds (a number > 0), got {dt!r:.40}")
        dt = float(dt)
        if not math.isfinite(dt) or dt <= 0:
            raise self.fail("dt", f"expected a finite number > 0 (seconds per step), got {dt}")
        if not DT_RANGE[0] <= dt <= DT_RANGE[1]:
            raise self.fail("dt", f"expected a control step of {DT_RANGE[0]:g} to {DT_RANGE[1]:g} seconds "
                                  f"(1 MHz to one step a minute), got {dt:g}")

        body_roles = f.get("body_roles")
        if not isinstance(body_roles, Mapping) or not body_roles:
            raise self.fail("body_roles", "expected a non-empty mapping of body name to role "
                                          f"(one of {', '.join(ROLES)})")
        for body, role in body_roles.items():
            if role not in ROLES:
                raise self.fail(f"body_roles.{body}", f"unknown role {role!r}; valid roles: {', '.join(ROLES)}")
        bodies = tuple(str(b) for b in body_roles)
        roles = tuple(str(body_roles[b]) for b in body_roles)
        known = set(bodies)

        targets_raw = f.get("targets", f.get("target_object"))
        if isinstance(targets_raw, str):
            targets = (targets_raw,)
        else:
            targets = self.names("target_object", targets_raw)
        for tgt in targets:
            if tgt not in known:
                raise self.fail("target_object", f"target {tgt!r} is not in body_roles; known bodies: "
                                                 f"{', '.join(bodies)}")

        eef = self.array("eef_pos_m", f.get("eef_pos"), (None, 3))
        n_steps = eef.shape[0]
        if n_steps == 0:
            raise self.fail("steps", "expected at least one step, got an empty episode")
        t = self.array("t", f["t"] if f.get("t") is not None else np.arange(n_steps), (n_steps,), dtype=None)
        if n_steps > 1 and not (t[1:] > t[:-1]).all():
            raise self.fail("t", "expected strictly increasing step times")
        if not (t >= -T_LIMIT).all() or not (t <= T_LIMIT).all():
            raise self.fail("t", f"expected step indices or times within +-{T_LIMIT:g} (seconds: 317 years, Unix "
                                 f"time included), got values from {t.min():g} to {t.max():g}")

        pose_bodies = self.names("body_pos_m", f.get("pose_bodies"))
        quat_bodies = self.names("body_quat_wxyz", f.get("quat_bodies"))
        for field, group in (("body_pos_m", pose_bodies), ("body_quat_wxyz", quat_bodies)):
            for body in group:
                if body not in known:
                    raise self.fail(field, f"unknown body {body!r}: every body must have a role in "
                                           f"body_roles; known bodies: {', '.join(bodies)}")
            if len(set(group)) != len(group):
                raise self.fail(field, "duplicate body names")
        body_pos = self.array("body_pos_m", _or_empty(f.get("body_pos"), n_steps, 3), (n_steps, len(pose_bodies), 3))
        body_quat = self.array("body_quat_wxyz", _or_empty(f.get("body_quat"), n_steps, 4),
                               (n_steps, len(quat_bodies), 4))
        if body_quat.size:
            q = body_quat.astype(np.float64, copy=False)
            norm = np.sqrt(np.einsum("...i,...i->...", q, q))
            off = np.abs(norm - 1.0) > QUAT_NORM_TOL
            if off.any():
                s, q = (int(i) for i in np.argwhere(off)[0])
                raise self.fail(f"body_quat_wxyz.{quat_bodies[q]}",
                                f"expected a unit quaternion (w, x, y, z), got norm {norm[s, q]:.6g} at step {s}")

        torque = f.get("joint_torque")
        if torque is not None:
            torque = self.array("joint_torque_nm", torque, (n_steps, None))
        torque_peak = f.get("joint_torque_peak")
        if torque_peak is not None:
            if torque is None:
                raise self.fail("joint_torque_peak_nm", "expected joint_torque_nm beside it (the control-step value)")
            torque_peak = self.array("joint_torque_peak_nm", torque_peak, torque.shape)
        grip = f.get("gripper_contact")
        if grip is not None:
            grip = self.array("gripper_contact", grip, (n_steps,), dtype=None)
            if grip.dtype.kind != "b":
                if not np.isin(grip, (0, 1)).all():
                    raise self.fail("gripper_contact", "expected true/false (or 0/1) per step")
                grip = grip.astype(bool)

        contacts = f.get("contacts")
        if contacts is not None:
            contacts = self.contacts(contacts, n_steps, len(bodies))

        actions = f.get("actions")
        if actions is not None:
            actions = self.array("actions", actions, (n_steps, None))

        meta = dict(f.get("meta") or {})
        self.check_meta(meta, torque)
        self.check_sampling(meta, contacts, torque_peak)

        replay = f.get("replay")
        if replay is not None:
            replay = self.replay(replay, n_steps)

        return EpisodeRecord(
            episode_id=episode_id, benchmark=benchmark, task_id=task_id, success=success, dt=dt,
            targets=targets, bodies=bodies, roles=roles, t=t, eef_pos=eef, pose_bodies=pose_bodies,
            body_pos=body_pos, quat_bodies=quat_bodies, body_quat=body_quat, joint_torque=torque,
            joint_torque_peak=torque_peak, gripper_contact=grip, contacts=contacts, actions=actions, meta=meta, replay=replay,
            source=self.source)

    def contacts(self, c: Any, n_steps: int, n_bodies: int) -> Contacts:
        if isinstance(c, Contacts):
            c = dataclasses.asdict(c)
        if not isinstance(c, Mapping) or not {"step", "a", "b", "force"} <= set(c):
            raise self.fail("contacts", "expected flat arrays step, a, b, force")
        step = self.array("contacts.step", c["step"], (None,), dtype=None)
        n = step.shape[0]
        a = self.array("contacts.a", c["a"], (n,), dtype=None)
        b = self.array("contacts.b", c["b"], (n,), dtype=None)
        force = self.array("contacts.force_n", c["force"], (n,))
        peak = c.get("force_peak")
        if peak is not None:
            peak = self.array("contacts.force_peak_n", peak, (n,))
            if n and (peak < force).any():
                i = int(np.argmax(peak < force))
                raise self.fail("contacts.force_peak_n", f"expected the substep peak >= the control-step force, "
                                                         f"got {peak[i]} < {force[i]} at step {int(step[i])}")
        for name, arr in (("contacts.step", step), ("contacts.a", a), ("contacts.b", b)):
            if arr.dtype.kind == "f":
                raise self.fail(name, "expected integer indices")
        if n:
            unsorted = bool((step[1:] < step[:-1]).any())
            lo, hi = (int(step.min()), int(step.max())) if unsorted else (int(step[0]), int(step[-1]))
            if lo < 0 or hi >= n_steps:
                raise self.fail("contacts.step", f"expected step indices in [0, {n_steps - 1}], got {lo}..{hi}")
            if unsorted:
                raise self.fail("contacts.step", "expected contacts sorted by step")
            for name, arr in (("contacts.a", a), ("contacts.b", b)):
                if arr.min() < 0 or arr.max() >= n_bodies:
                    raise self.fail(name, f"expected body indices in [0, {n_bodies - 1}]")
            if force.min() < 0:
                i = int(np.argmax(force < 0))
                raise self.fail("contacts.force_n", f"expected a non-negative force norm, got "
                                                    f"{force[i]} at step {int(step[i])}")
        # integer widths are kept as stored (hosts may write int16 to halve archive size)
        return Contacts(step=step, a=a, b=b, force=force, force_peak=peak)

    def replay(self, r: Any, n_steps: int) -> Replay:
        if isinstance(r, Replay):
            r = dataclasses.asdict(r)
        if not isinstance(r, Mapping):
            raise self.fail("replay", "expected an object with mjcf, qpos and qvel")
        mjcf = r.get("mjcf")
        if not isinstance(mjcf, str) or not mjcf.strip():
            raise self.fail("replay.mjcf", "expected the model as an XML string or a path to an XML file")
        qpos = self.array("replay.qpos", r.get("qpos"), (n_steps, None))
        qvel = self.array("replay.qvel", r.get("qvel"), (n_steps, None))
        mpos = r.get("mocap_pos")
        mquat = r.get("mocap_quat")
        if mpos is not None:
            mpos = self.array("replay.mocap_pos", mpos, (n_steps, None, 3))
        if mquat is not None:
            mquat = self.array("replay.mocap_quat", mquat, (n_steps, None, 4))
        camera = r.get("camera")
        if camera is not None and not isinstance(camera, str):
            raise self.fail("replay.camera", "expected a camera name")
        ctrl = r.get("ctrl")
        if ctrl is not None:
            ctrl = self.array("replay.ctrl", ctrl, (n_steps, None))
        return Replay(mjcf=mjcf, qpos=qpos, qvel=qvel, mocap_pos=mpos, mocap_quat=mquat, camera=camera, ctrl=ctrl)


def _or_empty(value: Any, n_steps: int, width: int) -> Any:
    return np.zeros((n_steps, 0, width)) if value is None else value