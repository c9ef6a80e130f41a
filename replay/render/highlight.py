"""What to highlight in a replay, and how: red bodies, contacts, borders and captions.

A `Violation` says which spec failed, at which step, by how much, and which bodies to
tint; `bodies_for` picks those bodies from the record (the violating contact pair, the
displaced bystander, the tilted target). `SceneHighlighter` marks them in a MuJoCo scene
(red geoms, the pair's contact points and force arrows); the overlay helpers draw the
red/green frame border and the caption onto rendered frames with numpy and Pillow.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Sequence

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from replay.scene.contact_forces import world_forces  # noqa: E402
from scoring.report.display import format_quantity as _format  # noqa: E402
from scoring.errors import SafeVLAError  # noqa: E402
from scoring.registry.lookup import spec_name  # noqa: E402
from scoring.records.schema import EpisodeRecord  # noqa: E402

VIOLATION_RGB = (230, 25, 25)
SUCCESS_RGB = (25, 170, 60)
_OPS = (">", "<", ">=", "<=")


class RenderError(SafeVLAError, ValueError):
    """Bad replay input: a missing mesh or texture, an unknown camera, a step out of range,
    an episode with nothing to highlight. The message says what was expected."""


@dataclasses.dataclass(frozen=True)
class Violation:
    """One violated spec at its violating frame.

    Attributes:
      family: the spec family (or spec id), e.g. "max_contact_force".
      step: the violating frame (the step of the worst margin).
      value: the signal's value there, in `unit`.
      threshold: the spec's threshold, in `unit`.
      unit: "N", "m", "deg", "m/s", "" ...
      op: how the value relates to the threshold in the violation (">" or "<", as in the
        caption "412 N > 200 N").
      bodies: record body names to tint (the contact pair, the displaced or tilted object).
    """

    family: str
    step: int
    value: float
    threshold: float
    unit: str = ""
    op: str = ">"
    bodies: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.step, bool) or not isinstance(self.step, (int, np.integer)) or self.step < 0:
            raise RenderError(f"Violation.step: expected a step index >= 0, got {self.step!r}")
        if self.op not in _OPS:
            raise RenderError(f"Violation.op: expected one of {', '.join(_OPS)}, got {self.op!r}")
        if isinstance(self.bodies, str) or not all(isinstance(b, str) for b in self.bodies):
            raise RenderError(f"Violation.bodies: expected a tuple of body names, got {self.bodies!r}")
        object.__setattr__(self, "step", int(self.step))
        object.__setattr__(self, "bodies", tuple(self.bodies))

    @property
    def caption(self) -> str:
        """E.g. "max contact force 412 N > 200 N": the spec's human name from the registry."""
        fam = canonical_family(self.family)
        return f"{spec_name(self.family)} {format_quantity(self.value, self.unit, family=fam)} {self.op} " \
               f"{format_quantity(self.threshold, self.unit, family=fam)}"


def format_quantity(value: float, unit: str, scale: float | None = None, *, family: str | None = None) -> str:
    """A readable number in the quantity's one display unit (`scoring.report.display`, data in
    assets/display.yaml): metres of displacement in mm, radians in degrees. Style "plain":
    ASCII and ° only, which Pillow's bundled font has. `scale` is kept for callers; the unit
    no longer depends on the magnitude."""
    return _format(value, unit, family=family, style="plain")


# ----------------------------------------------------------------- which bodies to tint

_ARM = frozenset({"robot", "gripper"})
# family -> which contact pairs count (role sets, order-insensitive); None: any pair.
_CONTACT_PAIRS = {
    "arm_furniture_force": lambda a, b: (a in _ARM and b == "furniture") or (b in _ARM and a == "furniture"),
    "arm_no_furniture_collision": lambda a, b: (a in _ARM and b == "furniture") or (b in _ARM and a == "furniture"),
    "target_furniture_force": lambda a, b: {a, b} == {"target", "furniture"},
    "max_contact_force": None,
    "self_collision_free": lambda a, b: (a == "robot" and b in _ARM) or (b == "robot" and a in _ARM),
}
_TARGET_FAMILIES = ("held_object_tilt_world", "stable_grasp_maintained", "target_obj_speed", "release_speed")
_GRIPPER_FAMILIES = ("eef_speed", "eef_acc", "eef_jerk")


def canonical_family(name: str) -> str:
    """The family of a spec id ("max_contact_force_under_200N" -> "max_contact_force")."""
    known = (*_CONTACT_PAIRS, *_TARGET_FAMILIES, *_GRIPPER_FAMILIES, "non_target_max_disp", "joint_torque")
    for fam in known:
        if name == fam or name.startswith(fam + "_") or name.startswith(fam + "."):
            return fam
    return name


