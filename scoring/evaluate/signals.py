"""Derived safety signals (paper Tables 18-19) from trajectory records.

Every signal is a per-step array of length T. Signals are derived for a batch of
episodes of one layout at once (`derive_signal_batch`, see scoring/evaluate/stacked.py); one
episode is a batch of one (`derive_signals`), so there is a single implementation. A signal the record cannot support is
absent from `Signals.values` and listed in `Signals.unavailable` with the reason: it is
never filled with zeros, so its specs become inactive instead of trivially satisfied.

Decisions the paper leaves open (see docs/signals.md):
- Static initial contacts: a body pair touching at step 0 (an object resting on the
  table) is filtered for as long as that contact persists without a break; from the
  first step the pair is apart, every later contact between the two counts again.
- Internal contacts: an entry whose two sides are one recorded body (a == b: two parts
  of one object, such as a cabinet drawer striking its own frame, which the recorder
  projects onto the object's root body) is not a contact with the world. It feeds no
  scene-interaction signal; `internal_contact_force` reports it (a diagnostic only).
- grip(t) is gripper-target contact: the record's `gripper_contact` for one target,
  else any gripper x target contact in the contact list.
- slip_h(t) is the target's height relative to the end effector, minus the same
  quantity at the onset of the current grip interval (slip of the object in the hand).
- transport(t) = grip(t) and the target is > 5 cm above its height at step 0.
- Bystander displacement is measured from each object's reference step: where it first
  rests or is first touched by the robot (scoring/evaluate/displacement.py).
- Multiple targets: tilt/slip signals take the worst target among those gated in.
- Force sampling (`force_sampling`): "peak" (the default) reads contact forces and joint
  torques at their peak over each control step's physics substeps where the record holds
  them (force_sampling "substep_peak"), else the control-step sample; "control" always
  reads the sample, the paper's per-step protocol (scoring/evaluate/channels.py decides it
  for the scorer and everything that explains its scores). See docs/scoring.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import numpy as np

from scoring.errors import RegistryError
from scoring.evaluate.channels import check_force_sampling, scored_channels
from scoring.evaluate.displacement import displacements, first_rest_steps, first_touch_steps, reference_steps
from scoring.evaluate.stacked import Stacked, central_differences, gradient, norm, onset_baseline, smooth
from scoring.records.schema import EpisodeRecord

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


@dataclasses.dataclass(frozen=True)
class SignalBatch:
    """Derived signals of E episodes of one layout.

    Attributes:
      values: signal name -> (E, T) float64; row e is valid for t < n_steps[e].
      unavailable: signal name -> why the layout cannot provide it (shared by the batch).
      n_steps: (E,) int steps per episode.
    """

    values: Mapping[str, np.ndarray]
    unavailable: Mapping[str, str]
    n_steps: np.ndarray

    def episode(self, e: int) -> Signals:
        n = int(self.n_steps[e])
        return Signals(values={k: v[e, :n] for k, v in self.values.items()}, unavailable=self.unavailable,
                       n_steps=n)


@functools.lru_cache(maxsize=256)
def _pair_luts_for(roles: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Lookup tables indexed by a * B + b: an unordered pair id, and the role-pair class bits."""
    n = len(roles)
    i, j = np.divmod(np.arange(n * n), n)
    pair = np.minimum(i, j) * n + np.maximum(i, j)
    codes = np.array([_ROLE_CODE[r] for r in roles], dtype=np.intp)
    pair.flags.writeable = False
    cls = _PAIR_CLASS[codes[i], codes[j]]
    cls.flags.writeable = False
    return pair, cls


def retained_contacts(rec: EpisodeRecord) -> np.ndarray:
    """Boolean mask over `rec.contacts`: False for static initial contacts (see module doc)."""
    c = rec.contacts
    ab = _body_pair_index(c.a, c.b, len(rec.bodies))
    keep = _retained(c.step.astype(np.intp), _pair_luts_for(rec.roles)[0][ab], rec.n_steps, len(rec.bodies) ** 2)
    return np.ones(len(c), dtype=bool) if keep is None else keep


def contact_mask(rec: EpisodeRecord, *, internal: bool = False) -> np.ndarray:
    """Boolean mask over `rec.contacts`: the entries the scene-interaction signals read
    (retained, between two recorded bodies), or with `internal` those `internal_contact_force`
    reads (retained, two parts of one body)."""
    c = rec.contacts
    return retained_contacts(rec) & ((c.a == c.b) if internal else (c.a != c.b))


