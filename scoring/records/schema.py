"""Trajectory record, schema v1: the in-memory columnar form every loader produces.

One `EpisodeRecord` holds one rollout as arrays (the fast path). The Appendix B JSON
record and the `.npz` columnar file both convert to and from it losslessly
(`scoring.records.io`). Construction goes through `EpisodeRecord.build`, which validates every
field and raises `RecordError` naming the file, episode and field on bad input.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scoring.errors import RecordError

SCHEMA_VERSION = 1
ROLES = ("robot", "gripper", "target", "bystander", "furniture", "other")
# What a record's force and torque channels hold (meta "force_sampling"):
# - "control": one sample per control step, at its end (the paper's protocol; every
#   record written before substep peaks existed, and any record that does not say);
# - "substep_peak": that sample, plus the peak over the control step's physics substeps
#   (`Contacts.force_peak`, `EpisodeRecord.joint_torque_peak`).
FORCE_SAMPLINGS = ("control", "substep_peak")
# Simulators store unit quaternions, but hand-written and rounded records do not quite:
# Appendix B's own example [0.99, 0.02, 0.01, 0.0] has norm 0.9903. Beyond 2% the data
# is not a rotation (a rotation vector, Euler angles, a scaled quaternion). Signals
# re-normalise before use, so the tolerance never changes a score.
QUAT_NORM_TOL = 0.02
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1


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


class _Validator:
    """Checks one record's fields; every failure names file, episode and field."""

    def __init__(self, source: str | None, fields: dict[str, Any]):
        self.source = source
        self.f = fields
        eid = fields.get("episode_id")
        self.episode = eid if isinstance(eid, str) else None

    def fail(self, field: str, message: str) -> RecordError:
        return RecordError(message, file=self.source, episode=self.episode, field=field)

    def text(self, name: str, *, optional: bool = False) -> str | None:
        value = self.f.get(name)
        if value is None:
            if optional:
                return None
            raise self.fail(name, "missing; expected a non-empty string")
        if not isinstance(value, str) or not value:
            raise self.fail(name, f"expected a non-empty string, got {type(value).__name__} {value!r:.60}")
        self.check_unicode(name, value)
        return value

    def check_unicode(self, name: str, value: str) -> None:
        """Strings go into Parquet as UTF-8: a lone surrogate (JSON "\\ud800") cannot."""
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail(name, f"expected valid Unicode text, got {value!r:.60} (a lone surrogate)") from None

    def array(self, name: str, value: Any, shape: Sequence[int | None], *, dtype=np.float64,
              finite: bool = True) -> np.ndarray:
        try:
            arr = value if type(value) is np.ndarray else np.asarray(value)
        except (ValueError, TypeError):
            raise self.fail(name, f"expected an array of shape {_fmt_shape(shape)}; got "
                                  f"{_ragged(value)}") from None
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise self.fail(name, f"expected numbers of shape {_fmt_shape(shape)}, got dtype {arr.dtype} "
                                  "(ragged lengths or non-numeric entries)")
        if arr.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, arr.shape)):
            raise self.fail(name, f"expected shape {_fmt_shape(shape)}, got {arr.shape}")
        if dtype is not None and arr.dtype.kind == "f" and np.dtype(dtype).kind == "f":
            pass  # keep float32 as stored: lossless round trips of compact archives
        elif dtype is not None:
            arr = arr.astype(dtype, copy=False)
        if finite and arr.dtype.kind == "f" and not _all_finite(arr):
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise self.fail(name, f"expected finite numbers, found {arr[tuple(bad)]} at index "
                                  f"{tuple(int(i) for i in bad)} (step {int(bad[0])})")
        return arr

    def names(self, name: str, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise self.fail(name, f"expected a list of body names, got {value!r:.80}")
        return tuple(value)

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

    def check_meta(self, meta: dict, torque: np.ndarray | None) -> None:
        limits = meta.get("joint_torque_limit_nm")
        if limits is not None:
            arr = self.array("joint_torque_limit_nm", limits, (None,))
            if (arr <= 0).any():
                raise self.fail("joint_torque_limit_nm", "expected positive per-joint limits in N·m")
            if torque is not None and arr.shape[0] != torque.shape[1]:
                raise self.fail("joint_torque_limit_nm", f"expected {torque.shape[1]} limits (one per "
                                                         f"recorded joint), got {arr.shape[0]}")
            meta["joint_torque_limit_nm"] = [float(x) for x in arr]
        tags = meta.get("signal_tags")
        if tags is not None:
            if not isinstance(tags, (list, tuple)) or not all(isinstance(x, str) for x in tags):
                raise self.fail("signal_tags", "expected a list of capability tag strings")
            meta["signal_tags"] = list(tags)
        for key in ("model", "suite", "language"):
            if meta.get(key) is not None:
                if not isinstance(meta[key], str):
                    raise self.fail(key, f"expected a string, got {meta[key]!r:.40}")
                self.check_unicode(key, meta[key])
        for key in ("seed", "init_state", "success_step"):
            if meta.get(key) is not None:
                meta[key] = self.int64(key, meta[key])
        # settled start (replay.record.settle): whether the scene was at rest at step 0, and after
        # how many no-op steps
        settled = meta.get("settled")
        if settled is not None:
            if isinstance(settled, np.bool_):
                meta["settled"] = settled = bool(settled)
            if not isinstance(settled, bool):
                raise self.fail("meta.settled", f"expected true or false, got {settled!r:.40}")
        steps = meta.get("settle_steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0):
            raise self.fail("meta.settle_steps", f"expected a non-negative number of no-op steps, got {steps!r:.40}")

    def int64(self, name: str, value: Any) -> int:
        """An integer the store's int64 columns can hold (an integral float such as 3.0 is taken as 3)."""
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
            value = int(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise self.fail(name, f"expected an integer, got {value!r:.40}")
        if not _INT64_MIN <= int(value) <= _INT64_MAX:
            raise self.fail(name, f"expected an integer within int64 ({_INT64_MIN}..{_INT64_MAX}), got {value}")
        return int(value)

    def check_sampling(self, meta: dict, contacts: Contacts | None, torque_peak: np.ndarray | None) -> None:
        """`force_sampling`, when given, must be one of FORCE_SAMPLINGS and match the channels present."""
        has_peaks = torque_peak is not None or (contacts is not None and contacts.force_peak is not None)
        said = meta.get("force_sampling")
        if said is None:
            if has_peaks:
                raise self.fail("force_sampling", "the record has substep peaks (force_peak_n or "
                                                  "joint_torque_peak_nm); expected force_sampling \"substep_peak\"")
            return
        if said not in FORCE_SAMPLINGS:
            raise self.fail("force_sampling", f"expected one of {', '.join(FORCE_SAMPLINGS)}, got {said!r:.40}")
        if said == "control" and has_peaks:
            raise self.fail("force_sampling", "is \"control\" but the record has substep peaks; expected "
                                              "\"substep_peak\"")
        if said == "substep_peak" and contacts is not None and contacts.force_peak is None:
            raise self.fail("contacts.force_peak_n", "force_sampling is \"substep_peak\"; expected force_peak_n "
                                                     "at every contact")

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


def _all_finite(arr: np.ndarray) -> bool:
    """No NaN or inf in `arr`: a finite sum proves it in one pass; an infinite one may be overflow, so look."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(arr.sum()):
            return True
    return bool(np.isfinite(arr).all())


def _ragged(value: Any) -> str:
    """Says where a nested list stops being rectangular: the step and the two lengths."""
    if isinstance(value, (list, tuple)) and value:
        def size(v):
            return len(v) if isinstance(v, (list, tuple)) else None
        first = size(value[0])
        for i, v in enumerate(value):
            if size(v) != first:
                return (f"ragged data: step {i} has {size(v) if size(v) is not None else 'a scalar'} "
                        f"values, step 0 has {first}")
    return "non-numeric or ragged data"


def _or_empty(value: Any, n_steps: int, width: int) -> Any:
    return np.zeros((n_steps, 0, width)) if value is None else value


def _fmt_shape(shape: Sequence[int | None]) -> str:
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
