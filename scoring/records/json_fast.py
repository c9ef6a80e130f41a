"""Fast decoding of one Appendix B JSON line, with `record_from_json` as the reference.

`record_from_json(loads(line))` builds ~12,000 contact dicts per 300-step episode and
then walks them again to make arrays. Here msgspec decodes straight into slotted
structs in one pass (body names typed as a Literal of the record's bodies) and the
arrays are filled with `np.fromiter`: 2-3x faster than the reference on a 1.15 MB line
(docs/benchmarks.md).

The fast path only returns a record when it is certain the reference path would return
the same one; anything unusual (or any error) is handed to the reference, so every
error message stays the reference one.
"""

from __future__ import annotations

import gc
import re
from functools import lru_cache
from itertools import chain
from operator import attrgetter
from typing import Annotated, Any, Literal, NamedTuple, Union

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from scoring.errors import RecordError
from scoring.records.json_record import _META_KEYS, _TOP_KEYS, loads, record_from_json
from scoring.records.schema import EpisodeRecord


class _Fallback(Exception):
    """The fast path cannot vouch for this record; the reference path decides."""


# The reference `loads` rejects integers beyond the range of a double, which msgspec
# alone keeps. Untyped values are therefore decoded as `_JSON`, which caps integers at
# int64 (the widest bound msgspec takes) and nesting at four levels (deeper costs
# msgspec a type tree that doubles per level): anything else is a validation error,
# and the reference decides. `Any` would not do: a bad value under a repeated key
# would be dropped unseen.
_INT = Annotated[int, msgspec.Meta(ge=-(2 ** 63), le=2 ** 63 - 1)]
_SCALAR = Union[None, bool, _INT, float, str]


def _nested(depth: int) -> Any:
    return _SCALAR if depth == 0 else Union[_SCALAR, list[_nested(depth - 1)], dict[str, _nested(depth - 1)]]


_JSON = _nested(4)


def _step_type(body: Any, peaks: bool) -> type:
    """The per-step struct, with body names typed as `body` (str, or a Literal of them).

    Without `peaks` a contact has no `force_peak_n` field, and one that holds it fails.
    """
    peak = [("force_peak_n", Union[float, UnsetType], UNSET)] if peaks else []
    contact = msgspec.defstruct("Contact", [("a", body), ("b", body), ("force_n", float), *peak],
                                gc=False, forbid_unknown_fields=True)
    vec3, vec4 = tuple[float, float, float], tuple[float, float, float, float]
    typed = {"eef_pos_m": vec3, "body_pos_m": dict[body, vec3], "body_quat_wxyz": dict[body, vec4],
             "contacts": list[contact], "joint_torque_nm": list[float], "joint_torque_peak_nm": list[float],
             "action": list[float]}
    fields = [("t", _SCALAR), *typed.items(),
              ("gripper_contact", _SCALAR)]
    # Unknown keys are forbidden, not skipped: msgspec skips without checking UTF-8 or
    # number range, so a skipped value could hide JSON that `loads` rejects.
    return msgspec.defstruct("Step", [(name, Union[tp, UnsetType], UNSET) for name, tp in fields],
                             gc=False, forbid_unknown_fields=True)


class _Decoder(NamedTuple):
    decoder: msgspec.json.Decoder
    step: type
    peaks: bool  # whether contacts may hold force_peak_n


@lru_cache(maxsize=256)
def _decoder(names: tuple[str, ...], peaks: bool) -> _Decoder:
    """A decoder whose body names are a Literal of `names` (~1 ms to build, so cached).

    Literal names come back as the same cached str objects, not one new str per contact,
    and their hashes are ready for the index lookup: ~0.3 ms of a 300-step episode.
    `peaks`: whether contacts may hold `force_peak_n` (`_step_type`).
    """
    step = _step_type(Literal[names], peaks)
    # The top level is decoded as a mapping rather than a struct so unknown keys (which
    # the reference keeps as meta["extra"]) come back in order. msgspec types a value by
    # its JSON kind, and only arrays may hold steps; a list elsewhere that happens to hold
    # step-shaped objects is caught by `_decode`.
    item = Union[step, _SCALAR, list[_JSON]]
    value = Union[list[item], dict[str, _JSON], _SCALAR]
    return _Decoder(msgspec.json.Decoder(dict[str, value]), step, peaks)


