"""Reading and writing trajectory records: Appendix B JSON and columnar `.npz`.

JSON is the portable interchange form; `.npz` (one episode per file) is the fast path.
Both convert to `EpisodeRecord` and back without loss: floats are written with
`repr` precision, and `.npz` keeps dtypes as given. Archives (directories, JSONL files
of many records) are read by `scoring.records.archive`.
"""

from __future__ import annotations

import io as _io
import json
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from scoring.errors import RecordError
from scoring.records import npz_format
from scoring.records.json_fast import fast_record
from scoring.records.json_record import TOO_DEEP, loads, record_from_json, record_to_json
from scoring.records.npz_format import NpzTooLarge, read_npz, write_npz_stored
from scoring.records.schema import SCHEMA_VERSION, EpisodeRecord

__all__ = ["atomic_write_bytes", "load_record", "loads", "record_from_json", "record_from_npz", "record_to_json",
           "record_to_npz_bytes", "resolve_mjcf", "save_record"]

# --------------------------------------------------------------------------- NPZ

_ARRAYS = {
    "t": lambda r: r.t, "eef_pos": lambda r: r.eef_pos, "body_pos": lambda r: r.body_pos,
    "body_quat": lambda r: r.body_quat, "joint_torque": lambda r: r.joint_torque,
    "gripper_contact": lambda r: r.gripper_contact, "actions": lambda r: r.actions,
    "contact_step": lambda r: r.contacts.step if r.contacts is not None else None,
    "contact_a": lambda r: r.contacts.a if r.contacts is not None else None,
    "contact_b": lambda r: r.contacts.b if r.contacts is not None else None,
    "contact_force": lambda r: r.contacts.force if r.contacts is not None else None,
    "contact_force_peak": lambda r: r.contacts.force_peak if r.contacts is not None else None,
    "joint_torque_peak": lambda r: r.joint_torque_peak,
    "replay_qpos": lambda r: r.replay.qpos if r.replay is not None else None,
    "replay_qvel": lambda r: r.replay.qvel if r.replay is not None else None,
    "replay_mocap_pos": lambda r: r.replay.mocap_pos if r.replay is not None else None,
    "replay_mocap_quat": lambda r: r.replay.mocap_quat if r.replay is not None else None,
    "replay_ctrl": lambda r: r.replay.ctrl if r.replay is not None else None,
}


