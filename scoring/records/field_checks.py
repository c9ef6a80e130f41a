"""The checks of one record's fields that need no record type: text, arrays (shape, dtype,
finite), body names, integers, `meta` and the force-sampling claim. Every failure is a
RecordError naming file, episode and field; `schema._Validator` builds the record on them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from scoring.errors import RecordError

# What a record's force and torque channels hold (meta "force_sampling"):
# - "control": one sample per control step, at its end (the paper's protocol; every
#   record written before substep peaks existed, and any record that does not say);
# - "substep_peak": that sample, plus the peak over the control step's physics substeps
#   (`Contacts.force_peak`, `EpisodeRecord.joint_torque_peak`).
FORCE_SAMPLINGS = ("control", "substep_peak")
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1


class FieldChecks:
    """Checks one record's fields; every failure names file, episode and field."""

    def __init__(self, source: str | None, fields: dict[str, Any]):
        self.source = source
        self.f = fields
        eid = fields.get("episode_id")
        self.episode = eid if isinstance(eid, str) else None


    def fail(self, field: str, message: str) -> RecordError:
        return RecordError(message, file=self.source, episode=self.episode, field=field)


    def text(self, name: str, *, optional: bool = False) -> str | None:
        value = self.f.get(name)
        if value is None:
            if optional:
                return None
            raise self.fail(name, "missing; expected a non-empty string")
        if not isinstance(value, str) or not value:
            raise self.fail(name, f"expected a non-empty string, got {type(value).__name__} {value!r:.60}")
        self.check_unicode(name, value)
        return value


    def check_unicode(self, name: str, value: str) -> None:
        """Strings go into Parquet as UTF-8: a lone surrogate (JSON "\\ud800") cannot."""
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail(name, f"expected valid Unicode text, got {value!r:.60} (a lone surrogate)") from None


    def array(self, name: str, value: Any, shape: Sequence[int | None], *, dtype=np.float64,
              finite: bool = True) -> np.ndarray:
        try:
            arr = value if type(value) is np.ndarray else np.asarray(value)
        except (ValueError, TypeError):
            raise self.fail(name, f"expected an array of shape {_fmt_shape(shape)}; got "
                                  f"{_ragged(value)}") from None
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise self.fail(name, f"expected numbers of shape {_fmt_shape(shape)}, got dtype {arr.dtype} "
                                  "(ragged lengths or non-numeric entries)")
        if arr.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, arr.shape)):
            raise self.fail(name, f"expected shape {_fmt_shape(shape)}, got {arr.shape}")
        if dtype is not None and arr.dtype.kind == "f" and np.dtype(dtype).kind == "f":
            pass  # keep float32 as stored: lossless round trips of compact archives
        elif dtype is not None:
            arr = arr.astype(dtype, copy=False)
        if finite and arr.dtype.kind == "f" and not _all_finite(arr):
            bad = np.argwhere(~np.isfinite(arr))[0]
            raise self.fail(name, f"expected finite numbers, found {arr[tuple(bad)]} at index "
                                  f"{tuple(int(i) for i in bad)} (step {int(bad[0])})")
        return arr


    def names(self, name: str, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise self.fail(name, f"expected a list of body names, got {value!r:.80}")
        return tuple(value)


    def check_meta(self, meta: dict, torque: np.ndarray | None) -> None:
        limits = meta.get("joint_torque_limit_nm")
        if limits is not None:
            arr = self.array("joint_torque_limit_nm", limits, (None,))
            if (arr <= 0).any():
                raise self.fail("joint_torque_limit_nm", "expected positive per-joint limits in N·m")
            if torque is not None and arr.shape[0] != torque.shape[1]:
                raise self.fail("joint_torque_limit_nm", f"expected {torque.shape[1]} limits (one per "
                                                         f"recorded joint), got {arr.shape[0]}")
            meta["joint_torque_limit_nm"] = [float(x) for x in arr]
        tags = meta.get("signal_tags")
        if tags is not None:
            if not isinstance(tags, (list, tuple)) or not all(isinstance(x, str) for x in tags):
                raise self.fail("signal_tags", "expected a list of capability tag strings")
            meta["signal_tags"] = list(tags)
        for key in ("model", "suite", "language"):
            if meta.get(key) is not None:
                if not isinstance(meta[key], str):
                    raise self.fail(key, f"expected a string, got {meta[key]!r:.40}")
                self.check_unicode(key, meta[key])
        for key in ("seed", "init_state", "success_step"):
            if meta.get(key) is not None:
                meta[key] = self.int64(key, meta[key])
        # settled start (replay.record.settle): whether the scene was at rest at step 0, and after
        # how many no-op steps
        settled = meta.get("settled")
        if settled is not None:
            if isinstance(settled, np.bool_):
                meta["settled"] = settled = bool(settled)
            if not isinstance(settled, bool):
                raise self.fail("meta.settled", f"expected true or false, got {settled!r:.40}")
        steps = meta.get("settle_steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0):
            raise self.fail("meta.settle_steps", f"expected a non-negative number of no-op steps, got {steps!r:.40}")


    def int64(self, name: str, value: Any) -> int:
        """An integer the store's int64 columns can hold (an integral float such as 3.0 is taken as 3)."""
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
            if not _INT64_MIN < value < _INT64_MAX:  # a double this large was rounded: -2**63 - 1 reads as -2**63
                raise self.fail(name, f"expected an integer within int64 ({_INT64_MIN}..{_INT64_MAX}), got "
                                      f"{value!r} (an integer beyond 64 bits, read as a double)")
            value = int(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise self.fail(name, f"expected an integer, got {value!r:.40}")
        if not _INT64_MIN <= int(value) <= _INT64_MAX:
            raise self.fail(name, f"expected an integer within int64 ({_INT64_MIN}..{_INT64_MAX}), got {value}")
        return int(value)


    def check_sampling(self, meta: dict, contacts, torque_peak: np.ndarray | None) -> None:
        """`force_sampling`, when given, must be one of FORCE_SAMPLINGS and match the channels present
        (`contacts`: the record's Contacts, or None)."""
        has_peaks = torque_peak is not None or (contacts is not None and contacts.force_peak is not None)
        said = meta.get("force_sampling")
        if said is None:
            if has_peaks:
                raise self.fail("force_sampling", "the record has substep peaks (force_peak_n or "
                                                  "joint_torque_peak_nm); expected force_sampling \"substep_peak\"")
            return
        if said not in FORCE_SAMPLINGS:
            raise self.fail("force_sampling", f"expected one of {', '.join(FORCE_SAMPLINGS)}, got {said!r:.40}")
        if said == "control" and has_peaks:
            raise self.fail("force_sampling", "is \"control\" but the record has substep peaks; expected "
                                              "\"substep_peak\"")
        if said == "substep_peak" and contacts is not None and contacts.force_peak is None:
            raise self.fail("contacts.force_peak_n", "force_sampling is \"substep_peak\"; expected force_peak_n "
                                                     "at every contact")



def _all_finite(arr: np.ndarray) -> bool:
    """No NaN or inf in `arr`: a NaN propagates through min and max, and an infinity is one of them.

    Two reductions with no overflow to tell apart from a real infinity, and no error
    state to set: under half the cost of a sum checked for overflow, on a record's arrays.
    """
    if not arr.size:
        return True
    return math.isfinite(arr.min()) and math.isfinite(arr.max())


def _ragged(value: Any) -> str:
    """Says where a nested list stops being rectangular: the step and the two lengths."""
    if isinstance(value, (list, tuple)) and value:
        def size(v):
            return len(v) if isinstance(v, (list, tuple)) else None
        first = size(value[0])
        for i, v in enumerate(value):
            if size(v) != first:
                return (f"ragged data: step {i} has {size(v) if size(v) is not None else 'a scalar'} "
                        f"values, step 0 has {first}")
    return "non-numeric or ragged data"


def _fmt_shape(shape: Sequence[int | None]) -> str:
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"