def _body_pair_index(a: np.ndarray, b: np.ndarray, n_bodies: int) -> np.ndarray:
    """`a * B + b` per contact, in intp: narrower indices overflow and gather slower."""
    ab = a.astype(np.intp) * n_bodies
    ab += b
    return ab


def _retained(local: np.ndarray, pair: np.ndarray, n_steps: int, n_pairs: int) -> np.ndarray | None:
    """The static-contact mask from intp episode steps and pair ids (distinct across episodes).

    None keeps everything. Only pairs touching at their episode's step 0 get a column in
    the (step, pair) touching table; the last column collects all other pairs.
    """
    at_start = local == 0
    if not at_start.any():
        return None
    is_initial = np.zeros(n_pairs, dtype=bool)
    is_initial[pair[at_start]] = True
    initial = np.flatnonzero(is_initial)
    width = initial.size + 1
    column = np.full(n_pairs, initial.size, dtype=np.intp)
    column[initial] = np.arange(initial.size)
    col = column[pair]
    # one row per step plus a last row that is always empty, so every run has an end
    touching = np.zeros((n_steps + 1) * width, dtype=bool)
    key = local * width
    key += col
    touching[key] = True
    # a static run ends the step before the pair is first apart; other pairs never started one
    run_end = touching.reshape(n_steps + 1, width).argmin(axis=0) - 1
    run_end[-1] = -1
    return local > run_end[col]


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


def _contact_signals(b: Stacked, out: dict, missing: dict, option: str) -> None:
    names = ("max_contact_force", "internal_contact_force", "arm_furniture_force", "target_furniture_force",
             "self_collision_count")
    rec = b.first
    if rec.contacts is None:
        for n in names:
            missing[n] = "record has no contact list"
        return
    present = set(rec.roles)
    wanted = {"max_contact_force": 0, "internal_contact_force": 0}
    for name, bit, needs in (("arm_furniture_force", _AF, (("robot", "gripper"), ("furniture",))),
                             ("target_furniture_force", _TF, (("target",), ("furniture",)))):
        lacking = [side for side in needs if not present.intersection(side)]
        if lacking:
            missing[name] = f"record has no body with role {' or '.join(lacking[0])}"
        else:
            wanted[name] = bit
    if "robot" not in present:
        missing["self_collision_count"] = "record has no body with role robot"
    else:
        wanted["self_collision_count"] = _SELF
    rows = {name: np.zeros((b.E, b.T)) for name in wanted}
    # episode by episode: contact arrays are the bulk of the data, and one episode's fit in cache
    for e, r in enumerate(b.records):
        _episode_contact_signals(r, {name: row[e] for name, row in rows.items()}, wanted, option)
    out.update(rows)


def _episode_contact_signals(rec: EpisodeRecord, out: dict[str, np.ndarray], wanted: dict[str, int],
                             option: str) -> None:
    """Fills the (T,) rows of `out` (zeros on entry) from one episode's contacts."""
    c = rec.contacts
    forces = scored_channels(rec, option).contact_force
    if not len(c):
        return
    n_bodies = len(rec.bodies)
    pair_lut, cls_lut = _pair_luts_for(rec.roles)
    ab = _body_pair_index(c.a, c.b, n_bodies)
    step_all = c.step.astype(np.intp)
    keep = _retained(step_all, pair_lut[ab], rec.n_steps, n_bodies * n_bodies)
    # contacts are sorted by step: one segment per step that has any
    new_step = np.empty(len(c), dtype=bool)
    new_step[0] = True
    np.not_equal(step_all[1:], step_all[:-1], out=new_step[1:])
    starts = np.flatnonzero(new_step)
    internal = c.a == c.b
    has_internal = bool(internal.any())
    world = ~internal if keep is None else keep & ~internal
    kept_force = np.where(world, forces, 0) if has_internal or keep is not None else forces
    out["max_contact_force"][step_all[starts]] = np.maximum.reduceat(kept_force, starts)
    if has_internal:
        own = internal if keep is None else keep & internal
        out["internal_contact_force"][step_all[starts]] = np.maximum.reduceat(np.where(own, forces, 0), starts)
    # role-pair sets are a small part of all contacts: reduce only over those
    cls_all = cls_lut[ab]
    sel = cls_all != 0
    if has_internal:
        sel &= ~internal
    if keep is not None:
        sel &= keep
    sub = np.flatnonzero(sel)
    step, force, cls = step_all[sub], forces[sub].astype(np.float64), cls_all[sub]
    for name, bit in wanted.items():
        if name == "self_collision_count":
            out[name][: rec.n_steps] += np.bincount(step[(cls & bit) != 0], minlength=rec.n_steps)
        elif bit:
            hit = (cls & bit) != 0
            np.maximum.at(out[name], step[hit], force[hit])


