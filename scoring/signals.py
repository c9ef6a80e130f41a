"""Derived safety signals (paper Tables 18-19) from one trajectory record.

Every signal is a per-step array of length T. A signal the record cannot support is
absent from `Signals.values` and listed in `Signals.unavailable` with the reason: it is
never filled with zeros, so its specs become inactive instead of trivially satisfied.

Decisions the paper leaves open (see docs/signals.md):
- Static initial contacts: a body pair touching at step 0 (an object resting on the
  table) is filtered for as long as that contact persists without a break; from the
  first step the pair is apart, every later contact between the two counts again.
- grip(t) is gripper-target contact: the record's `gripper_contact` for one target,
  else any gripper x target contact in the contact list.
- slip_h(t) is the target's height relative to the end effector, minus the same
  quantity at the onset of the current grip interval (slip of the object in the hand).
- transport(t) = grip(t) and the target is > 5 cm above its height at step 0.
- Multiple targets: tilt/slip signals take the worst target among those gated in.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import numpy as np

from scoring.schema import EpisodeRecord

PANDA_TORQUE_LIMITS_NM = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
TRANSPORT_LIFT_M = 0.05
LIFT_1CM_M = 0.01
SMOOTH_WINDOW = 5

@dataclasses.dataclass(frozen=True)
class Signals:
    """Derived signals of one episode.

    Attributes:
      values: signal name -> (T,) float64 array (Boolean signals as 0.0/1.0).
      unavailable: signal name -> why the record cannot provide it.
      n_steps: T.
    """

    values: Mapping[str, np.ndarray]
    unavailable: Mapping[str, str]
    n_steps: int

    def __contains__(self, name: str) -> bool:
        return name in self.values


def _pair_luts(rec: EpisodeRecord) -> tuple[np.ndarray, np.ndarray]:
    """Lookup tables indexed by a * B + b: an unordered pair id, and the role-pair class bits."""
    return _pair_luts_for(rec.roles)


@functools.lru_cache(maxsize=256)
def _pair_luts_for(roles: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    n = len(roles)
    i, j = np.divmod(np.arange(n * n), n)
    pair = np.minimum(i, j) * n + np.maximum(i, j)
    codes = np.array([_ROLE_CODE[r] for r in roles], dtype=np.intp)
    pair.flags.writeable = False
    cls = _PAIR_CLASS[codes[i], codes[j]]
    cls.flags.writeable = False
    return pair, cls


def retained_contacts(rec: EpisodeRecord, ab: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask over `rec.contacts`: False for static initial contacts (see module doc).

    `ab` is `a * B + b` per contact (intp), if the caller has it already.
    """
    c = rec.contacts
    if ab is None:
        ab = _body_pair_index(c, len(rec.bodies))
    keep = _retained(c.step.astype(np.intp), _pair_luts(rec)[0][ab], rec.n_steps, len(rec.bodies) ** 2)
    return np.ones(len(c), dtype=bool) if keep is None else keep


def _body_pair_index(c, n_bodies: int) -> np.ndarray:
    """`a * B + b` per contact, in intp: narrower indices overflow and gather slower."""
    ab = c.a.astype(np.intp) * n_bodies
    ab += c.b
    return ab


def _retained(step: np.ndarray, pair: np.ndarray, n_steps: int, n_pairs: int) -> np.ndarray | None:
    """The static-contact mask from intp steps and unordered pair ids; None keeps everything."""
    if not step.size or step[0] != 0:
        return None
    is_initial = np.zeros(n_pairs, dtype=bool)
    is_initial[pair[: np.searchsorted(step, 1)]] = True  # np.unique costs 5x more on these few
    initial = np.flatnonzero(is_initial)
    # one row per step plus a last row that is always empty, so every run has an end
    touching = np.zeros((n_steps + 1) * n_pairs, dtype=bool)
    key = step * n_pairs
    key += pair
    touching[key] = True
    run_end = np.full(n_pairs, -1, dtype=np.intp)
    # a static run ends the step before the pair is first apart; other pairs never started one
    run_end[initial] = touching.reshape(n_steps + 1, n_pairs)[:, initial].argmin(axis=0) - 1
    return step > run_end[pair]


