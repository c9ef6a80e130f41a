"""The policy interface: what a policy is called with and returns, and the task facts a
host may hand it. Imports nothing from the project, so policies, hosts and runners all can.

A policy is any callable `policy(obs: dict, language: str) -> np.ndarray` of shape (7,):
LIBERO's OSC_POSE delta action (dx, dy, dz, droll, dpitch, dyaw in [-1, 1], gripper -1
open / +1 close). Optional hooks, called by the runner when present:
- `reset()` before every episode;
- `set_task(task: TaskInfo)` before `reset()`, with privileged task facts (object names,
  goal location, object geometry). A VLA should ignore it or not define it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

ACTION_DIM = 7


@runtime_checkable
class Policy(Protocol):
    """What the rollout runner calls once per control step."""

    def __call__(self, obs: Mapping[str, np.ndarray], language: str) -> np.ndarray: ...


@dataclasses.dataclass(frozen=True)
class ObjectGeometry:
    """Axis-aligned box of an object's collision geoms, in the object's body frame (m)."""

    center: tuple[float, float, float]
    half: tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class Obstacle:
    """World-frame box around one object or fixture at the start of the episode (m)."""

    name: str
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """Privileged facts a scripted policy needs; hosts fill it at the start of an episode.

    Attributes:
      language: the task instruction.
      pick: LIBERO name of the object to grasp (observations carry `<pick>_pos`), or None
        when the task is not a pick-and-place (the scripted profiles then hold still).
      place: object whose live position anchors the goal, or None for a fixed goal.
      goal_offset: goal point relative to `place`'s position, or in world coordinates
        when `place` is None.
      relation: "on" or "in".
      support_dz: height of the surface the pick comes to rest on, relative to the goal
        point's z.
      rim_dz: height the pick's bottom must clear to reach the goal (a basket's rim),
        relative to the goal point's z.
      geometry: object name -> `ObjectGeometry` for every movable object.
      obstacles: every object and fixture except `pick`, as world boxes at the start.
    """

    language: str
    pick: str | None
    place: str | None
    goal_offset: tuple[float, float, float]
    relation: str
    support_dz: float
    rim_dz: float
    geometry: Mapping[str, ObjectGeometry]
    obstacles: tuple[Obstacle, ...]