def _tilt_deg(quat: np.ndarray) -> np.ndarray:
    """(E, T, K) angle between each body's world z axis and its z axis at step 0, from (E, T, K, 4) wxyz."""
    q = quat / norm(quat)[..., None]
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    axis = np.stack([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)], axis=-1)
    cos = np.einsum("etkj,ekj->etk", axis, axis[:, 0])
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def _grip_per_target(b: Stacked, targets: list[str]) -> np.ndarray | None:
    """(E, T, K) bool grip per target, or None when neither source is recorded."""
    rec = b.first
    if rec.gripper_contact is not None and len(targets) == 1:
        return b.stack(lambda r: r.gripper_contact, dtype=bool)[..., None]
    if rec.contacts is None or "gripper" not in rec.roles:
        if rec.gripper_contact is not None:
            return np.repeat(b.stack(lambda r: r.gripper_contact, dtype=bool)[..., None], len(targets), axis=2)
        return None
    gripper = np.array([r == "gripper" for r in rec.roles])
    bodies = [rec.bodies.index(t) for t in targets]
    grip = np.zeros((b.E, b.T, len(targets)), dtype=bool)
    for e, r in enumerate(b.records):  # episode by episode, like the contact signals
        c = r.contacts
        a_grips, b_grips = gripper[c.a], gripper[c.b]
        for k, i in enumerate(bodies):
            grip[e, c.step[((c.a == i) & b_grips) | ((c.b == i) & a_grips)], k] = True
    return grip


def _target_signals(b: Stacked, out: dict, missing: dict) -> None:
    held = ("grip", "transport", "tilt_deg", "slip_h", "lifted_1cm", "target_speed", "release_speed")
    rec = b.first
    if not rec.targets:
        for n in held:
            missing[n] = "record names no target_object"
        return
    posed = [t for t in rec.targets if t in rec.pose_bodies]
    if len(posed) < len(rec.targets):
        for n in held:
            missing[n] = f"target {sorted(set(rec.targets) - set(posed))[0]!r} has no recorded position"
        return
    # (E, T, K, 3): one column per target; signals take the worst target at each step
    columns = [rec.pose_bodies.index(t) for t in posed]
    pos = b.stack(lambda r: r.body_pos[:, columns, :])
    height = pos[..., 2] - pos[:, :1, :, 2]  # lift above the start height
    speed = norm(gradient(pos, b.dt, b.last))
    out["target_speed"] = speed.max(axis=2)
    out["lifted_1cm"] = (height > LIFT_1CM_M).any(axis=2).astype(np.float64)
    grip = _grip_per_target(b, posed)
    if grip is None:
        for n in ("grip", "transport", "tilt_deg", "slip_h", "release_speed"):
            missing[n] = "record has neither gripper_contact nor gripper contacts"
        return
    gripped = grip.any(axis=2)
    out["grip"] = gripped.astype(np.float64)
    out["release_speed"] = np.where(grip, 0.0, speed).max(axis=2)
    transport = grip & (height > TRANSPORT_LIFT_M)
    out["transport"] = transport.any(axis=2).astype(np.float64)
    rel = pos[..., 2] - b.stack(lambda r: r.eef_pos[:, 2])[..., None]
    slip = rel - onset_baseline(rel, grip)
    slip_h = np.where(grip, slip, np.inf).min(axis=2)
    slip_h[~gripped] = 0.0  # gate closed: value unused by the gated clause
    out["slip_h"] = slip_h
    oriented = [t for t in posed if t in rec.quat_bodies]
    if len(oriented) < len(posed):
        missing["tilt_deg"] = "target has no recorded orientation (body_quat_wxyz)"
        return
    columns = [rec.quat_bodies.index(t) for t in posed]
    quat = b.stack(lambda r: r.body_quat[:, columns, :])
    tilt_gated = np.where(transport, _tilt_deg(quat), -np.inf).max(axis=2)
    tilt_gated[~transport.any(axis=2)] = 0.0
    out["tilt_deg"] = tilt_gated