def bodies_for(record: EpisodeRecord, family: str, step: int, *, value: float | None = None) -> tuple[str, ...]:
    """The record bodies to tint for a violation of `family` at `step`.

    Contact families: the pair of the contact (within the family's role pairs) whose force
    is nearest `value` (the recorded extreme), or the largest when `value` is unknown.
    Displacement: the bystander displaced most at `step`. Tilt/grasp/speed: the target
    nearest the end effector (the held one).
    EEF kinematics: the gripper. Joint torque: the link of the most loaded joint.
    """
    fam = canonical_family(family)
    by_role = lambda *roles: tuple(b for b, r in zip(record.bodies, record.roles) if r in roles)  # noqa: E731
    if fam in _CONTACT_PAIRS:
        c = record.contacts
        if c is None or not len(c):
            return ()
        lo, hi = np.searchsorted(c.step, step, "left"), np.searchsorted(c.step, step, "right")
        keep = _CONTACT_PAIRS[fam]
        cand = [i for i in range(lo, hi)
                if keep is None or keep(record.roles[c.a[i]], record.roles[c.b[i]])]
        if not cand:
            return ()
        # the extreme is a peak or a control-step value, by how the store was scored: match either
        forces = c.force[cand] if c.force_peak is None else np.maximum(c.force[cand], c.force_peak[cand])
        if value is not None and math.isfinite(value):
            gap = np.abs(c.force[cand] - value)
            if c.force_peak is not None:
                gap = np.minimum(gap, np.abs(c.force_peak[cand] - value))
            pick = np.argmin(gap)
        else:
            pick = np.argmax(forces)
        i = cand[int(pick)]
        return tuple(dict.fromkeys((record.bodies[c.a[i]], record.bodies[c.b[i]])))
    if fam == "non_target_max_disp":
        idx = [i for i, b in enumerate(record.pose_bodies) if record.role_of(b) == "bystander"]
        if not idx or not 0 <= step < record.n_steps:
            return ()
        disp = np.linalg.norm(record.body_pos[step, idx] - record.body_pos[0, idx], axis=-1)
        return (record.pose_bodies[idx[int(np.argmax(disp))]],)
    if fam in _TARGET_FAMILIES:  # the target in the hand: the one nearest the end effector
        targets = tuple(dict.fromkeys((*record.targets, *by_role("target"))))
        posed = [b for b in targets if b in record.pose_bodies]
        if len(targets) < 2 or not posed or not 0 <= step < record.n_steps:
            return targets
        pos = record.body_pos[step, [record.pose_bodies.index(b) for b in posed]]
        return (posed[int(np.argmin(np.linalg.norm(pos - record.eef_pos[step], axis=-1)))],)
    if fam in _GRIPPER_FAMILIES:
        return by_role("gripper")
    if fam == "joint_torque":
        return _torque_link(record, step, by_role("robot"))
    return ()


def _torque_link(record: EpisodeRecord, step: int, links: tuple[str, ...]) -> tuple[str, ...]:
    """The link moved by the joint with the largest torque ratio at `step` (a serial arm: the
    last J robot bodies in record order, one per recorded joint), else all robot links."""
    tau = record.joint_torque
    if tau is None or not 0 <= step < record.n_steps or len(links) < tau.shape[1] or not tau.shape[1]:
        return links
    limits = record.meta.get("joint_torque_limit_nm")
    ratio = np.abs(tau[step]) / (np.asarray(limits) if limits is not None else np.abs(tau).max(axis=0) + 1e-12)
    return (links[len(links) - tau.shape[1] + int(np.argmax(ratio))],)


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
                 xray: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """After `update_scene`: tints the violating geoms red and puts a yellow disc at each
        violating contact; returns arrows as world (tail, head) pairs to draw over the image
        (in 3-D the bodies hide them): each contact's force, and a displaced bystander's way
        from where it stood. With `xray`, every other movable body turns translucent."""
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
            arrows += self._add_contacts(scn, d, np.flatnonzero(f.contacts(m, d)), size, ref, f)
        return arrows

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
        """For a displaced bystander: an arrow from its recorded initial position to where it is."""
        rec = self.record
        if canonical_family(v.family) != "non_target_max_disp" or len(v.bodies) != 1 \
                or v.bodies[0] not in rec.pose_bodies or v.bodies[0] not in self.names:
            return []
        start = rec.body_pos[0, rec.pose_bodies.index(v.bodies[0])].astype(float)
        return [(start, d.xpos[self.names.index(v.bodies[0])].copy())]

    def _add_contacts(self, scn: mujoco.MjvScene, d: mujoco.MjData, idx: np.ndarray, size: float,
                      ref: float, focus: Focus) -> list[tuple[np.ndarray, np.ndarray]]:
        """A yellow disc (a third of the smaller body's radius) at each contact of `idx`, and one
        force arrow (`arrow_force`: a pair's summed force, ending at its strongest contact),
        pointing into the furniture (else down), the blow as a reader sees it; 2-3.5 radii
        long (the threshold force `ref` draws 2.5)."""
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
        length = float(np.clip(2.5 * size * norm / ref, 2.0 * size, 3.5 * size))
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

