"""A scripted pick-and-place state machine for LIBERO, parameterised by a `Profile`.

Not a VLA: it reads privileged object poses from the observation (`<obj>_pos`,
`<obj>_quat`) and the goal from `TaskInfo`. Phases: pregrasp -> descend -> close ->
lift -> carry -> lower -> open -> retreat. Each phase ends when its target is reached,
when the hand stalls (blocked by contact), or after a step budget, so a blocked motion
never freezes the episode. Actions are LIBERO OSC_POSE deltas; the hand keeps pointing
down and turns about the vertical to close across an object's narrow side.

`PROFILES` holds the three behaviours (careful, hasty, sloppy) as data; `scripted(name)`
is the factory `safevla rollout --policy careful` uses. The interface it implements is
`replay.record.policy_api`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from replay.record.policy_api import TaskInfo


@dataclasses.dataclass(frozen=True)
class Profile:
    """One scripted behaviour. Distances in metres, speeds as fractions of the OSC range.

    Attributes:
      speed: largest |a[:3]| while travelling (1.0 commands 5 cm per step).
      fine_speed: largest |a[:3]| for the final grasp approach and the placement.
      rot_speed: largest |a[3:6]| (1.0 commands 0.5 rad per step).
      hover: height above the pick's top from which the hand descends to grasp.
      clearance: carried object's bottom above the tallest obstacle on the path; negative
        values drag it low through bystanders (a low pass).
      lift: height of the first lift straight up after closing.
      lift_speed: largest |a[:3]| during that lift (a slow lift loads the grasp gently).
      close_steps: steps spent closing before lifting.
      loose: stop squeezing as soon as the fingers touch (a weak grasp that can slip).
      release: height of the pick's bottom above its support when the gripper opens;
        negative drives the held object into the support (a hard placement).
      grasp_depth: how far below the pick's top the fingers close (shallow = a pinch of
        the top edge that can slide out).
      grasp_dz: extra depth of the grasp point (negative jams the fingers into the table).
      tilt_deg: roll of the hand while carrying (a tilted carry).
      shake: amplitude of a side-to-side jerk added while carrying (fraction of range).
      retries: regrasp attempts after the pick fails to rise.
      open_steps: steps spent opening before retreating.
    """

    name: str
    speed: float
    fine_speed: float
    rot_speed: float
    hover: float
    clearance: float
    lift: float
    close_steps: int
    release: float
    lift_speed: float = 1.0
    loose: bool = False
    grasp_depth: float = 0.033
    grasp_dz: float = 0.0
    tilt_deg: float = 0.0
    shake: float = 0.0
    retries: int = 1
    open_steps: int = 12


PROFILES: dict[str, Profile] = {
    "careful": Profile("careful", speed=0.9, fine_speed=0.4, rot_speed=0.3, hover=0.06, clearance=0.05,
                       lift=0.10, close_steps=12, release=0.005, lift_speed=0.3, retries=2),
    "hasty": Profile("hasty", speed=1.0, fine_speed=1.0, rot_speed=1.0, hover=0.12, clearance=0.0, lift=0.04,
                     close_steps=7, release=-0.06, grasp_dz=-0.06, retries=1, open_steps=6),
    "sloppy": Profile("sloppy", speed=0.9, fine_speed=0.5, rot_speed=1.0, hover=0.05, clearance=-0.02, lift=0.04,
                      close_steps=8, release=0.05, loose=True, grasp_depth=0.033, tilt_deg=25.0, shake=0.5,
                      retries=1),
}





MAX_OPENING = 0.075   # wider objects (bowls) are grasped by the rim
ROT_SCALE = 0.5       # OSC_POSE maps a rotation action of 1 to 0.5 rad
POS_GAIN = 25.0       # action per metre of error: 20 would command exactly the error (5 cm = 1.0)
HAND_HALF_WIDTH = 0.09  # the Panda hand spans about 0.18 m along its closing axis
BUDGET = {"pregrasp": 70, "descend": 40, "lift": 30, "carry": 90, "lower": 40, "retreat": 30}


def quat_xyzw_to_mat(q: np.ndarray) -> np.ndarray:
    x, y, z, w = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def rotvec(r: np.ndarray) -> np.ndarray:
    """Axis-angle vector of rotation matrix `r`."""
    angle = math.acos(max(-1.0, min(1.0, (np.trace(r) - 1) / 2)))
    if angle < 1e-9:
        return np.zeros(3)
    if math.pi - angle < 1e-6:  # sin ~ 0: read the axis off the symmetric part
        w, v = np.linalg.eigh(r)
        return v[:, np.argmax(w)] * angle
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]]) / (2 * math.sin(angle))
    return axis * angle


def rot_z(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def rot_x(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


class ScriptedPolicy:
    """One profile's pick-and-place controller; call `set_task` then `reset` per episode."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self.task: TaskInfo | None = None
        self.reset()

    def set_task(self, task: TaskInfo) -> None:
        self.task = task

    def reset(self) -> None:
        self.phase = "pregrasp"
        self.n = 0            # steps spent in the current phase
        self.t = 0
        self.r0 = None        # hand orientation at the first step (pointing down)
        self.yaw = 0.0
        self.grasp = None     # (offset from object centre, eef z) chosen at pregrasp
        self.tries = 0
        self.history: list[np.ndarray] = []
        self.start_z = 0.0
        self.grip = -1.0
        self.fingers = 0.0
        self.hold = np.zeros(3)

    # ------------------------------------------------------------------ helpers

    def _obj(self, obs: Mapping[str, np.ndarray], name: str):
        """World box centre, half sizes and rotation of object `name` from the observation."""
        r = quat_xyzw_to_mat(obs[f"{name}_quat"])
        g = self.task.geometry[name]
        centre = np.asarray(obs[f"{name}_pos"], dtype=np.float64) + r @ np.asarray(g.center)
        half = np.abs(r) @ np.asarray(g.half)
        return centre, half, r

    def _goal(self, obs) -> np.ndarray:
        off = np.asarray(self.task.goal_offset, dtype=np.float64)
        return off if self.task.place is None else np.asarray(obs[f"{self.task.place}_pos"]) + off

    def _plan_grasp(self, obs) -> None:
        centre, half, r = self._obj(obs, self.task.pick)
        g = self.task.geometry[self.task.pick]
        axes = [i for i in range(3) if abs(r[2, i]) < 0.7]  # roughly horizontal body axes
        i = min(axes, key=lambda k: g.half[k]) if axes else 0
        if 2 * g.half[i] <= MAX_OPENING:
            u = r[:, i]
            self.yaw = _half_turn(math.atan2(u[1], u[0]) - math.pi / 2)
            depth = self.profile.grasp_depth
            self.grasp = (np.zeros(2), max(centre[2] - half[2] + 0.012, centre[2] + half[2] - depth))
            return
        # too wide to span: close across the rim wall, on the side farthest from obstacles
        # body-frame size: a bowl tilted on a ramekin has a larger world box than rim
        up = int(np.argmax(np.abs(r[2])))
        radius = max(g.half[k] for k in range(3) if k != up) + 0.007
        rim = np.asarray(g.center, dtype=np.float64)
        rim[up] += math.copysign(g.half[up], r[2, up])
        rim = np.asarray(obs[f"{self.task.pick}_pos"], dtype=np.float64) + r @ rim  # centre of the rim
        z = rim[2] - self.profile.grasp_depth  # fingers straddle the top of the wall
        best = None
        for k in range(8):
            phi = k * math.pi / 4
            p = rim[:2] + radius * np.array([math.cos(phi), math.sin(phi)])
            yaw = _half_turn(phi - math.pi / 2)
            # prefer room for the whole hand, then little wrist rotation
            score = min(self._clearance(p, np.array([math.cos(phi), math.sin(phi)]), z), 0.08) - 0.01 * abs(yaw)
            if best is None or score > best[0]:
                best = (score, p - centre[:2], yaw)
        _, off, self.yaw = best
        self.grasp = (off, z)

    def _clearance(self, p: np.ndarray, axis: np.ndarray, z: float) -> float:
        """Gap between the open hand (a segment along the closing axis) and anything taller
        than the grasp height."""
        pts = p[None, :] + np.linspace(-HAND_HALF_WIDTH, HAND_HALF_WIDTH, 9)[:, None] * axis[None, :]
        gaps = [1.0]
        for o in self.task.obstacles:
            if o.name == self.task.place or o.hi[2] < z + 0.01:
                continue
            d = np.maximum(0.0, np.maximum(np.asarray(o.lo[:2]) - pts, pts - np.asarray(o.hi[:2])))
            gaps.append(float(np.linalg.norm(d, axis=1).min()))
        return min(gaps)

    def _path_top(self, a: np.ndarray, b: np.ndarray, margin: float) -> float:
        """Highest obstacle top within `margin` of the segment a-b (xy)."""
        top = -np.inf
        for o in self.task.obstacles:
            if o.name == self.task.place:  # the goal itself is cleared through rim_dz
                continue
            lo, hi = np.asarray(o.lo[:2]) - margin, np.asarray(o.hi[:2]) + margin
            ts = np.linspace(0.0, 1.0, 12)[:, None]
            pts = a[None, :] + ts * (b - a)[None, :]
            if ((pts >= lo) & (pts <= hi)).all(axis=1).any():
                top = max(top, o.hi[2])
        return top

    def _stalled(self, eef: np.ndarray) -> bool:
        h = self.history
        return len(h) >= 5 and np.linalg.norm(h[-1] - h[-5]) < 0.003

    def _next(self, phase: str) -> None:
        self.phase, self.n = phase, 0
        self.history.clear()

    # ------------------------------------------------------------------ the controller

    def __call__(self, obs: Mapping[str, np.ndarray], language: str) -> np.ndarray:
        p = self.profile
        eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
        rot = quat_xyzw_to_mat(obs["robot0_eef_quat"])
        if self.r0 is None:
            self.r0 = rot
        self.t += 1
        self.n += 1
        self.history.append(eef)
        if self.task is None or self.task.pick is None:
            return np.array([0, 0, 0, 0, 0, 0, -1.0])  # no pick-and-place goal: hold still
        if self.grasp is None:
            self._plan_grasp(obs)
        target, speed, tilt = eef, p.speed, 0.0
        centre, half, _ = self._obj(obs, self.task.pick)
        bottom = centre[2] - half[2]
        pos = np.asarray(obs[f"{self.task.pick}_pos"], dtype=np.float64)
        if self.phase in ("carry", "lower") and bottom - self.start_z > 0.01:
            # held: follow the object as it sits in the hand now (it may swing or slip);
            # LIBERO's goal predicates test the object's origin, so align that
            self.hold = eef - np.array([pos[0], pos[1], bottom])
        off, grasp_z = self.grasp
        grasp = np.array([*(centre[:2] + off), grasp_z + p.grasp_dz])
        ph = self.phase
        if ph == "pregrasp":
            self.grip = -1.0
            target = np.array([grasp[0], grasp[1], max(grasp[2], centre[2] + half[2] + p.hover)])
            if p.clearance > 0 and np.linalg.norm(target[:2] - eef[:2]) > 0.03:
                # careful: travel above everything under the hand's span, rising first
                travel = max(target[2], self._path_top(eef[:2], target[:2], HAND_HALF_WIDTH) + 0.05)
                target = np.array([eef[0], eef[1], travel]) if eef[2] < travel - 0.02 else \
                    np.array([target[0], target[1], travel])
            aligned = abs(_half_turn(self._yaw_now(rot) - self.yaw)) < math.radians(6)
            if (np.linalg.norm(target - eef) < 0.015 and aligned) or self.n > BUDGET[ph]:
                self._next("descend")
        elif ph == "descend":
            target, speed = grasp, p.fine_speed
            if np.linalg.norm(target - eef) < 0.008 or self._stalled(eef) or self.n > BUDGET[ph]:
                self._next("close")
        elif ph == "close":
            target = eef
            fingers = float(np.sum(np.abs(obs["robot0_gripper_qpos"])))
            if p.loose and self.n > 2 and abs(fingers - self.fingers) < 5e-4:
                self.grip = 0.0  # touching: 0 holds the finger targets where they are, barely squeezing
            elif self.grip != 0.0:
                self.grip = 1.0
            self.fingers = fingers
            if self.n >= p.close_steps:
                self.start_z, self.lift_from = bottom, eef[2]
                self._next("lift")
        elif ph == "lift":
            target, speed = np.array([eef[0], eef[1], self.lift_from + p.lift]), p.lift_speed
            if abs(target[2] - eef[2]) < 0.01 or self._stalled(eef) or self.n > BUDGET[ph]:
                if bottom - self.start_z < 0.015 and self.tries < p.retries:  # grasp missed: try again
                    self.tries += 1
                    self.grasp = None
                    self.grip = -1.0
                    self._next("pregrasp")
                else:
                    # the hand-to-object offset as grasped: an object left behind does not
                    # drag the hand target along with it
                    self.hold = eef - np.array([pos[0], pos[1], bottom])
                    self._next("carry")
        elif ph == "carry":
            goal = self._goal(obs)
            hang = self.hold[2]
            span = HAND_HALF_WIDTH if p.clearance > 0 else 0.03 + max(half[:2])
            over = self._path_top(centre[:2], goal[:2], span)
            z = max(over + p.clearance, goal[2] + self.task.rim_dz + 0.02) + hang
            if p.clearance <= 0:  # never dive on the way: a low pass, not a plunge
                z = max(z, eef[2] - 0.01)
            target = np.array([goal[0] + self.hold[0], goal[1] + self.hold[1], z])
            arrived = np.linalg.norm(target[:2] - eef[:2]) < 0.01
            if p.clearance > 0 and eef[2] < z - 0.02:  # careful: rise first, then travel
                target[:2] = eef[:2]
            tilt = p.tilt_deg
            if arrived or self.n > BUDGET[ph]:
                self._next("lower")
        elif ph == "lower":
            goal = self._goal(obs)
            hang = self.hold[2]
            z = goal[2] + self.task.support_dz + p.release + hang
            target, speed = np.array([goal[0] + self.hold[0], goal[1] + self.hold[1], z]), p.fine_speed
            if abs(z - eef[2]) < 0.006 or self._stalled(eef) or self.n > BUDGET[ph]:
                self._next("open")
        elif ph == "open":
            target, self.grip = eef, -1.0
            if self.n >= p.open_steps:
                self._next("retreat")
        else:  # retreat and stay clear
            target = eef + [0, 0, 0.08] if self.n < 10 else eef
        return self._action(eef, rot, target, speed, tilt)

    def _yaw_now(self, rot: np.ndarray) -> float:
        rel = rot @ self.r0.T
        return math.atan2(rel[1, 0], rel[0, 0])

    def _action(self, eef, rot, target, speed, tilt_deg) -> np.ndarray:
        a = np.zeros(7)
        err = np.asarray(target, dtype=np.float64) - eef
        a[:3] = np.clip(POS_GAIN * err, -speed, speed)
        if self.phase == "carry" and self.profile.shake:  # a jerky, swaying carry
            a[1] = np.clip(a[1] + self.profile.shake * (1.0 if (self.t // 2) % 2 else -1.0), -1.0, 1.0)
        desired = rot_x(math.radians(tilt_deg)) @ rot_z(self.yaw) @ self.r0
        rs = self.profile.rot_speed
        a[3:6] = np.clip(rotvec(desired @ rot.T) / ROT_SCALE, -rs, rs)
        a[6] = self.grip
        return a


def _half_turn(angle: float) -> float:
    """`angle` wrapped to (-pi/2, pi/2]: a parallel gripper is symmetric under a half turn."""
    return (angle + math.pi / 2) % math.pi - math.pi / 2


def scripted(name: str) -> Callable[[], Any]:
    """Factory of the scripted profile `name` (careful, hasty, sloppy)."""
    if name not in PROFILES:
        raise KeyError(f"unknown scripted profile {name!r}; choose one of {', '.join(PROFILES)}")
    profile = PROFILES[name]
    return lambda: ScriptedPolicy(profile)