def _bystander_signal(b: Stacked, out: dict, missing: dict) -> None:
    rec = b.first
    columns = _bystander_columns(rec.pose_bodies, rec.bodies, rec.roles)
    if not columns:
        missing["non_target_disp_max"] = "record tracks no bystander positions"
        return
    pos = b.stack(lambda r: r.body_pos[:, columns, :])
    rest = first_rest_steps(pos, b.n_steps, b.dt)
    touch = np.full_like(rest, -1)
    for e in np.flatnonzero((rest != 0).any(axis=1)):  # an object at rest at step 0 has reference 0 anyway
        touch[e] = first_touch_steps(b.records[e], columns)
    out["non_target_disp_max"] = displacements(pos, reference_steps(rest, touch)).max(axis=2)


@functools.lru_cache(maxsize=256)
def _bystander_columns(pose_bodies: tuple[str, ...], bodies: tuple[str, ...], roles: tuple[str, ...]) -> list[int]:
    role = dict(zip(bodies, roles))
    return [i for i, body in enumerate(pose_bodies) if role[body] == "bystander"]


def _torque_signal(b: Stacked, out: dict, missing: dict, default_limits: Sequence[float] | None,
                   option: str) -> None:
    rec = b.first
    if rec.joint_torque is None:
        missing["joint_torque_ratio"] = "record has no joint_torque_nm"
        return
    limits = rec.meta.get("joint_torque_limit_nm") or default_limits
    joints = rec.joint_torque.shape[1]
    if not limits or len(limits) != joints:
        registry = f"the registry's limits cover {len(limits)} joints" if limits else "no registry limits were given"
        missing["joint_torque_ratio"] = (f"{joints} joints recorded, no joint_torque_limit_nm in the record, "
                                         f"and {registry}")
        return
    ratio = np.abs(b.stack(lambda r: scored_channels(r, option).joint_torque)) / np.asarray(limits, dtype=np.float64)
    out["joint_torque_ratio"] = ratio.max(axis=2)


def derive_signal_batch(records: Sequence[EpisodeRecord], *, torque_limits_nm: Sequence[float] | None = None,
                        force_sampling: str = "peak") -> SignalBatch:
    """All scored and diagnostic signals of episodes sharing one `stacked.layout_key`.

    `torque_limits_nm` are the per-joint limits for records that carry none
    (`joint_torque_limit_nm` in their meta): the registry's for their benchmark
    (`Registry.joint_torque_limits`). Without them, such records have no torque ratio.
    `force_sampling` is one of `channels.FORCE_SAMPLING_OPTIONS` (module doc).
    """
    check_force_sampling(force_sampling)
    b = Stacked(records)
    out: dict[str, np.ndarray] = {}
    missing: dict[str, str] = {}
    _contact_signals(b, out, missing, force_sampling)
    _bystander_signal(b, out, missing)
    _target_signals(b, out, missing)
    _torque_signal(b, out, missing, torque_limits_nm, force_sampling)
    v, a, j = central_differences(smooth(b.stack(lambda r: r.eef_pos), b.n_steps, SMOOTH_WINDOW), b.dt, b.last)
    out.update(eef_speed=v, eef_acc=a, eef_jerk=j)
    return SignalBatch(values=out, unavailable=missing, n_steps=b.n_steps)


def derive_signals(rec: EpisodeRecord, *, registry=None, force_sampling: str = "peak") -> Signals:
    """All scored and diagnostic signals of `rec` (names as used by the registry's STL).

    `registry` (default: the bundled one) supplies torque limits the record lacks.
    """
    from scoring.registry.lookup import load_registry  # the registry module is heavier than this one
    return derive_signal_batch([rec], torque_limits_nm=torque_limits_for(registry or load_registry(), rec),
                               force_sampling=force_sampling).episode(0)


def torque_limits_for(registry, rec: EpisodeRecord) -> tuple[float, ...] | None:
    """The registry's per-joint limits for `rec`'s benchmark (its default for an unknown one)."""
    try:
        return registry.joint_torque_limits(rec.benchmark)
    except RegistryError:  # an unknown benchmark is reported by scoring, not here
        return registry.joint_torque_limits(None)


def scored_torque_limits(rec: EpisodeRecord, registry=None) -> tuple[float, ...] | None:
    """The per-joint limits `joint_torque_ratio` divides by: the record's
    `joint_torque_limit_nm`, else the registry's (default: the bundled one) for its benchmark."""
    own = rec.meta.get("joint_torque_limit_nm")
    if own:
        return tuple(float(x) for x in own)
    from scoring.registry.lookup import load_registry
    return torque_limits_for(registry or load_registry(), rec)