def draw_border(img: np.ndarray, rgb: Sequence[int], width: int | None = None) -> np.ndarray:
    """Paints a `width`-pixel frame border of colour `rgb` into `img` (in place) and returns it."""
    w = width or border_width(img.shape[1])
    img[:w], img[-w:], img[:, :w], img[:, -w:] = rgb, rgb, rgb, rgb
    return img


def border_width(image_width: int) -> int:
    return max(3, round(image_width / 80))


@functools.lru_cache(maxsize=64)
def _font(px: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=px)


@functools.lru_cache(maxsize=64)
def text_tile(text: str, px: int, rgb: tuple[int, int, int] = (255, 255, 255),
              bg: tuple[int, int, int, int] = (0, 0, 0, 170)) -> np.ndarray:
    """`text` on a translucent box as an (h, w, 4) uint8 RGBA tile (cached)."""
    from PIL import Image, ImageDraw

    font = _font(px)
    x0, y0, x1, y1 = font.getbbox(text)
    pad = max(2, px // 3)
    tile = Image.new("RGBA", (x1 - min(x0, 0) + 2 * pad, y1 + 2 * pad - min(y0, 0) // 2), bg)
    ImageDraw.Draw(tile).text((pad - min(x0, 0), pad), text, font=font, fill=(*rgb, 255))
    return np.asarray(tile)


def paste_tile(img: np.ndarray, tile: np.ndarray, x: int, y: int) -> np.ndarray:
    """Alpha-blends an RGBA tile into `img` at (x, y), clipped to the image; in place."""
    h = min(tile.shape[0], img.shape[0] - y)
    w = min(tile.shape[1], img.shape[1] - x)
    if h <= 0 or w <= 0:
        return img
    t = tile[:h, :w]
    a = t[..., 3:4].astype(np.uint16)
    region = img[y:y + h, x:x + w]
    region[:] = ((t[..., :3] * a + region * (255 - a)) // 255).astype(np.uint8)
    return img


def draw_arrow(img: np.ndarray, tail, head, *, rgb=(255, 217, 0), width: int | None = None) -> np.ndarray:
    """A `rgb` arrow with a dark outline from pixel `tail` to `head` (x, y); in place."""
    from PIL import Image, ImageDraw

    w = width or max(3, img.shape[1] // 110)
    t, h = np.asarray(tail, float), np.asarray(head, float)
    u = (h - t) / max(np.linalg.norm(h - t), 1e-9)
    wing = np.array([-u[1], u[0]]) * 2.2 * w
    tip = [tuple(h), tuple(h - 3.5 * w * u + wing), tuple(h - 3.5 * w * u - wing)]
    pts = np.array([t, *tip])
    x0, y0 = np.maximum(np.floor(pts.min(axis=0)) - 2 * w, 0).astype(int)
    x1, y1 = np.minimum(np.ceil(pts.max(axis=0)) + 2 * w, (img.shape[1], img.shape[0])).astype(int)
    if x1 <= x0 or y1 <= y0:
        return img
    crop = Image.fromarray(img[y0:y1, x0:x1])
    draw = ImageDraw.Draw(crop)
    shift = lambda p: (p[0] - x0, p[1] - y0)  # noqa: E731
    neck = tuple(h - 3.0 * w * u)
    for color, extra in (((40, 30, 0), 2), (rgb, 0)):
        draw.line([shift(t), shift(neck)], fill=color, width=w + 2 * extra)
        draw.polygon([shift(p) for p in tip], fill=color, outline=color, width=1 + extra)
    img[y0:y1, x0:x1] = np.asarray(crop)
    return img


def draw_captions(img: np.ndarray, lines: Sequence[str], *, rgb=(255, 255, 255)) -> np.ndarray:
    """Caption lines in translucent boxes at the top left, inside the border (shrunk to fit); in place."""
    bw = border_width(img.shape[1])
    x = y = bw + 2
    avail_w, avail_h = img.shape[1] - x - bw, img.shape[0] - y - bw
    for line in lines:
        px = max(11, img.shape[1] // 32)
        tile = text_tile(line, px, tuple(rgb))
        if tile.shape[1] > avail_w:
            tile = text_tile(line, max(6, px * avail_w // tile.shape[1]), tuple(rgb))
        paste_tile(img, tile[:avail_h - (y - bw - 2), :avail_w], x, y)
        y += tile.shape[0] + 2
    return img
