"""Record arrays from the raw JSON text of each step, through the C module `scoring._columns`.

`scoring.json_fast` can decode a line with every numeric step field kept as raw JSON
text (msgspec.Raw, already checked to be well-formed JSON). These functions turn those
per-step texts into the record's arrays in one pass, with numbers rounded exactly as
orjson and msgspec round them. They raise `NotCommonLayout` for anything the C code
does not take (it never guesses); json_fast then decodes the line the general way.

`AVAILABLE` is False when the package was installed without a C compiler, or when the
environment sets SAFEVLA_PURE_PYTHON=1 (to rule the C module out when chasing a bug):
json_fast then uses its msgspec-struct path alone: the same records, but a 300-step
line takes ~1.8x as long to decode and JSONL ingests ~1.5x slower (docs/benchmarks.md).
"""

from __future__ import annotations

import os
from functools import lru_cache

import msgspec
import numpy as np

try:
    from scoring import _columns
except ImportError:  # built without a C compiler
    _columns = None

AVAILABLE = _columns is not None and os.environ.get("SAFEVLA_PURE_PYTHON", "") in ("", "0")


class NotCommonLayout(Exception):
    """The C code declined the text: decode the line the general way."""


def matrix(rows: list[msgspec.Raw] | None, n: int, width: int | None = None) -> np.ndarray | None:
    """(T, width) float64 from one JSON array of numbers per step (all of one width)."""
    if rows is None:
        return None
    parsed = _columns.vectors(rows)
    if parsed is None or (width is not None and parsed[1] != width):
        raise NotCommonLayout
    values, got = parsed
    return np.frombuffer(values, np.float64).reshape(n, got)


def per_body(col: list[msgspec.Raw] | None, n: int, width: int, roles: dict[str, str]
             ) -> tuple[list[str], np.ndarray | None]:
    """Body names in the first step's order and the (T, P, width) array, from {name: [numbers]} per step."""
    if col is None:
        return [], None
    names = encoded_names(tuple(roles))
    parsed = None if names is None else _columns.named_vectors(col, names, width)
    if parsed is None:
        raise NotCommonLayout
    order, values = parsed
    role_names = list(roles)
    bodies = [role_names[i] for i in np.frombuffer(order, np.int32)]
    return bodies, np.frombuffer(values, np.float64).reshape(n, len(bodies), width)


def contacts(per_step: list[msgspec.Raw], roles: dict[str, str]) -> dict[str, np.ndarray]:
    """The flat contact arrays (step, a, b, force[, force_peak]) from one JSON array of contacts per step."""
    names = encoded_names(tuple(roles))
    parsed = None if names is None else _columns.contacts(per_step, names)
    if parsed is None:
        raise NotCommonLayout
    step, a, b, force, peak = parsed
    out = {"step": np.frombuffer(step, np.int32), "a": np.frombuffer(a, np.int32),
           "b": np.frombuffer(b, np.int32), "force": np.frombuffer(force, np.float64)}
    if peak is not None:
        out["force_peak"] = np.frombuffer(peak, np.float64)
    return out


@lru_cache(maxsize=256)
def encoded_names(names: tuple[str, ...]) -> tuple[bytes, ...] | None:
    """The names as the bytes a JSON string holds them in, None if that could be escaped.

    The C code compares raw bytes, so a name whose JSON text may differ from its UTF-8
    (a quote, backslash or control character in it) is left to the general path.
    """
    if any(ch in '"\\' or ch < " " for name in names for ch in name):
        return None
    return tuple(name.encode() for name in names)
