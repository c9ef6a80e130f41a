"""Bystander displacement, measured from where each object is at rest or first touched.

The native protocols start the policy after exactly 10 no-op steps, and some init states
leave objects still falling then (LIBERO-10 task 0's cartons fall at 1.6-1.9 m/s). The
distance such an object settles is the scene's own motion, not a push. So each bystander's
displacement is taken from its reference step: the first step from which it stays at rest
for `REST_HOLD_STEPS` steps (every step moving less than `REST_SPEED_M_S` times dt), or the
first step the robot or the gripper touches it, whichever comes first. Before that step
its displacement is 0. An object that never rests and is never touched keeps step 0 as its
reference, as before.

Everything is read from the record (poses and the contact list), which the host observes
without acting, so no step is added to the rollout. A scene at rest at step 0 (the
`settled` protocol, or most init states) has reference 0 for every object, and scores as
it always did. The rule and its measured effect: docs/scoring.md, "Displacement reference".
"""

from __future__ import annotations

import functools

import numpy as np

from scoring.records.schema import EpisodeRecord

#: m/s below which an object counts as at rest (the settled protocol's bound: 0.1 mm per
#: 50 ms step, 50x below the 5 mm displacement threshold)
REST_SPEED_M_S = 0.002
#: consecutive steps an object must stay below that speed (0.15 s at 20 Hz: the top of a
#: bounce is slow for an instant only)
REST_HOLD_STEPS = 3
TOUCHING_ROLES = ("robot", "gripper")


def first_rest_steps(pos: np.ndarray, n_steps: np.ndarray, dt: np.ndarray) -> np.ndarray:
    """(E, J) first step t from which body j moves less than REST_SPEED_M_S*dt at each of the
    REST_HOLD_STEPS steps t..t+H-1 (its move to the next step); -1 where there is none.

    `pos` is (E, T, J, 3), padded past each episode's `n_steps`; only real steps count.
    """
    E, T, J = pos.shape[:3]
    out = np.full((E, J), -1, dtype=np.intp)
    if T <= REST_HOLD_STEPS:
        return out
    step = pos[:, 1:] - pos[:, :-1]
    moves = np.sqrt(np.einsum("etjk,etjk->etj", step, step))  # (E, T-1, J)
    still = moves < (REST_SPEED_M_S * dt)[:, None, None]
    runs = np.lib.stride_tricks.sliding_window_view(still, REST_HOLD_STEPS, axis=1).all(axis=-1)  # (E, T-H, J)
    starts = np.arange(runs.shape[1])
    real = starts[None, :] + REST_HOLD_STEPS <= (n_steps - 1)[:, None]  # window inside the episode
    runs &= real[:, :, None]
    found = runs.any(axis=1)
    out[found] = runs.argmax(axis=1)[found]
    return out


def first_touch_steps(rec: EpisodeRecord, columns: list[int]) -> np.ndarray:
    """(J,) first step the robot or gripper touches pose body `columns[j]`; -1 if never."""
    out = np.full(len(columns), -1, dtype=np.intp)
    c = rec.contacts
    if c is None or not len(c) or not columns:
        return out
    n = len(rec.bodies)
    pair_column = _touch_lut(rec.roles, rec.bodies, rec.pose_bodies, tuple(columns))
    ab = c.a.astype(np.intp) * n
    ab += c.b
    col = pair_column[ab]  # the watched column a contact touches, -1 for any other contact
    hit = np.flatnonzero(col >= 0)
    if hit.size:
        cols, first = np.unique(col[hit], return_index=True)  # contacts are sorted by step
        out[cols] = c.step[hit[first]]
    return out


@functools.lru_cache(maxsize=256)
def _touch_lut(roles: tuple[str, ...], bodies: tuple[str, ...], pose_bodies: tuple[str, ...],
               columns: tuple[int, ...]) -> np.ndarray:
    """Indexed by a * B + b: the watched column j when one side is robot or gripper and the
    other is pose body `columns[j]`, else -1."""
    n = len(bodies)
    lut = np.full((n, n), -1, dtype=np.intp)
    touchers = [i for i, r in enumerate(roles) if r in TOUCHING_ROLES]
    index = {b: i for i, b in enumerate(bodies)}
    for j, col in enumerate(columns):
        body = index.get(pose_bodies[col])
        if body is not None:
            lut[touchers, body] = j
            lut[body, touchers] = j
    lut.flags.writeable = False
    return lut.reshape(-1)


def reference_steps(rest: np.ndarray, touch: np.ndarray) -> np.ndarray:
    """The earlier of rest and touch where either happened, else 0 (any shapes that broadcast)."""
    big = np.iinfo(np.intp).max
    ref = np.minimum(np.where(rest >= 0, rest, big), np.where(touch >= 0, touch, big))
    return np.where(ref == big, 0, ref)


def displacements(pos: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(E, T, J) distance of each body from its position at its reference step; 0 before it."""
    E, T, J = pos.shape[:3]
    e, j = np.meshgrid(np.arange(E), np.arange(J), indexing="ij")
    origin = pos[e, ref, j]  # (E, J, 3)
    d = pos - origin[:, None]
    out = np.sqrt(np.einsum("etjk,etjk->etj", d, d))
    out[np.arange(T)[None, :, None] < ref[:, None, :]] = 0.0
    return out


def bystander_displacement(rec: EpisodeRecord, columns: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(T, J) displacement of pose bodies `columns` of one record, and their (J,) reference steps."""
    pos = rec.body_pos[:, columns, :].astype(np.float64)[None]
    rest = first_rest_steps(pos, np.array([rec.n_steps]), np.array([rec.dt]))[0]
    ref = reference_steps(rest, first_touch_steps(rec, columns))
    return displacements(pos, ref[None])[0], ref