_ROLES_DECODER = msgspec.json.Decoder(dict[str, str])


_ROLES_TEXT = re.compile(rb'"body_roles"[^{]*(\{[^}]*\})')
_ROLES_TEXT_STR = re.compile(r'"body_roles"[^{]*(\{[^}]*\})')


def _body_names(data: bytes | bytearray | memoryview | str) -> tuple[str, ...]:
    """The body names of `body_roles`, read ahead of the real decode to pick its decoder.

    Only a guess (the key could sit inside a string, or be repeated). A wrong guess
    cannot make a wrong record: contact bodies are looked up in the decoded
    `body_roles`, posed bodies are checked by the validator. It can only send a good
    record to the reference path. A regex, because memoryviews have no `find`.
    """
    found = (_ROLES_TEXT_STR if isinstance(data, str) else _ROLES_TEXT).search(data)
    if found is None:
        raise _Fallback
    names = tuple(_ROLES_DECODER.decode(found.group(1)))
    if not names:
        raise _Fallback
    return names


def record_from_json_bytes(data: bytes | bytearray | memoryview | str, *, source: str | None = None) -> EpisodeRecord:
    """One JSONL line as a record: the same result, or the same error, as the reference path.

    That is `record_from_json(loads(data), source=source)`, with invalid JSON reported
    as `RecordError("line is not valid JSON (...)", file=source)`.
    """
    record = fast_record(data, source)
    if record is not None:
        return record
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)  # the reference decoder retries NaN literals only on bytes
    try:
        obj = loads(data)
    except ValueError as exc:
        raise RecordError(f"line is not valid JSON ({exc})", file=source) from None
    return record_from_json(obj, source=source)


def fast_record(data: bytes | bytearray | memoryview | str, source: str | None) -> EpisodeRecord | None:
    """The record, or None when the reference path must decide (including every error).

    For callers with their own reference path and error wording (`scoring.records.io.load_record`).
    """
    try:
        return _decode(data, source)
    except Exception:  # an optimisation must never change an outcome: let the reference decide
        return None


def _decode(data: bytes | bytearray | memoryview | str, source: str | None) -> EpisodeRecord:
    # ~20,000 objects per 300-step episode (floats, vectors, per-step dicts and lists),
    # all freed once the columns are built: a collection in between only walks them.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _columns(data, source)
    finally:
        if collecting:
            gc.enable()


