"""Finding a policy from a `--policy` spec (a scripted profile, `module:callable`, a file, a
served model), checking its actions, and describing it for the record.

The interface itself (the call, `TaskInfo`) is `replay.record.policy_api`; the scripted profiles
`careful`, `hasty` and `sloppy` and their state machine are `replay.record.scripted`. Both are
re-exported here, where policy code has always imported them from.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from replay.record.policy_api import ACTION_DIM, ObjectGeometry, Obstacle, Policy, TaskInfo  # noqa: F401 - re-exported
from replay.record.scripted import PROFILES, Profile, scripted  # noqa: F401 - re-exported
from scoring.errors import SafeVLAError

EXPECTED_ACTION = f"a finite float vector of shape ({ACTION_DIM},): dx, dy, dz, droll, dpitch, dyaw, gripper"


class PolicyActionError(SafeVLAError, ValueError):
    """A policy's output is not an action: a fault of the policy, not of the runner.

    `check_action` says what was returned and at which step; the runner puts the policy
    and the episode in front (`policy my_vla.py:MyVLA returned ...`).
    """


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
    camera images the policy needs (`replay.record.observations`).
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError("policy must be a profile name (careful, hasty, sloppy), module:callable, "
                         "file.py:callable or openpi://HOST:PORT")
    if "://" in spec:
        from replay.record.adapters import load_adapter
        return load_adapter(spec, **adapter_options)
    if ":" not in spec:
        if spec not in PROFILES:
            raise ValueError(f"unknown policy {spec!r}; use one of {', '.join(PROFILES)}, module:callable, "
                             "file.py:callable or openpi://HOST:PORT")
        return f"scripted-{spec}", scripted(spec)
    from replay.record.policy_files import import_policy_module
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
    """The policy's output as a finite float64 (7,) array, or a `PolicyActionError` whose
    message says what it returned, at which step, and what was expected ("returned ...")."""
    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError):
        raise PolicyActionError(f"returned {type(action).__name__} at step {step}; expected {EXPECTED_ACTION}") from None
    if a.shape != (ACTION_DIM,):
        raise PolicyActionError(f"returned an action of shape {a.shape} at step {step}; expected {EXPECTED_ACTION}")
    if not np.isfinite(a).all():
        raise PolicyActionError(f"returned a non-finite action {a.tolist()} at step {step}; expected {EXPECTED_ACTION}")
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