def record_to_npz_bytes(rec: EpisodeRecord, *, compress: bool = False) -> bytes:
    """The columnar form of `rec` as `.npz` bytes (arrays plus a JSON header).

    `compress` deflates every member (numpy's `savez_compressed`); the default stores
    them, which is what scoring reads fastest.
    """
    header = {
        "schema_version": SCHEMA_VERSION, "episode_id": rec.episode_id, "benchmark": rec.benchmark,
        "task_id": rec.task_id, "success": rec.success, "dt": rec.dt, "targets": list(rec.targets),
        "body_roles": [[b, r] for b, r in zip(rec.bodies, rec.roles)],
        "pose_bodies": list(rec.pose_bodies), "quat_bodies": list(rec.quat_bodies), "meta": dict(rec.meta),
    }
    if rec.replay is not None:
        header["replay"] = {"mjcf": rec.replay.mjcf, "camera": rec.replay.camera}
    arrays = {k: get(rec) for k, get in _ARRAYS.items()}
    arrays = {k: v for k, v in arrays.items() if v is not None}
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    if not compress:
        return write_npz_stored(arrays)
    buf = _io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def record_from_npz(data: Any, *, source: str | None = None) -> EpisodeRecord:
    """Reads a columnar record from an `.npz` path or its bytes."""
    try:
        if isinstance(data, (bytes, bytearray)):
            raw = bytes(data)
        else:
            with open(data, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > npz_format.MAX_RECORD_BYTES:
                    raise RecordError(f"is {size:,} bytes, more than the {npz_format.MAX_RECORD_BYTES:,} allowed "
                                      "per record (scoring.records.npz_format.MAX_RECORD_BYTES)", file=source)
                raw = fh.read()
    except OSError as exc:
        raise RecordError(f"cannot read ({exc.strerror})", file=source) from None
    try:
        arrays = read_npz(raw)
    except NpzTooLarge as exc:  # the CLI prints "refused: " before every refusal
        raise RecordError(str(exc), file=source) from None
    except (OSError, ValueError, EOFError, struct.error, zlib.error, UnicodeDecodeError, TypeError, IndexError,
            KeyError, OverflowError, SyntaxError, MemoryError) as exc:
        raise RecordError(f"not a readable .npz archive ({exc})", file=source) from None
    return _record_from_arrays(arrays, source)


def _record_from_arrays(arrays: dict[str, np.ndarray], source: str | None) -> EpisodeRecord:
    raw = arrays.pop("__header__", None)
    if raw is None:
        raise RecordError("missing the __header__ member; expected a SafeVLA columnar record", file=source)
    try:
        h = json.loads(raw.tobytes().decode())
    except RecursionError:
        raise RecordError(f"unreadable header ({TOO_DEEP})", file=source, field="__header__") from None
    except ValueError as exc:
        raise RecordError(f"unreadable header ({exc})", file=source, field="__header__") from None
    if not isinstance(h, dict):
        raise RecordError(f"expected the header to be a JSON object, got {type(h).__name__}", file=source,
                          field="__header__")
    episode = h.get("episode_id") if isinstance(h.get("episode_id"), str) else None

    def fail(field: str, message: str) -> RecordError:
        return RecordError(message, file=source, episode=episode, field=field)

    version = h.get("schema_version")
    if version != SCHEMA_VERSION:
        raise fail("schema_version", f"expected schema_version {SCHEMA_VERSION}, got {version!r:.40}")
    contacts = None
    if "contact_step" in arrays:
        contacts = {"step": arrays["contact_step"], "a": arrays.get("contact_a"), "b": arrays.get("contact_b"),
                    "force": arrays.get("contact_force"), "force_peak": arrays.get("contact_force_peak")}
    replay = None
    if "replay" in h:
        if not isinstance(h["replay"], dict):
            raise fail("replay", f"expected an object with mjcf and camera, got {h['replay']!r:.60}")
        replay = {"mjcf": h["replay"].get("mjcf"), "camera": h["replay"].get("camera"),
                  "qpos": arrays.get("replay_qpos"), "qvel": arrays.get("replay_qvel"),
                  "mocap_pos": arrays.get("replay_mocap_pos"), "mocap_quat": arrays.get("replay_mocap_quat"),
                  "ctrl": arrays.get("replay_ctrl")}
    roles = h.get("body_roles")
    if isinstance(roles, list):
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in roles):
            raise fail("body_roles", f"expected a list of [body name, role] pairs, got {roles!r:.80}")
        roles = dict(map(tuple, roles))
    meta = h.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise fail("meta", f"expected an object, got {meta!r:.60}")
    return EpisodeRecord.build(
        source=source, episode_id=h.get("episode_id"), benchmark=h.get("benchmark"), task_id=h.get("task_id"),
        success=h.get("success"), dt=h.get("dt"), targets=h.get("targets"), body_roles=roles,
        t=arrays.get("t"), eef_pos=arrays.get("eef_pos"), pose_bodies=h.get("pose_bodies"),
        body_pos=arrays.get("body_pos"), quat_bodies=h.get("quat_bodies"), body_quat=arrays.get("body_quat"),
        joint_torque=arrays.get("joint_torque"), joint_torque_peak=arrays.get("joint_torque_peak"),
        gripper_contact=arrays.get("gripper_contact"), contacts=contacts, actions=arrays.get("actions"), meta=meta or {},
        replay=replay)


def resolve_mjcf(rec: EpisodeRecord) -> str:
    """The record's model as an XML string or an absolute path (relative to its file)."""
    if rec.replay is None:
        raise RecordError("has no replay state (expected replay.mjcf, qpos and qvel)",
                          file=rec.source, episode=rec.episode_id, field="replay")
    mjcf = rec.replay.mjcf
    if rec.replay.mjcf_is_xml:
        return mjcf
    path = Path(mjcf)
    if not path.is_absolute() and rec.source:
        path = Path(rec.source).resolve().parent / path
    return str(path)


# --------------------------------------------------------------------------- files

def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` to `path` through a temp file and rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide shared stores from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_record(rec: EpisodeRecord, path: str | os.PathLike, *, compress: bool = False) -> Path:
    """Writes `rec` atomically as `.npz` or `.json`, chosen by the suffix of `path`."""
    path = Path(path)
    if path.suffix == ".npz":
        atomic_write_bytes(path, record_to_npz_bytes(rec, compress=compress))
    elif path.suffix == ".json":
        atomic_write_bytes(path, json.dumps(record_to_json(rec)).encode())
    else:
        raise RecordError(f"unsupported suffix {path.suffix!r}; expected .npz or .json", file=str(path))
    return path


def load_record(path: str | os.PathLike) -> EpisodeRecord:
    """Loads exactly one episode from a `.json` or `.npz` file."""
    path = Path(path)
    if path.suffix == ".npz":
        return record_from_npz(str(path), source=str(path))
    if path.suffix == ".json":
        data = _read_bytes(path)
        record = fast_record(data, str(path))
        return record if record is not None else record_from_json(_parse_json(data, path), source=str(path))
    raise RecordError(f"unsupported suffix {path.suffix!r}; expected .json or .npz "
                      "(use scoring.records.archive.iter_archive for .jsonl)", file=str(path))


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RecordError(f"cannot read ({exc.strerror})", file=str(path)) from None


def _parse_json(data: bytes, path: Path) -> Any:
    try:
        return loads(data)
    except ValueError as exc:
        raise RecordError(f"not valid JSON ({exc})", file=str(path)) from None