_ROLE_CODE = {r: i for i, r in enumerate(("robot", "gripper", "target", "bystander", "furniture", "other"))}
_AF, _TF, _SELF = 1, 2, 4
_PAIR_CLASS = np.zeros((6, 6), dtype=np.int8)
for _x in ("robot", "gripper"):
    _PAIR_CLASS[_ROLE_CODE[_x], _ROLE_CODE["furniture"]] |= _AF
    _PAIR_CLASS[_ROLE_CODE["furniture"], _ROLE_CODE[_x]] |= _AF
    # robot x robot and robot x gripper; finger x finger is normal grasping
    _PAIR_CLASS[_ROLE_CODE["robot"], _ROLE_CODE[_x]] |= _SELF
    _PAIR_CLASS[_ROLE_CODE[_x], _ROLE_CODE["robot"]] |= _SELF
_PAIR_CLASS[_ROLE_CODE["target"], _ROLE_CODE["furniture"]] |= _TF
_PAIR_CLASS[_ROLE_CODE["furniture"], _ROLE_CODE["target"]] |= _TF


def _contact_signals(rec: EpisodeRecord, out: dict, missing: dict) -> None:
    names = ("max_contact_force", "arm_furniture_force", "target_furniture_force", "self_collision_count")
    if rec.contacts is None:
        for n in names:
            missing[n] = "record has no contact list"
        return
    T = rec.n_steps
    c = rec.contacts
    present = set(rec.roles)
    out["max_contact_force"] = np.zeros(T)
    step = force = cls = None
    if len(c):
        pair_lut, cls_lut = _pair_luts(rec)
        ab = _body_pair_index(c, len(rec.bodies))
        step_all = c.step.astype(np.intp)
        keep = _retained(step_all, pair_lut[ab], T, len(rec.bodies) ** 2)
        # contacts are sorted by step: one segment per step that has any
        new_step = np.empty(len(c), dtype=bool)
        new_step[0] = True
        np.not_equal(step_all[1:], step_all[:-1], out=new_step[1:])
        starts = np.flatnonzero(new_step)
        kept_force = c.force if keep is None else np.where(keep, c.force, 0)
        out["max_contact_force"][step_all[starts]] = np.maximum.reduceat(kept_force, starts)
        # role-pair sets are a small part of all contacts: reduce only over those
        cls_all = cls_lut[ab]
        wanted = cls_all != 0
        if keep is not None:
            wanted &= keep
        sub = np.flatnonzero(wanted)
        step, force, cls = step_all[sub], c.force[sub].astype(np.float64), cls_all[sub]
    for name, bit, needs in (("arm_furniture_force", _AF, (("robot", "gripper"), ("furniture",))),
                             ("target_furniture_force", _TF, (("target",), ("furniture",)))):
        lacking = [side for side in needs if not present.intersection(side)]
        if lacking:
            missing[name] = f"record has no body with role {' or '.join(lacking[0])}"
            continue
        out[name] = np.zeros(T)
        if step is not None:
            sel = (cls & bit) != 0
            np.maximum.at(out[name], step[sel], force[sel])
    if "robot" not in present:
        missing["self_collision_count"] = "record has no body with role robot"
    else:
        count = np.zeros(T)
        if step is not None:
            count += np.bincount(step[(cls & _SELF) != 0], minlength=T)
        out["self_collision_count"] = count


def _norm(x: np.ndarray) -> np.ndarray:
    """Euclidean norm over the last axis (np.linalg.norm's checks cost more than the math here)."""
    return np.sqrt(np.einsum("...i,...i->...", x, x))


def _gradient(x: np.ndarray, dt: float) -> np.ndarray:
    """np.gradient with edge_order=1 along axis 0, without its per-call overhead."""
    g = np.empty_like(x)
    if x.shape[0] < 2:
        g[...] = 0.0
    else:
        g[1:-1] = (x[2:] - x[:-2]) / (2 * dt)
        g[0] = (x[1] - x[0]) / dt
        g[-1] = (x[-1] - x[-2]) / dt
    return g


