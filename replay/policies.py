"""The policy protocol, and scripted pick-and-place behaviour profiles for LIBERO.

A policy is any callable `policy(obs: dict, language: str) -> np.ndarray` of shape (7,):
LIBERO's OSC_POSE delta action (dx, dy, dz, droll, dpitch, dyaw in [-1, 1], gripper -1
open / +1 close). Optional hooks, called by the runner when present:
- `reset()` before every episode;
- `set_task(task: TaskInfo)` before `reset()`, with privileged task facts (object names,
  goal location, object geometry). A VLA should ignore it or not define it.

The profiles `careful`, `hasty` and `sloppy` are SCRIPTED controllers, not VLAs. They read
privileged state: object positions and orientations from LIBERO's observation dict
(`<object>_pos`, `<object>_quat`) and the goal and geometry from `TaskInfo`. They exist to
produce real rollouts with different safety behaviour; success always comes from LIBERO's
own predicate. The motion logic lives in `replay.scripted`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

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


def scripted(name: str) -> Callable[[], Any]:
    """Factory of the scripted profile `name` (careful, hasty, sloppy)."""
    if name not in PROFILES:
        raise KeyError(f"unknown scripted profile {name!r}; choose one of {', '.join(PROFILES)}")
    from replay.scripted import ScriptedPolicy
    profile = PROFILES[name]
    return lambda: ScriptedPolicy(profile)


def load_policy(spec: str, **adapter_options: Any) -> tuple[str, Callable[[], Any]]:
    """Resolves a policy spec to (model name, zero-argument factory of a fresh policy).

    `spec` is one of:
    - a scripted profile name (careful, hasty, sloppy);
    - `module:attribute`, imported with the current directory on the import path;
    - `path/to/file.py:attribute`, loaded from that file;
    - an adapter URL: `openpi://HOST:PORT` (an OpenPI websocket policy server).
    The attribute names a policy class / factory (called with no arguments) or a ready
    policy object (shared). `adapter_options` go to adapters (e.g. `replan_steps`) and
    are ignored by the others. The factory's `cameras` attribute (if any) says which
    camera images the policy needs (`replay.observations`).
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError("policy must be a profile name (careful, hasty, sloppy), module:callable, "
                         "file.py:callable or openpi://HOST:PORT")
    if "://" in spec:
        from replay.adapters import load_adapter
        return load_adapter(spec, **adapter_options)
    if ":" not in spec:
        if spec not in PROFILES:
            raise ValueError(f"unknown policy {spec!r}; use one of {', '.join(PROFILES)}, module:callable, "
                             "file.py:callable or openpi://HOST:PORT")
        return f"scripted-{spec}", scripted(spec)
    from replay.policy_files import import_policy_module
    module_name, _, attr = spec.rpartition(":")
    module = import_policy_module(module_name)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec} is not callable; expected a policy (obs, language) -> action or a factory")
    if isinstance(obj, type) or _is_factory(obj):
        return attr, obj

    def shared():
        return obj
    shared.cameras = getattr(obj, "cameras", ())  # what the policy asks to see
    return attr, shared


def _is_factory(obj: Any) -> bool:
    """A function with no required arguments is a factory; (obs, language) is a policy."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    required = [p for p in sig.parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return not required


def check_action(action: Any, *, step: int) -> np.ndarray:
    """The policy's output as a finite float64 (7,) array, or a ValueError saying what is wrong."""
    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"policy returned {type(action).__name__} at step {step}; expected 7 numbers") from None
    if a.shape != (ACTION_DIM,):
        raise ValueError(f"policy returned an action of shape {a.shape} at step {step}; expected ({ACTION_DIM},): "
                         "dx, dy, dz, droll, dpitch, dyaw, gripper")
    if not np.isfinite(a).all():
        raise ValueError(f"policy returned a non-finite action {a.tolist()} at step {step}")
    return a


def describe_policy(spec: str, factory: Any, observations: Any = None) -> dict:
    """Provenance of a policy for `meta.policy`: adapter, model id or path, replan steps, images.

    Adapters describe themselves (`factory.provenance`); scripted profiles are `scripted`
    and everything else is the user's `python` (model id: the spec as given).
    """
    own = dict(getattr(factory, "provenance", None) or {})
    if own:
        out = own
    elif ":" not in spec and spec in PROFILES:
        out = {"adapter": "scripted", "model_id": spec}
    else:
        out = {"adapter": "python", "model_id": spec}
    out.setdefault("replan_steps", getattr(factory, "replan_steps", None))
    cameras = tuple(getattr(observations, "cameras", ()) or ())
    out["cameras"] = list(cameras)
    out["image_size"] = list(observations.image_size) if cameras else None
    return out
