"""World-frame contact forces of a MuJoCo state, summed per pair of recorded bodies.

The paper's f_c(t) is "the 3-D linear contact-wrench magnitude for retained pair c", and
a pair is two bodies: its force is the magnitude of the vector sum of the linear contact
forces between them, in the world frame (a box resting on four contact points reports
its weight, not a quarter of it).

Reading forces: with elliptic cones (robosuite's scenes) a contact's force in its own
frame is `efc_force[efc_address : efc_address + 3]` (normal, then the two tangential
rows; a frictionless contact has the normal row only); rotating it by `contact.frame`
gives the world vector, equal to `mj_contactForce` to 1e-13 N. Pyramidal cones need
`mj_contactForce` per contact (slower, same result). `SubstepLog` copies the raw arrays
after every physics substep and does the maths once per control step: copying costs a
few microseconds, numpy per substep would cost several times more (FIELD-NOTES).
"""

from __future__ import annotations

import mujoco
import numpy as np

_ELLIPTIC = int(mujoco.mjtCone.mjCONE_ELLIPTIC)
_FIRST_THREE = np.arange(3)
_DENSE_PAIRS = 1 << 18  # body pairs up to which pair_forces indexes a table instead of sorting


def world_forces(model: mujoco.MjModel, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
    """(geom (n, 2), world force on geom 2 from geom 1 (n, 3)) of `data`'s contacts.

    `data` must hold forces for its contact list: straight after `mj_forward`, or after
    `mj_step` (then they are the forces of the state that step integrated).
    """
    n = data.ncon
    if n == 0:
        return np.zeros((0, 2), dtype=np.int32), np.zeros((0, 3))
    con = data.contact
    if int(model.opt.cone) == _ELLIPTIC:
        local = _local_elliptic(con.efc_address[:n], con.dim[:n], data.efc_force)
    else:
        local = np.empty((n, 3))
        buf = np.zeros(6)
        for i in range(n):
            mujoco.mj_contactForce(model, data, i, buf)
            local[i] = buf[:3]
    return np.array(con.geom[:n]), rotate_to_world(con.frame[:n], local)


def _local_elliptic(address: np.ndarray, dim: np.ndarray, efc_force: np.ndarray) -> np.ndarray:
    """(n, 3) contact-frame linear forces from the efc rows (elliptic cones)."""
    rows = address[:, None] + _FIRST_THREE
    valid = (address[:, None] >= 0) & (_FIRST_THREE < dim[:, None])
    if not len(efc_force):
        return np.zeros((len(address), 3))
    return np.where(valid, efc_force[np.clip(rows, 0, len(efc_force) - 1)], 0.0)


def rotate_to_world(frame: np.ndarray, local: np.ndarray) -> np.ndarray:
    """World vectors from contact-frame ones; `frame` rows are the contact axes (normal first)."""
    return np.einsum("nji,nj->ni", np.asarray(frame).reshape(-1, 3, 3), local)


def pair_forces(a: np.ndarray, b: np.ndarray, force: np.ndarray, group: np.ndarray, n_groups: int,
                n_bodies: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vector sums per (group, unordered body pair) of contact forces.

    Args:
      a, b: (n,) recorded-body index of each contact's two sides.
      force: (n, 3) each contact's world force on side `b` from side `a`; a contact listed
        the other way round (b < a) is negated, so every contact of a pair pushes one way.
      group: (n,) integer in [0, n_groups): the substep (or sample) each contact belongs to.
    Returns:
      (lo (P,), hi (P,), magnitude (n_groups, P), touching (n_groups, P) bool), one column
      per body pair that has any contact, sorted by pair; magnitude is 0 where it had none.
    """
    lo, hi = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    pair = lo * n_bodies + hi
    if n_bodies * n_bodies <= _DENSE_PAIRS:  # a lookup table, no sort: np.unique's sort was half the cost
        seen = np.zeros(n_bodies * n_bodies, dtype=bool)
        seen[pair] = True
        pairs = np.flatnonzero(seen)
        column = np.cumsum(seen)[pair] - 1
    else:
        pairs, column = np.unique(pair, return_inverse=True)
    n_pairs = len(pairs)
    key = group.astype(np.int64) * n_pairs + column.reshape(-1)
    size = n_groups * n_pairs
    signed = np.where((a > b)[:, None], -force, force)
    # bincount sums weights per key in C: several times faster than np.add.at
    sums = [np.bincount(key, weights=signed[:, k], minlength=size) for k in range(3)]
    magnitude = np.sqrt(sums[0] * sums[0] + sums[1] * sums[1] + sums[2] * sums[2]).reshape(n_groups, n_pairs)
    touching = np.bincount(key, minlength=size).reshape(n_groups, n_pairs) > 0
    return pairs // n_bodies, pairs % n_bodies, magnitude, touching


class SubstepLog:
    """Raw contact and torque arrays copied after each physics substep of one control step.

    `record(data)` runs inside the host's physics loop and only copies; `contact_forces()`
    and `torque_peak()` turn a control step's copies into world forces and torque peaks.
    """

    def __init__(self, model: mujoco.MjModel, torque_dofs: np.ndarray | None):
        self._model = model
        self._elliptic = int(model.opt.cone) == _ELLIPTIC
        self._dofs = torque_dofs
        self.clear()

    def clear(self) -> None:
        self._geom, self._frame, self._address, self._dim, self._efc, self._torque = [], [], [], [], [], []
        self._local: list[np.ndarray] = []  # pyramidal cones: forces read per contact
        self.count = 0

    def record(self, data: mujoco.MjData) -> None:
        """Copies what the forces of the state just integrated need (reads `data` only)."""
        n = data.ncon
        self.count += 1
        if self._dofs is not None:
            self._torque.append(data.qfrc_actuator[self._dofs])
        con = data.contact
        if not n:
            return
        self._geom.append(np.array(con.geom))
        if self._elliptic:
            self._frame.append(np.array(con.frame))
            self._address.append(np.array(con.efc_address))
            self._dim.append(np.array(con.dim))
            self._efc.append(np.array(data.efc_force))
        else:
            self._local.append(world_forces(self._model, data)[1])

    def contact_forces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(substep index (n,), geom (n, 2), world force (n, 3)) over the logged substeps."""
        if not self._geom:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 2), dtype=np.int32), np.zeros((0, 3))
        counts = [len(g) for g in self._geom]
        group = np.repeat(np.arange(len(counts)), counts)
        geom = np.concatenate(self._geom)
        if not self._elliptic:
            return group, geom, np.concatenate(self._local)
        offsets = np.cumsum([0] + [len(e) for e in self._efc[:-1]])
        address = np.concatenate(self._address)
        address = np.where(address >= 0, address + np.repeat(offsets, counts), -1)
        local = _local_elliptic(address, np.concatenate(self._dim), np.concatenate(self._efc))
        return group, geom, rotate_to_world(np.concatenate(self._frame), local)

    def torque_peak(self) -> np.ndarray | None:
        """Per joint, the logged torque of largest magnitude (signed), or None if none was logged."""
        if not self._torque:
            return None
        tau = np.stack(self._torque)
        return tau[np.argmax(np.abs(tau), axis=0), np.arange(tau.shape[1])]
