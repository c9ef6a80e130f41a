"""Marking a violation in a MuJoCo scene: red bodies, the pair's contact points, force arrows.

`SceneHighlighter` tints the bodies a `Violation` (replay/render/violation.py) names and draws
its contacts and forces into a `mujoco.MjvScene`; the 2-D border and captions on the rendered
frame are replay/render/overlay.py's. The names of both are importable from here, as before.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from replay.render.overlay import (border_width, draw_arrow, draw_border, draw_captions,  # noqa: E402,F401
                                   paste_tile, text_tile)
from replay.render.violation import (SUCCESS_RGB, VIOLATION_RGB, RenderError, Violation,  # noqa: E402,F401
                                     bodies_for, canonical_family, format_quantity)
from replay.scene.contact_forces import world_forces  # noqa: E402
from scoring.evaluate.channels import scored_channels  # noqa: E402
from scoring.evaluate.displacement import bystander_displacement  # noqa: E402
from scoring.records.schema import EpisodeRecord  # noqa: E402

# ----------------------------------------------------------------- 3-D highlighting

TINT_RGBA = np.array([1.0, 0.06, 0.06, 1.0], dtype=np.float32)
CONTACT_RGBA = np.array([1.0, 0.85, 0.0, 1.0], dtype=np.float32)
XRAY_ALPHA = 0.25
_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)


@dataclasses.dataclass(frozen=True, eq=False)
class Focus:
    """A violation's bodies in the model: one body-id group per named body, and the geoms to tint."""

    groups: tuple[np.ndarray, ...]
    tint_geoms: frozenset
    size: float  # bounding radius of the smaller body: sets the contact markers' scale
    furniture: np.ndarray  # body ids of furniture and the world

    def contacts(self, m: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
        """(ncon,) bool: the violation's contacts: between its two bodies, or for one body, its
        contacts with anything but furniture (what pushed or holds it, not what it rests on)."""
        if not d.ncon or not self.groups:
            return np.zeros(d.ncon, bool)
        b = m.geom_bodyid[d.contact.geom]
        first = np.isin(b, self.groups[0])
        if len(self.groups) == 1:
            return first.any(axis=1) & ~np.isin(b, self.furniture).any(axis=1)
        second = np.isin(b, np.concatenate(self.groups[1:]))
        return (first[:, 0] & second[:, 1]) | (first[:, 1] & second[:, 0])


class SceneHighlighter:
    """Marks violations in a `mujoco.Renderer` scene: red bodies, their contacts and force arrows.

    A record body stands for itself and every model body below it that the record does not
    name (as the recorder projects contacts); furniture and the world are never tinted
    (a red table hides the scene), only their contact with the other body is shown.
    """

    def __init__(self, model: mujoco.MjModel, record: EpisodeRecord):
        self.model, self.record = model, record
        m, index = model, {b: i for i, b in enumerate(record.bodies)}
        self.names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, i) or "" for i in range(m.nbody)]
        self.proj = np.full(m.nbody, -1)
        for i, n in enumerate(self.names):  # parents come before children
            self.proj[i] = index.get(n, self.proj[m.body_parentid[i]] if i else -1)
        furniture = {index[b] for b, r in zip(record.bodies, record.roles) if r == "furniture"}
        self.furniture = frozenset({0, *np.flatnonzero(np.isin(self.proj, list(furniture))).tolist()})
        self._focus: dict[Violation, Focus] = {}

    def _group(self, body: str) -> np.ndarray:
        """Model body ids of a record body (itself and the unnamed bodies below it), or of a model
        body the record does not name (itself and its welded children)."""
        if body in self.record.bodies:
            return np.flatnonzero(self.proj == self.record.bodies.index(body))
        group = {self.names.index(body)} - {0} if body in self.names else set()
        for i in range(1, self.model.nbody):
            if self.model.body_parentid[i] in group and self.model.body_jntnum[i] == 0:
                group.add(i)
        return np.array(sorted(group), dtype=int)

    def focus(self, v: Violation) -> Focus:
        """The violation's body groups and tinted geoms (cached per violation)."""
        got = self._focus.get(v)
        if got is None:
            m = self.model
            groups = [g for g in (self._group(b) for b in v.bodies) if g.size]
            tint = [not set(g.tolist()) <= self.furniture for g in groups]
            geoms = [np.flatnonzero(np.isin(m.geom_bodyid, g)) for g, t in zip(groups, tint) if t]
            radii = [m.geom_rbound[np.isin(m.geom_bodyid, g)] for g in groups]
            size = min((float(r[r > 0].max()) for r in radii if (r > 0).any()), default=float(m.stat.meansize))
            got = Focus(tuple(groups), frozenset(np.concatenate(geoms).tolist()) if geoms else frozenset(), size,
                        np.array(sorted(self.furniture)))
            self._focus[v] = got
        return got

    def decorate(self, scn: mujoco.MjvScene, d: mujoco.MjData, active: Sequence[Violation], *,
                 xray: bool = False, step: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """After `update_scene`: tints the violating geoms red and puts a yellow disc at each
        violating contact; returns arrows as world (tail, head) pairs to draw over the image
        (in 3-D the bodies hide them): each contact's force, and a displaced bystander's way
        from where it stood. With `xray`, every other movable body turns translucent. `step`
        (the record step `d` holds) sizes a pair's arrow by the force its score read there."""
        m, focus = self.model, [self.focus(v) for v in active]
        geoms = frozenset().union(*(f.tint_geoms for f in focus))
        for i in range(scn.ngeom):
            g = scn.geoms[i]
            if g.objtype != _GEOM:
                continue
            if g.objid in geoms:
                g.rgba[:] = TINT_RGBA
                g.matid = -1
                g.emission = 0.35
            elif xray and m.geom_bodyid[g.objid] not in self.furniture:
                g.rgba[3] = XRAY_ALPHA
                g.transparent = 1
        arrows = [a for v in active for a in self._displacement(d, v)]
        if not d.ncon or not any(f.groups for f in focus):
            return arrows
        size = min(f.size for f in focus if f.groups)
        for v, f in zip(active, focus):
            ref = v.threshold if v.unit == "N" and v.threshold > 0 else 20.0
            scored = None if step is None else self.scored_force(v, step)
            arrows += self._add_contacts(scn, d, np.flatnonzero(f.contacts(m, d)), size, ref, f, scored)
        return arrows

    def scored_force(self, v: Violation, step: int) -> float | None:
        """The force `v`'s pair had at `step` on the channel its score read (the substep peak
        under "peak" sampling, which the replayed end-of-step state cannot show), or None when
        `v` names no recorded pair or the pair has no entry at `step`."""
        rec, c = self.record, self.record.contacts
        if c is None or len(v.bodies) != 2 or not all(b in rec.bodies for b in v.bodies):
            return None
        ia, ib = (rec.bodies.index(b) for b in v.bodies)
        lo, hi = np.searchsorted(c.step, step, "left"), np.searchsorted(c.step, step, "right")
        a, b = c.a[lo:hi], c.b[lo:hi]
        sel = lo + np.flatnonzero(((a == ia) & (b == ib)) | ((a == ib) & (b == ia)))
        return float(scored_channels(rec, v.force_sampling).contact_force[sel].max()) if sel.size else None

    def arrow_force(self, d: mujoco.MjData, v: Violation) -> tuple[int, np.ndarray] | None:
        """(contact index the arrow ends at, world force vector) drawn for `v` in state `d`.

        For a pair of bodies this is the pair's force as the recorder defines it, the
        vector sum of all their contacts' forces (so its norm is the recorded
        control-step force, when `d` is the replayed state); the arrow ends at the
        strongest of those contacts. For one body it is its strongest contact's force.
        """
        focus = self.focus(v)
        return self._arrow_force(d, np.flatnonzero(focus.contacts(self.model, d)), focus)

    def _arrow_force(self, d: mujoco.MjData, idx: np.ndarray, focus: Focus) -> tuple[int, np.ndarray] | None:
        hit = self._strongest(d, idx)
        if hit is None or len(focus.groups) < 2:
            return hit
        world = world_forces(self.model, d)[1][idx]
        first_in_a = np.isin(self.model.geom_bodyid[d.contact.geom[idx, 0]], focus.groups[0])
        total = np.where(first_in_a[:, None], world, -world).sum(axis=0)  # every contact: the force on b
        return (hit[0], total) if np.linalg.norm(total) > 0 else hit

    def _displacement(self, d: mujoco.MjData, v: Violation) -> list[tuple[np.ndarray, np.ndarray]]:
        """For a displaced bystander: an arrow from its position at its reference step (where
        it rested or was first touched, as scored) to where it is."""
        rec = self.record
        if canonical_family(v.family) != "non_target_max_disp" or len(v.bodies) != 1 \
                or v.bodies[0] not in rec.pose_bodies or v.bodies[0] not in self.names:
            return []
        column = rec.pose_bodies.index(v.bodies[0])
        _, ref = bystander_displacement(rec, [column])
        start = rec.body_pos[int(ref[0]), column].astype(float)
        return [(start, d.xpos[self.names.index(v.bodies[0])].copy())]

    def _add_contacts(self, scn: mujoco.MjvScene, d: mujoco.MjData, idx: np.ndarray, size: float,
                      ref: float, focus: Focus, scored: float | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """A yellow disc (a third of the smaller body's radius) at each contact of `idx`, and one
        force arrow (`arrow_force`: a pair's summed force, ending at its strongest contact),
        pointing into the furniture (else down), the blow as a reader sees it; 2-3.5 radii
        long (the threshold force `ref` draws 2.5), by the `scored` force when known, else by
        the replayed state's."""
        for i in idx:
            if scn.ngeom < scn.maxgeom:
                n, t1, t2 = d.contact.frame[i].reshape(3, 3)
                mujoco.mjv_initGeom(scn.geoms[scn.ngeom], int(mujoco.mjtGeom.mjGEOM_CYLINDER),
                                    np.array([0.35, 0.1, 0.0]) * size, d.contact.pos[i],  # radius, half-height
                                    np.column_stack([t1, t2, n]).ravel(), CONTACT_RGBA)
                scn.ngeom += 1
        hit = self._arrow_force(d, idx, focus)
        if hit is None:
            return []
        i, force = hit
        norm, pos, n = float(np.linalg.norm(force)), d.contact.pos[i].copy(), d.contact.frame[i, :3]
        f1, f2 = (int(b) in self.furniture for b in self.model.geom_bodyid[d.contact.geom[i]])
        into = -n if f1 and not f2 else n if f2 and not f1 else np.array([0.0, 0.0, -1.0])  # n: geom1 -> geom2
        push = force / norm * (1 if force @ into >= 0 else -1)
        length = float(np.clip(2.5 * size * (norm if scored is None else scored) / ref, 2.0 * size, 3.5 * size))
        return [(pos - length * push, pos)]

    def _strongest(self, d: mujoco.MjData, idx: np.ndarray) -> tuple[int, np.ndarray] | None:
        """(contact index, world force vector) of the strongest of contacts `idx`, or None."""
        f6, best = np.zeros(6), None
        for i in idx:
            mujoco.mj_contactForce(self.model, d, int(i), f6)
            force = d.contact.frame[i].reshape(3, 3).T @ f6[:3]
            if np.linalg.norm(force) > 0 and (best is None or np.linalg.norm(force) > np.linalg.norm(best[1])):
                best = (int(i), force)
        return best

    def target(self, d: mujoco.MjData, v: Violation) -> np.ndarray:
        """Where the violation is (`d` at its step): the strongest contact of a violating pair,
        else the centre of its bodies, else the model's centre."""
        focus = self.focus(v)
        hit = self._strongest(d, np.flatnonzero(focus.contacts(self.model, d))) if len(focus.groups) > 1 else None
        if hit is not None:
            return d.contact.pos[hit[0]].copy()
        if focus.groups:
            return d.xipos[np.concatenate(focus.groups)].mean(axis=0)
        return self.model.stat.center.copy()

    def look_at(self, d: mujoco.MjData, v: Violation, view_xmat: np.ndarray | None) -> mujoco.MjvCamera:
        """A free camera aimed at `target(d, v)`, close enough to see the violating bodies,
        looking from the direction of `view_xmat` (the agent view) when given."""
        m = self.model
        cam = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(m, cam)
        cam.lookat[:] = self.target(d, v)
        cam.distance = float(np.clip(4.0 * self.focus(v).size, 0.2, 1.0))
        if view_xmat is not None:
            fwd = -np.asarray(view_xmat).reshape(3, 3)[:, 2]
            cam.azimuth = math.degrees(math.atan2(fwd[1], fwd[0]))
            cam.elevation = max(-60.0, math.degrees(math.asin(float(np.clip(fwd[2], -1, 1)))))
        return cam


# ----------------------------------------------------------------- 2-D overlays
