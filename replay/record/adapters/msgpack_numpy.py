"""OpenPI's wire encoding: msgpack with numpy arrays as tagged maps.

The format is `openpi_client.msgpack_numpy`'s (that package pins numpy<2, so it cannot be
installed next to our stack):
- an `np.ndarray` travels as `{b"__ndarray__": True, b"data": raw bytes, b"dtype":
  dtype.str, b"shape": shape}` (C order);
- a numpy scalar as `{b"__npgeneric__": True, b"data": item, b"dtype": dtype.str}`;
- object, void and complex dtypes are refused.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np


def _encode(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in ("V", "O", "c"):
        raise ValueError(f"cannot send numpy dtype {obj.dtype} over the OpenPI protocol")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": np.ascontiguousarray(obj).tobytes(), b"dtype": obj.dtype.str,
                b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def _decode(obj: dict) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_encode)


def unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_decode)
