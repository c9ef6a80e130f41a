"""A violation to show, and the record bodies it is about.

A `Violation` says which spec failed, at which step, by how much, and which bodies to
tint; `bodies_for` picks those bodies from the record (the violating contact pair, the
displaced bystander, the tilted target, the most loaded link). Pure numpy over the record:
no MuJoCo model is needed to name them. Forces and torques are read on the channel the
score read (`scoring.evaluate.channels.scored_channels`, the violation's `force_sampling`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from scoring.errors import SafeVLAError
from scoring.evaluate.channels import check_force_sampling, joint_ratios, scored_channels
from scoring.evaluate.displacement import bystander_displacement
from scoring.evaluate.signals import scored_torque_limits
from scoring.records.schema import EpisodeRecord
from scoring.registry.lookup import spec_name
from scoring.report.display import format_quantity as _format

VIOLATION_RGB = (230, 25, 25)
SUCCESS_RGB = (25, 170, 60)
_OPS = (">", "<", ">=", "<=")


class RenderError(SafeVLAError, ValueError):
    """Bad replay input: a missing mesh or texture, an unknown camera, a step out of range,
    an episode with nothing to highlight. The message says what was expected."""


@dataclasses.dataclass(frozen=True)
class Violation:
    """One violated spec at its violating frame.

    Attributes:
      family: the spec family (or spec id), e.g. "max_contact_force".
      step: the violating frame (the step of the worst margin).
      value: the signal's value there, in `unit`.
      threshold: the spec's threshold, in `unit`.
      unit: "N", "m", "deg", "m/s", "" ...
      op: how the value relates to the threshold in the violation (">" or "<", as in the
        caption "412 N > 200 N").
      bodies: record body names to tint (the contact pair, the displaced or tilted object).
      force_sampling: the force-sampling option the score was made under ("peak" or
        "control"): which channel the replay's force arrow reads.
    """

    family: str
    step: int
    value: float
    threshold: float
    unit: str = ""
    op: str = ">"
    bodies: tuple[str, ...] = ()
    force_sampling: str = "peak"

    def __post_init__(self):
        if isinstance(self.step, bool) or not isinstance(self.step, (int, np.integer)) or self.step < 0:
            raise RenderError(f"Violation.step: expected a step index >= 0, got {self.step!r}")
        if self.op not in _OPS:
            raise RenderError(f"Violation.op: expected one of {', '.join(_OPS)}, got {self.op!r}")
        if isinstance(self.bodies, str) or not all(isinstance(b, str) for b in self.bodies):
            raise RenderError(f"Violation.bodies: expected a tuple of body names, got {self.bodies!r}")
        try:
            check_force_sampling(self.force_sampling)
        except ValueError as exc:
            raise RenderError(f"Violation.force_sampling: {exc}") from None
        object.__setattr__(self, "step", int(self.step))
        object.__setattr__(self, "bodies", tuple(self.bodies))

    @property
    def caption(self) -> str:
        """E.g. "max contact force 412 N > 200 N": the spec's human name from the registry."""
        fam = canonical_family(self.family)
        return f"{spec_name(self.family)} {format_quantity(self.value, self.unit, family=fam)} {self.op} " \
               f"{format_quantity(self.threshold, self.unit, family=fam)}"


def format_quantity(value: float, unit: str, scale: float | None = None, *, family: str | None = None) -> str:
    """A readable number in the quantity's one display unit (`scoring.report.display`, data in
    assets/display.yaml): metres of displacement in mm, radians in degrees. Style "plain":
    ASCII and ° only, which Pillow's bundled font has. `scale` is kept for callers; the unit
    no longer depends on the magnitude."""
    return _format(value, unit, family=family, style="plain")


_ARM = frozenset({"robot", "gripper"})
# family -> which contact pairs count (role sets, order-insensitive); None: any pair.
_CONTACT_PAIRS = {
    "arm_furniture_force": lambda a, b: (a in _ARM and b == "furniture") or (b in _ARM and a == "furniture"),
    "arm_no_furniture_collision": lambda a, b: (a in _ARM and b == "furniture") or (b in _ARM and a == "furniture"),
    "target_furniture_force": lambda a, b: {a, b} == {"target", "furniture"},
    "max_contact_force": None,
    "self_collision_free": lambda a, b: (a == "robot" and b in _ARM) or (b == "robot" and a in _ARM),
    "internal_contact_force": None,  # two parts of one object (a == b), never a scored family's pair
}
_TARGET_FAMILIES = ("held_object_tilt_world", "stable_grasp_maintained", "target_obj_speed", "release_speed")
_GRIPPER_FAMILIES = ("eef_speed", "eef_acc", "eef_jerk")


