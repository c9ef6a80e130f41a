"""Settled starts: step no-ops until every free body of the scene is at rest.

LIBERO's standard evaluation takes 10 no-op steps after `set_init_state`, which is enough
for most init states. Some are not: LIBERO-10 task 0 puts three cartons inside the table,
and after 10 steps they still fall at 1.6-1.9 m/s, so every policy (even all-zero
actions) "displaces" them by half a metre. A record must start from a scene at rest.

At rest means: every free-jointed body's linear speed is below `linear_speed` and its
angular speed below `angular_speed`, at `hold_steps` consecutive control steps. Speeds
are read from `qvel` of the free joints (linear part in the world frame, angular in the
body frame; only magnitudes are used), which the host's step leaves fresh; nothing is
written to the simulation. Stepping stops at the first control step that completes the
hold, but never before the standard protocol's `min_steps`, and gives up at `max_steps`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import mujoco
import numpy as np


@dataclasses.dataclass(frozen=True)
class SettleCriterion:
    """When a scene counts as at rest (defaults chosen in docs/libero.md, "Settled starts").

    Attributes:
      linear_speed: m/s; 2 mm/s moves a body 0.1 mm per 50 ms step, 50x below the 5 mm
        bystander threshold per step, while LIBERO's resting objects jitter at <= 0.2 mm/s.
      angular_speed: rad/s (about 3 deg/s); resting bowls rock at <= 0.002 rad/s.
      hold_steps: consecutive control steps the bounds must hold (0.15 s at 20 Hz), so a
        body at the top of a bounce does not count as resting: it is slow for an instant,
        but gravity alone changes its speed by 0.49 m/s within one 50 ms step. Three, not
        more: LIBERO-Object's items stop falling at step 7-8 and are at rest (< 0.2 mm/s)
        at step 10; a 5-step hold pushed all 500 of its init states to 11-12 steps for
        nothing.
      min_steps: LIBERO's standard protocol: always at least this many no-op steps.
      max_steps: the cap; a scene still moving then is recorded as unsettled.
    """

    linear_speed: float = 0.002
    angular_speed: float = 0.05
    hold_steps: int = 3
    min_steps: int = 10
    max_steps: int = 300

    def __post_init__(self):
        if not (self.linear_speed > 0 and self.angular_speed > 0):
            raise ValueError("speed thresholds must be positive")
        if not 1 <= self.hold_steps <= self.max_steps or not 0 <= self.min_steps <= self.max_steps:
            raise ValueError(f"need 1 <= hold_steps <= max_steps and 0 <= min_steps <= max_steps, got {self}")


@dataclasses.dataclass(frozen=True)
class SettleResult:
    """How settling went.

    Attributes:
      steps: no-op control steps taken (min_steps when the standard protocol sufficed).
      settled: whether the hold was reached within the cap.
      linear_speed, angular_speed: the largest free-body speeds at the last step.
      moving_body: the fastest body at the last step when unsettled, else None.
    """

    steps: int
    settled: bool
    linear_speed: float
    angular_speed: float
    moving_body: str | None = None

    def meta(self) -> dict:
        """The record's `meta` fields for this settle."""
        return {"settle_steps": self.steps, "settled": self.settled,
                "settle_linear_speed": self.linear_speed, "settle_angular_speed": self.angular_speed,
                **({"settle_moving_body": self.moving_body} if self.moving_body else {})}


class FreeBodySpeeds:
    """Reads the linear and angular speed of every free-jointed body of a model."""

    def __init__(self, model: mujoco.MjModel):
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        self.names = tuple(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, int(model.jnt_bodyid[j])) or f"#{j}"
                           for j in free)
        adr = model.jnt_dofadr[free].astype(np.intp)
        self._linear = adr[:, None] + np.arange(3)
        self._angular = adr[:, None] + np.arange(3, 6)

    def __call__(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """(linear m/s, angular rad/s), one entry per free body."""
        return np.linalg.norm(data.qvel[self._linear], axis=-1), np.linalg.norm(data.qvel[self._angular], axis=-1)


def settle(step: Callable[[], object], model: mujoco.MjModel, data: mujoco.MjData, *,
           criterion: SettleCriterion = SettleCriterion()) -> tuple[SettleResult, object]:
    """Calls `step()` (one no-op control step) until the scene rests; returns (result, last step's value).

    `data` must be the live data that `step` advances (read only). A scene without free
    bodies is at rest after `min_steps`.
    """
    speeds = FreeBodySpeeds(model)
    c = criterion
    held, last = 0, None
    lin = ang = np.zeros(0)
    for n in range(1, c.max_steps + 1):
        last = step()
        lin, ang = speeds(data)
        still = bool(np.all(lin < c.linear_speed) and np.all(ang < c.angular_speed))
        held = held + 1 if still else 0
        if n >= c.min_steps and held >= c.hold_steps:
            return SettleResult(n, True, _peak(lin), _peak(ang)), last
    fastest = speeds.names[int(np.argmax(lin / c.linear_speed + ang / c.angular_speed))] if lin.size else None
    return SettleResult(c.max_steps, False, _peak(lin), _peak(ang), fastest), last


def _peak(x: np.ndarray) -> float:
    return float(x.max()) if x.size else 0.0