def _columns(data: bytes | bytearray | memoryview | str, source: str | None) -> EpisodeRecord:
    names = _body_names(data)
    # Most records hold no substep peaks: their contacts decode without the field, and
    # the per-contact check for it is skipped. A contact that holds one fails that decode
    # early (at the first such contact), and the line is decoded again with the field.
    try:
        dec = _decoder(names, False)
        obj = dec.decoder.decode(data)
    except msgspec.ValidationError:
        dec = _decoder(names, True)
        obj = dec.decoder.decode(data)
    steps = obj.get("steps")
    roles = obj.get("body_roles")
    if (type(steps) is not list or not steps or set(map(type, steps)) != {dec.step}
            or type(roles) is not dict or not roles):
        raise _Fallback
    if any(type(v) is list and dec.step in set(map(type, v)) for k, v in obj.items() if k != "steps"):
        raise _Fallback
    n = len(steps)
    t = _column(steps, "t")
    grip = _column(steps, "gripper_contact")
    eef = _column(steps, "eef_pos_m")
    if eef is None:
        raise _Fallback
    pose_bodies, body_pos = _per_body(_column(steps, "body_pos_m"), n, 3)
    quat_bodies, body_quat = _per_body(_column(steps, "body_quat_wxyz"), n, 4)
    contacts = _column(steps, "contacts")
    if contacts is not None:
        contacts = _contacts(contacts, roles, peaks=dec.peaks)

    meta = {k: obj[k] for k in _META_KEYS if k in obj}
    extra = {k: v for k, v in obj.items() if k not in _TOP_KEYS}
    if extra:
        meta["extra"] = extra
    replay = obj.get("replay")
    if replay is not None and type(replay) is not dict:
        raise _Fallback
    return EpisodeRecord.build(
        source=source, episode_id=obj.get("episode_id"), benchmark=obj.get("benchmark"),
        task_id=obj.get("task_id"), success=obj.get("success"), dt=obj.get("dt"),
        target_object=obj.get("target_object"), body_roles=roles,
        t=t, eef_pos=_matrix(eef, n, 3), pose_bodies=pose_bodies, body_pos=body_pos,
        quat_bodies=quat_bodies, body_quat=body_quat,
        joint_torque=_matrix(_column(steps, "joint_torque_nm"), n),
        joint_torque_peak=_matrix(_column(steps, "joint_torque_peak_nm"), n), gripper_contact=grip,
        contacts=contacts, actions=_matrix(_column(steps, "action"), n), meta=meta, replay=replay)


def _column(steps: list, name: str) -> list | None:
    """The field at every step, None when at none; at some steps only is the reference's error."""
    col = list(map(attrgetter(name), steps))
    missing = col.count(UNSET)
    if missing == len(col):
        return None
    if missing:
        raise _Fallback
    return col


def _matrix(rows: list | None, n: int, width: int | None = None) -> np.ndarray | None:
    """(T, width) float64 from equal-length rows; ragged rows get the reference's message.

    `width` is already enforced by the struct type where it is given.
    """
    if rows is None:
        return None
    widths = set(map(len, rows))
    if len(widths) != 1:
        raise _Fallback
    width, = widths
    return np.fromiter(chain.from_iterable(rows), np.float64, n * width).reshape(n, width)


def _per_body(col: list[dict] | None, n: int, width: int) -> tuple[list[str], np.ndarray | None]:
    """Body names in the first step's order and the (T, P, width) array.

    The reference also accepts steps listing the same bodies in another order; those are
    rare enough to leave to it.
    """
    if col is None:
        return [], None
    names = list(col[0])
    if not names or not all(map(names.__eq__, map(list, col))):
        raise _Fallback
    values = chain.from_iterable(chain.from_iterable(map(dict.values, col)))
    return names, np.fromiter(values, np.float64, n * len(names) * width).reshape(n, len(names), width)


_GET_A, _GET_B, _GET_F = attrgetter("a"), attrgetter("b"), attrgetter("force_n")
_GET_PEAK = attrgetter("force_peak_n")


def _contacts(per_step: list[list], roles: dict[str, str], *, peaks: bool) -> dict[str, np.ndarray]:
    index = {name: i for i, name in enumerate(roles)}
    flat = list(chain.from_iterable(per_step))
    n = len(flat)
    # an unknown body raises KeyError here, and the reference path names it
    out = {"step": np.repeat(np.arange(len(per_step), dtype=np.int32), list(map(len, per_step))),
           "a": np.fromiter(map(index.__getitem__, map(_GET_A, flat)), np.int32, n),
           "b": np.fromiter(map(index.__getitem__, map(_GET_B, flat)), np.int32, n),
           "force": np.fromiter(map(_GET_F, flat), np.float64, n)}
    if not peaks:
        return out
    values = list(map(_GET_PEAK, flat))
    missing = values.count(UNSET)
    if missing == n:
        return out
    if missing:
        raise _Fallback  # at some contacts only: the reference's error
    out["force_peak"] = np.array(values, dtype=np.float64)
    return out