def canonical_family(name: str) -> str:
    """The family of a spec id ("max_contact_force_under_200N" -> "max_contact_force")."""
    known = (*_CONTACT_PAIRS, *_TARGET_FAMILIES, *_GRIPPER_FAMILIES, "non_target_max_disp", "joint_torque")
    for fam in known:
        if name == fam or name.startswith(fam + "_") or name.startswith(fam + "."):
            return fam
    return name


def bodies_for(record: EpisodeRecord, family: str, step: int, *, value: float | None = None,
               force_sampling: str = "peak") -> tuple[str, ...]:
    """The record bodies to tint for a violation of `family` at `step`, as scored under
    `force_sampling` (the store's option for the episode, `channels.store_option`).

    Contact families: among the contact entries of the family's role pairs (between two
    bodies; two parts of one body only for `internal_contact_force`), the pair whose force
    on the scored channel is nearest `value` (the recorded extreme), or the largest when
    `value` is unknown. Displacement: the bystander displaced most at `step`.
    Tilt/grasp/speed: the target nearest the end effector (the held one).
    EEF kinematics: the gripper. Joint torque: the link of the joint with the largest
    ratio at `step` on the scored channel.
    """
    fam = canonical_family(family)
    by_role = lambda *roles: tuple(b for b, r in zip(record.bodies, record.roles) if r in roles)  # noqa: E731
    if fam in _CONTACT_PAIRS:
        c = record.contacts
        if c is None or not len(c):
            return ()
        lo, hi = np.searchsorted(c.step, step, "left"), np.searchsorted(c.step, step, "right")
        keep = _CONTACT_PAIRS[fam]
        internal = fam == "internal_contact_force"
        cand = [i for i in range(lo, hi) if (c.a[i] == c.b[i]) == internal
                and (keep is None or keep(record.roles[c.a[i]], record.roles[c.b[i]]))]
        if not cand:
            return ()
        forces = scored_channels(record, force_sampling).contact_force[cand]
        pick = np.argmin(np.abs(forces - value)) if value is not None and math.isfinite(value) else np.argmax(forces)
        i = cand[int(pick)]
        return tuple(dict.fromkeys((record.bodies[c.a[i]], record.bodies[c.b[i]])))
    if fam == "non_target_max_disp":
        idx = [i for i, b in enumerate(record.pose_bodies) if record.role_of(b) == "bystander"]
        if not idx or not 0 <= step < record.n_steps:
            return ()
        disp, _ = bystander_displacement(record, idx)  # from each object's reference step, as scored
        return (record.pose_bodies[idx[int(np.argmax(disp[step]))]],)
    if fam in _TARGET_FAMILIES:  # the target in the hand: the one nearest the end effector
        targets = tuple(dict.fromkeys((*record.targets, *by_role("target"))))
        posed = [b for b in targets if b in record.pose_bodies]
        if len(targets) < 2 or not posed or not 0 <= step < record.n_steps:
            return targets
        pos = record.body_pos[step, [record.pose_bodies.index(b) for b in posed]]
        return (posed[int(np.argmin(np.linalg.norm(pos - record.eef_pos[step], axis=-1)))],)
    if fam in _GRIPPER_FAMILIES:
        return by_role("gripper")
    if fam == "joint_torque":
        return _torque_link(record, step, by_role("robot"), force_sampling)
    return ()


def _torque_link(record: EpisodeRecord, step: int, links: tuple[str, ...], force_sampling: str) -> tuple[str, ...]:
    """The link moved by the joint with the largest torque ratio at `step`, on the scored
    channel and the scorer's limits (a serial arm: the last J robot bodies in record order,
    one per recorded joint), else all robot links."""
    ratio = joint_ratios(record, force_sampling, scored_torque_limits(record))
    if ratio is None or not 0 <= step < record.n_steps or len(links) < ratio.shape[1]:
        return links
    return (links[len(links) - ratio.shape[1] + int(np.argmax(ratio[step]))],)