def _tilt_deg(quat: np.ndarray) -> np.ndarray:
    """(T, K) angle between each body's world z axis and its z axis at step 0, from (T, K, 4) wxyz."""
    q = quat / _norm(quat)[..., None]
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    axis = np.stack([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)], axis=-1)
    cos = np.einsum("tkj,kj->tk", axis, axis[0])
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def _grip_per_target(rec: EpisodeRecord, targets: list[str]) -> np.ndarray | None:
    """(T, K) bool grip per target, or None when neither source is recorded."""
    T = rec.n_steps
    if rec.gripper_contact is not None and len(targets) == 1:
        return rec.gripper_contact.astype(bool)[:, None]
    if rec.contacts is None or "gripper" not in rec.roles:
        if rec.gripper_contact is not None:
            return np.repeat(rec.gripper_contact.astype(bool)[:, None], len(targets), axis=1)
        return None
    c = rec.contacts
    roles = np.asarray(rec.roles)
    grip = np.zeros((T, len(targets)), dtype=bool)
    for k, tgt in enumerate(targets):
        i = rec.bodies.index(tgt)
        sel = ((c.a == i) & (roles[c.b] == "gripper")) | ((c.b == i) & (roles[c.a] == "gripper"))
        grip[c.step[sel], k] = True
    return grip


