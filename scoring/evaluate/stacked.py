"""Episodes of one layout stacked as padded (E, T, ...) arrays, and time operators on them.

Signal derivation runs on a batch of episodes at once so that one numpy call serves the
batch: per-call overhead, not arithmetic, is most of the cost on 300-step episodes. The
episodes of a batch share a layout (`layout_key`: bodies, roles, tracked bodies and the
recorded families), so every array stacks; lengths may differ. Shorter episodes are padded
by repeating their last row, and every operator here treats step `n_steps[e] - 1` as the
end of row `e`, so a row's values equal those of the same episode scored alone, bit for bit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from scoring.records.schema import EpisodeRecord


def layout_key(rec: EpisodeRecord) -> tuple:
    """Episodes with equal keys can share a batch: same bodies, roles and recorded families.

    Episodes shorter than 5 steps (where the difference stencils do not fit) only share
    a batch with episodes of the same length.
    """
    limits = rec.meta.get("joint_torque_limit_nm")
    return (rec.bodies, rec.roles, rec.targets, rec.pose_bodies, rec.quat_bodies,
            None if rec.joint_torque is None else rec.joint_torque.shape[1],
            None if limits is None else tuple(limits), rec.gripper_contact is not None,
            rec.contacts is not None, rec.n_steps if rec.n_steps < 5 else 0)


class Stacked:
    """E episodes of one layout, padded to the longest (T steps).

    Attributes:
      records: the episodes, in batch order.
      first: records[0], which speaks for the layout.
      n_steps: (E,) int steps per episode; last: (E,) index of each episode's last step.
      dt: (E,) float seconds per step.
      E, T: batch size and padded length.
    """

    def __init__(self, records: Sequence[EpisodeRecord]):
        self.records = list(records)
        self.first = self.records[0]
        key = layout_key(self.first)
        for rec in self.records[1:]:
            if layout_key(rec) != key:
                raise ValueError(f"episodes {self.first.episode_id!r} and {rec.episode_id!r} have different "
                                 "layouts; batch only episodes with equal layout_key")
        self.E = len(self.records)
        self.n_steps = np.array([r.n_steps for r in self.records])
        self.T = int(self.n_steps.max())
        self.last = self.n_steps - 1
        self.dt = np.array([r.dt for r in self.records])

    def stack(self, get: Callable[[EpisodeRecord], np.ndarray], dtype=np.float64) -> np.ndarray:
        """(E, T, ...) of `get(record)`, each row padded with its last step."""
        arrays = [get(r) for r in self.records]
        if self.E == 1:
            return arrays[0].astype(dtype, copy=False)[None]
        out = np.empty((self.E, self.T) + arrays[0].shape[1:], dtype=dtype)
        for e, a in enumerate(arrays):
            n = a.shape[0]
            out[e, :n] = a
            out[e, n:] = a[n - 1]
        return out


def norm(x: np.ndarray) -> np.ndarray:
    """Euclidean norm over the last axis (np.linalg.norm's checks cost more than the math here)."""
    return np.sqrt(np.einsum("...i,...i->...", x, x))


def _per_row(values: np.ndarray, ndim: int) -> np.ndarray:
    return values.reshape((-1,) + (1,) * (ndim - 1))


def gradient(x: np.ndarray, dt: np.ndarray, last: np.ndarray) -> np.ndarray:
    """np.gradient (edge_order=1) along axis 1 of (E, T, ...) `x`; row e has step `dt[e]`, ends at `last[e]`."""
    g = np.empty_like(x)
    if x.shape[1] < 2:
        g[...] = 0.0
        return g
    rows = np.arange(x.shape[0])
    edge_dt = _per_row(dt, x.ndim - 1)
    g[:, 1:-1] = (x[:, 2:] - x[:, :-2]) / (2 * _per_row(dt, x.ndim))
    g[:, 0] = (x[:, 1] - x[:, 0]) / edge_dt
    g[rows, last] = (x[rows, last] - x[rows, last - 1]) / edge_dt
    return g


def onset_baseline(values: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """For each step (axis 1 of (E, T, K)), `values` at the first step of the gate interval containing it."""
    onset = gate.copy()
    onset[:, 1:] &= ~gate[:, :-1]
    steps = np.arange(gate.shape[1]).reshape(1, -1, 1)
    last_onset = np.maximum.accumulate(np.where(onset, steps, 0), axis=1)
    return np.take_along_axis(values, last_onset, axis=1)


@functools.lru_cache(maxsize=64)
def _window_bounds(n_steps: int, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    half = window // 2
    lo = np.clip(np.arange(n_steps) - half, 0, n_steps)
    hi = np.clip(np.arange(n_steps) + half + 1, 0, n_steps)
    return lo, hi, (hi - lo)[:, None]


def smooth(x: np.ndarray, n_steps: np.ndarray, window: int) -> np.ndarray:
    """Centred rolling mean over `window` steps along axis 1 of (E, T, 3); edges average what exists.

    Row e holds `n_steps[e]` steps.
    """
    E, T = x.shape[:2]
    csum = np.empty((E, T + 1) + x.shape[2:])
    csum[:, 0] = 0.0
    np.cumsum(x, axis=1, out=csum[:, 1:])
    if (n_steps == T).all():  # no padding: one set of window bounds for every row
        lo, hi, count = _window_bounds(T, window)
        return (csum[:, hi] - csum[:, lo]) / count
    half = window // 2
    t = np.minimum(np.arange(T), n_steps[:, None] - 1)  # padded steps repeat the last one
    lo = np.clip(t - half, 0, None)
    hi = np.minimum(t + half + 1, n_steps[:, None])
    rows = np.arange(E)[:, None]
    return (csum[rows, hi] - csum[rows, lo]) / (hi - lo)[..., None]


def central_differences(x: np.ndarray, dt: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Norms of the 1st, 2nd and 3rd central differences of (E, T, 3) `x`, over dt, dt², dt³.

    Interior stencils: (x+1 - x-1)/2, x+1 - 2x + x-1, (x+2 - 2x+1 + 2x-1 - x-2)/2. Steps
    the stencil does not fit take the nearest interior value; episodes shorter than the
    stencil (3 or 5 steps) get zeros. Row e has step `dt[e]` and ends at step `last[e]`;
    rows of one call are all at least 5 steps long, or all of one length.
    """
    E, T = x.shape[:2]
    dt = dt[:, None]
    v, a, j = np.zeros((E, T)), np.zeros((E, T)), np.zeros((E, T))
    rows = np.arange(E)
    if T >= 3:
        v[:, 1:-1] = norm((x[:, 2:] - x[:, :-2]) / 2) / dt
        a[:, 1:-1] = norm(x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]) / dt ** 2
        v[:, 0], a[:, 0] = v[:, 1], a[:, 1]
        v[rows, last], a[rows, last] = v[rows, last - 1], a[rows, last - 1]
    if T >= 5:
        j[:, 2:-2] = norm((x[:, 4:] - 2 * x[:, 3:-1] + 2 * x[:, 1:-3] - x[:, :-4]) / 2) / dt ** 3
        j[:, 0] = j[:, 1] = j[:, 2]
        j[rows, last] = j[rows, last - 1] = j[rows, last - 2]
    return v, a, j
