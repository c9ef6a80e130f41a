"""Appendix B JSON objects and trajectory records: the reference reading, and the writing.

`loads` parses JSON text with msgspec (the project's one JSON library); `record_from_json`
turns the parsed object into a validated `EpisodeRecord` and is the reference every
faster reader must agree with (`scoring.records.json_fast`); `record_to_json` is its inverse.
It sits apart from `scoring.records.io` so that io (files) and json_fast (the fast JSONL decode)
can both build on it without importing each other.
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any

import msgspec
import numpy as np

from scoring.errors import RecordError
from scoring.records.schema import EpisodeRecord

_META_KEYS = ("model", "suite", "seed", "init_state", "language", "signal_tags",
              "joint_torque_limit_nm", "success_step", "force_sampling", "settled", "settle_steps")
_TOP_KEYS = {"episode_id", "benchmark", "task_id", "success", "dt", "target_object", "body_roles",
             "steps", "replay", "schema_version", *_META_KEYS}
_STEP_KEYS = {"t", "eef_pos_m", "body_pos_m", "body_quat_wxyz", "contacts", "joint_torque_nm",
              "joint_torque_peak_nm", "gripper_contact", "action"}


def record_from_json(obj: Any, *, source: str | None = None) -> EpisodeRecord:
    """Converts one Appendix B JSON object (already parsed) into a validated record."""
    episode = obj.get("episode_id") if isinstance(obj, dict) else None

    def fail(field: str, message: str) -> RecordError:
        return RecordError(message, file=source, episode=episode if isinstance(episode, str) else None,
                           field=field)

    if not isinstance(obj, dict):
        raise fail("(record)", f"expected a JSON object per episode, got {type(obj).__name__}")
    steps = obj.get("steps")
    if not isinstance(steps, list):
        raise fail("steps", "missing or not a list; expected one object per control step")
    if not steps:
        raise fail("steps", "expected at least one step, got an empty episode")
    for i, s in enumerate(steps):
        if not isinstance(s, dict):
            raise fail(f"steps[{i}]", f"expected an object, got {type(s).__name__}")

    roles = obj.get("body_roles")
    if not isinstance(roles, dict) or not roles:
        raise fail("body_roles", "expected a non-empty mapping of body name to role")
    index = {name: i for i, name in enumerate(roles)}

    def column(key: str, *, required: bool = False) -> list | None:
        present = [key in s for s in steps]
        if not any(present):
            if required:
                raise fail(f"steps[0].{key}", "missing; expected it at every step")
            return None
        if not all(present):
            raise fail(f"steps[{present.index(False)}].{key}",
                       "missing at this step but present at others; expected it at every step")
        return [s[key] for s in steps]

    def per_body(key: str) -> tuple[list[str], Any]:
        col = column(key)
        if col is None:
            return [], None
        first = col[0]
        if not isinstance(first, dict):
            raise fail(f"steps[0].{key}", "expected an object mapping body name to a vector")
        names = list(first)
        for i, d in enumerate(col):
            if not isinstance(d, dict) or list(d) != names and set(d) != set(names):
                got = ", ".join(d) if isinstance(d, dict) else repr(d)
                raise fail(f"steps[{i}].{key}", f"expected the same bodies at every step ({', '.join(names)}), "
                                                f"got {got}")
        return names, [[d[n] for n in names] for d in col]

    pose_bodies, body_pos = per_body("body_pos_m")
    quat_bodies, body_quat = per_body("body_quat_wxyz")
    raw_contacts = column("contacts")
    contacts = None
    if raw_contacts is not None:
        contacts = _contacts_from_json(raw_contacts, index, fail)

    meta = {k: obj[k] for k in _META_KEYS if k in obj}
    extra = {k: v for k, v in obj.items() if k not in _TOP_KEYS}
    if extra:
        meta["extra"] = extra
    step_extra = [{k: v for k, v in s.items() if k not in _STEP_KEYS} for s in steps]
    if any(step_extra):
        meta["step_extra"] = step_extra

    replay = obj.get("replay")
    if replay is not None and not isinstance(replay, dict):
        raise fail("replay", "expected an object with mjcf, qpos and qvel")

    return EpisodeRecord.build(
        source=source, episode_id=obj.get("episode_id"), benchmark=obj.get("benchmark"),
        task_id=obj.get("task_id"), success=obj.get("success"), dt=obj.get("dt"),
        target_object=obj.get("target_object"), body_roles=roles,
        t=column("t"), eef_pos=column("eef_pos_m", required=True),
        pose_bodies=pose_bodies, body_pos=body_pos, quat_bodies=quat_bodies, body_quat=body_quat,
        joint_torque=column("joint_torque_nm"), joint_torque_peak=column("joint_torque_peak_nm"),
        gripper_contact=column("gripper_contact"), contacts=contacts, actions=column("action"), meta=meta,
        replay=replay)


_GET_A, _GET_B, _GET_F = operator.itemgetter("a"), operator.itemgetter("b"), operator.itemgetter("force_n")
_GET_PEAK = operator.itemgetter("force_peak_n")


def _contacts_from_json(raw: list, index: dict[str, int], fail) -> dict:
    """Flat contact arrays from per-step lists of {a, b, force_n}; one pass per field."""
    for i, cs in enumerate(raw):
        if not isinstance(cs, list):
            raise fail(f"steps[{i}].contacts", "expected a list of {a, b, force_n} objects")
    lengths = [len(cs) for cs in raw]
    flat = [c for cs in raw for c in cs]
    step = np.repeat(np.arange(len(raw), dtype=np.int32), lengths)
    try:
        # map + itemgetter run in C: ~3x faster than comprehensions on 10^4 contacts
        a = list(map(index.__getitem__, map(_GET_A, flat)))
        b = list(map(index.__getitem__, map(_GET_B, flat)))
        forces = list(map(_GET_F, flat))
        if not set(map(type, forces)) <= {int, float}:
            raise TypeError("non-numeric force")
        force = np.array(forces, dtype=np.float64)
        peak = None
        with_peak = sum(map(_has_peak, flat))
        if with_peak:
            if with_peak != len(flat):
                raise KeyError("force_peak_n")
            peaks = list(map(_GET_PEAK, flat))
            if not set(map(type, peaks)) <= {int, float}:
                raise TypeError("non-numeric force")
            peak = np.array(peaks, dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        # the fast pass failed: find the first offending contact for a precise message
        for k, c in enumerate(flat):
            where = f"steps[{int(step[k])}].contacts"
            if not isinstance(c, dict) or not {"a", "b", "force_n"} <= set(c):
                raise fail(where, f"expected objects with a, b and force_n, got {c!r:.80}") from None
            for body in (c["a"], c["b"]):
                if body not in index:
                    raise fail(where, f"unknown body {body!r}: every contact body must have a role in "
                                      f"body_roles; known bodies: {', '.join(index)}") from None
            for key in ("force_n", "force_peak_n"):
                f = c.get(key, 0.0)
                if isinstance(f, bool) or not isinstance(f, (int, float)):
                    raise fail(f"{where}.{key}", f"expected a number in newtons, got {f!r:.40}") from None
            if ("force_peak_n" in c) != ("force_peak_n" in flat[0]):
                raise fail(f"{where}.force_peak_n", "present at some contacts but not at others; expected it at "
                                                    "every contact or none") from None
        raise
    out = {"step": step, "a": np.asarray(a, dtype=np.int32), "b": np.asarray(b, dtype=np.int32), "force": force}
    if peak is not None:
        out["force_peak"] = peak
    return out


def _has_peak(contact: dict) -> bool:
    return "force_peak_n" in contact


def record_to_json(rec: EpisodeRecord) -> dict:
    """The Appendix B JSON object of `rec` (inverse of `record_from_json`)."""
    meta = dict(rec.meta)
    extra = meta.pop("extra", {})
    step_extra = meta.pop("step_extra", None)
    out: dict[str, Any] = {
        "episode_id": rec.episode_id, "benchmark": rec.benchmark, "task_id": rec.task_id,
        "success": rec.success, "dt": rec.dt,
        "target_object": rec.targets[0] if len(rec.targets) == 1 else list(rec.targets),
        "body_roles": dict(zip(rec.bodies, rec.roles)),
    }
    out.update(meta)
    out.update(extra)
    t = rec.t.tolist()
    eef = rec.eef_pos.tolist()
    pos = rec.body_pos.tolist()
    quat = rec.body_quat.tolist()
    torque = rec.joint_torque.tolist() if rec.joint_torque is not None else None
    torque_peak = rec.joint_torque_peak.tolist() if rec.joint_torque_peak is not None else None
    grip = rec.gripper_contact.tolist() if rec.gripper_contact is not None else None
    actions = rec.actions.tolist() if rec.actions is not None else None
    per_step_contacts = None
    if rec.contacts is not None:
        per_step_contacts = [[] for _ in range(rec.n_steps)]
        c = rec.contacts
        if c.force_peak is None:
            for s, a, b, f in zip(c.step.tolist(), c.a.tolist(), c.b.tolist(), c.force.tolist()):
                per_step_contacts[s].append({"a": rec.bodies[a], "b": rec.bodies[b], "force_n": f})
        else:
            for s, a, b, f, p in zip(c.step.tolist(), c.a.tolist(), c.b.tolist(), c.force.tolist(),
                                     c.force_peak.tolist()):
                per_step_contacts[s].append({"a": rec.bodies[a], "b": rec.bodies[b], "force_n": f, "force_peak_n": p})
    steps = []
    for i in range(rec.n_steps):
        step: dict[str, Any] = {"t": t[i], "eef_pos_m": eef[i]}
        if rec.pose_bodies:
            step["body_pos_m"] = dict(zip(rec.pose_bodies, pos[i]))
        if rec.quat_bodies:
            step["body_quat_wxyz"] = dict(zip(rec.quat_bodies, quat[i]))
        if per_step_contacts is not None:
            step["contacts"] = per_step_contacts[i]
        if torque is not None:
            step["joint_torque_nm"] = torque[i]
        if torque_peak is not None:
            step["joint_torque_peak_nm"] = torque_peak[i]
        if grip is not None:
            step["gripper_contact"] = grip[i]
        if actions is not None:
            step["action"] = actions[i]
        if step_extra:
            step.update(step_extra[i])
        steps.append(step)
    out["steps"] = steps
    if rec.replay is not None:
        r = rec.replay
        out["replay"] = {"mjcf": r.mjcf, "qpos": r.qpos.tolist(), "qvel": r.qvel.tolist()}
        if r.mocap_pos is not None:
            out["replay"]["mocap_pos"] = r.mocap_pos.tolist()
        if r.mocap_quat is not None:
            out["replay"]["mocap_quat"] = r.mocap_quat.tolist()
        if r.camera is not None:
            out["replay"]["camera"] = r.camera
        if r.ctrl is not None:
            out["replay"]["ctrl"] = r.ctrl.tolist()
    return out


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """JSON text as Python values through msgspec; every error is a ValueError.

    Two rules keep what a line means independent of the library:
    - an integer literal beyond 64 bits is read as a double (the records' arrays hold
      doubles anyway), and one beyond the range of a double is invalid, as `1e400` is.
      msgspec keeps integers exact however long, so lines with such long digit runs are
      read again by the stdlib, whose `parse_int` sees every integer literal, including
      one under a key that a later duplicate replaces;
    - bytes holding NaN or Infinity literals are read by the stdlib, which accepts them,
      so that validation names the field holding the non-finite number instead of the
      whole line being "not valid JSON".
    """
    try:
        try:
            obj = _DECODER.decode(data)
        except msgspec.DecodeError as exc:
            if isinstance(data, (bytes, bytearray)) and (b"NaN" in data or b"Infinity" in data):
                return json.loads(data, parse_int=_json_int)
            raise ValueError(str(exc)) from None
        if not _may_hold_long_integer(data):
            return obj
        return json.loads(bytes(data) if isinstance(data, memoryview) else data, parse_int=_json_int)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


# JSON nested deeper than the decoders can follow (about 1,000 levels) is bad input, not a bug
TOO_DEEP = "arrays or objects nested about 1,000 levels deep or more; a record nests a few levels"


_DECODER = msgspec.json.Decoder()
# 2**63 has 19 digits: an integer literal with fewer always fits 64 bits. The scan for
# longer ones maps every digit to "0" and looks for runs with bytes.find: ~1.4 ms on a
# 1.15 MB line, where a regular expression with the same look-arounds takes ~28 ms.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def _may_hold_long_integer(data: bytes | bytearray | memoryview | str) -> bool:
    """Whether the text holds a run of 19+ digits that is not a fraction or an exponent.

    Such a run inside a string gives a false yes, which only costs the stdlib re-read.
    """
    text = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    flat = text.translate(_DIGITS_AS_ZERO)
    at = flat.find(_LONG_RUN)
    while at != -1:  # `at` starts a run: an earlier digit would have matched first
        end = at + len(_LONG_RUN)
        while end < len(flat) and flat[end] == 48:  # "0"
            end += 1
        start = at - 1 if at and flat[at - 1] == 45 else at  # a minus sign
        # digits after a point, "e" or an exponent's sign, or before a point or "e", are no integer
        if (start == 0 or flat[start - 1] not in b".eE+-") and flat[end:end + 1] not in (b".", b"e", b"E"):
            return True
        at = flat.find(_LONG_RUN, end)
    return False


def _json_int(literal: str) -> int | float:
    if len(literal) < 19:
        return int(literal)
    as_float = float(literal)  # correctly rounded; inf beyond the range of a double
    if math.isinf(as_float):
        raise ValueError(f"an integer of {len(literal.lstrip('-'))} digits is beyond the range of a double")
    value = int(literal)
    return value if -(2 ** 63) <= value < 2 ** 64 else as_float