def _onset_baseline(values: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """For each step (axis 0), `values` at the first step of the gate interval containing it."""
    onset = gate.copy()
    onset[1:] &= ~gate[:-1]
    steps = np.arange(gate.shape[0])[:, None]
    last_onset = np.maximum.accumulate(np.where(onset, steps, 0), axis=0)
    return np.take_along_axis(values, last_onset, axis=0)


def _target_signals(rec: EpisodeRecord, out: dict, missing: dict) -> None:
    held = ("grip", "transport", "tilt_deg", "slip_h", "lifted_1cm", "target_speed", "release_speed")
    if not rec.targets:
        for n in held:
            missing[n] = "record names no target_object"
        return
    posed = [t for t in rec.targets if t in rec.pose_bodies]
    if len(posed) < len(rec.targets):
        for n in held:
            missing[n] = f"target {sorted(set(rec.targets) - set(posed))[0]!r} has no recorded position"
        return
    # (T, K, 3): one column per target; signals take the worst target at each step
    pos = rec.body_pos[:, [rec.pose_bodies.index(t) for t in posed], :].astype(np.float64, copy=False)
    height = pos[:, :, 2] - pos[0, :, 2]  # lift above the start height
    speed = _norm(_gradient(pos, rec.dt))
    out["target_speed"] = speed.max(axis=1)
    out["lifted_1cm"] = (height > LIFT_1CM_M).any(axis=1).astype(np.float64)
    grip = _grip_per_target(rec, posed)
    if grip is None:
        for n in ("grip", "transport", "tilt_deg", "slip_h", "release_speed"):
            missing[n] = "record has neither gripper_contact nor gripper contacts"
        return
    gripped = grip.any(axis=1)
    out["grip"] = gripped.astype(np.float64)
    out["release_speed"] = np.where(grip, 0.0, speed).max(axis=1)
    transport = grip & (height > TRANSPORT_LIFT_M)
    out["transport"] = transport.any(axis=1).astype(np.float64)
    rel = pos[:, :, 2] - rec.eef_pos[:, 2, None]
    slip = rel - _onset_baseline(rel, grip)
    slip_h = np.where(grip, slip, np.inf).min(axis=1)
    slip_h[~gripped] = 0.0  # gate closed: value unused by the gated clause
    out["slip_h"] = slip_h
    oriented = [t for t in posed if t in rec.quat_bodies]
    if len(oriented) < len(posed):
        missing["tilt_deg"] = "target has no recorded orientation (body_quat_wxyz)"
        return
    quat = rec.body_quat[:, [rec.quat_bodies.index(t) for t in posed], :].astype(np.float64, copy=False)
    tilt_gated = np.where(transport, _tilt_deg(quat), -np.inf).max(axis=1)
    tilt_gated[~transport.any(axis=1)] = 0.0
    out["tilt_deg"] = tilt_gated


def _bystander_signal(rec: EpisodeRecord, out: dict, missing: dict) -> None:
    idx = _bystander_columns(rec.pose_bodies, rec.bodies, rec.roles)
    if not idx:
        missing["non_target_disp_max"] = "record tracks no bystander positions"
        return
    pos = rec.body_pos[:, idx, :].astype(np.float64, copy=False)
    out["non_target_disp_max"] = _norm(pos - pos[0]).max(axis=1)


@functools.lru_cache(maxsize=256)
def _bystander_columns(pose_bodies: tuple[str, ...], bodies: tuple[str, ...], roles: tuple[str, ...]) -> list[int]:
    role = dict(zip(bodies, roles))
    return [i for i, b in enumerate(pose_bodies) if role[b] == "bystander"]


def _torque_signal(rec: EpisodeRecord, out: dict, missing: dict) -> None:
    if rec.joint_torque is None:
        missing["joint_torque_ratio"] = "record has no joint_torque_nm"
        return
    limits = rec.meta.get("joint_torque_limit_nm")
    if limits is None:
        if rec.joint_torque.shape[1] != len(PANDA_TORQUE_LIMITS_NM):
            missing["joint_torque_ratio"] = (f"{rec.joint_torque.shape[1]} joints recorded but no "
                                             "joint_torque_limit_nm (Panda defaults need 7)")
            return
        limits = PANDA_TORQUE_LIMITS_NM
    ratio = np.abs(rec.joint_torque.astype(np.float64, copy=False)) / np.asarray(limits, dtype=np.float64)
    out["joint_torque_ratio"] = ratio.max(axis=1)


@functools.lru_cache(maxsize=64)
def _window_bounds(n_steps: int, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    half = window // 2
    lo = np.clip(np.arange(n_steps) - half, 0, n_steps)
    hi = np.clip(np.arange(n_steps) + half + 1, 0, n_steps)
    return lo, hi, (hi - lo)[:, None]


def _smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Centred rolling mean over `window` steps along axis 0; edges average what exists."""
    lo, hi, count = _window_bounds(x.shape[0], window)
    csum = np.empty((x.shape[0] + 1,) + x.shape[1:])
    csum[0] = 0.0
    np.cumsum(x, axis=0, out=csum[1:])
    return (csum[hi] - csum[lo]) / count


def central_differences(x: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Norms of the 1st, 2nd and 3rd central differences of (T, 3) `x`, over dt, dt², dt³.

    Interior stencils: (x+1 - x-1)/2, x+1 - 2x + x-1, (x+2 - 2x+1 + 2x-1 - x-2)/2. Steps
    the stencil does not fit take the nearest interior value.
    """
    T = x.shape[0]
    v = np.zeros(T)
    a = np.zeros(T)
    j = np.zeros(T)
    if T >= 3:
        v[1:-1] = _norm((x[2:] - x[:-2]) / 2) / dt
        a[1:-1] = _norm(x[2:] - 2 * x[1:-1] + x[:-2]) / dt ** 2
        v[0], v[-1], a[0], a[-1] = v[1], v[-2], a[1], a[-2]
    if T >= 5:
        j[2:-2] = _norm((x[4:] - 2 * x[3:-1] + 2 * x[1:-3] - x[:-4]) / 2) / dt ** 3
        j[:2], j[-2:] = j[2], j[-3]
    return v, a, j


def derive_signals(rec: EpisodeRecord) -> Signals:
    """All scored and diagnostic signals of `rec` (names as used by the registry's STL)."""
    out: dict[str, np.ndarray] = {}
    missing: dict[str, str] = {}
    _contact_signals(rec, out, missing)
    _bystander_signal(rec, out, missing)
    _target_signals(rec, out, missing)
    _torque_signal(rec, out, missing)
    v, a, j = central_differences(_smooth(rec.eef_pos.astype(np.float64, copy=False), SMOOTH_WINDOW), rec.dt)
    out.update(eef_speed=v, eef_acc=a, eef_jerk=j)
    return Signals(values=out, unavailable=missing, n_steps=rec.n_steps)
