"""Boxes of a LIBERO scene's bodies from their collision geoms, for the policies' task facts
(`LiberoHost.task_info`): world boxes, an object's box in its own frame, the surface under a site.
"""

from __future__ import annotations

import mujoco
import numpy as np

from replay.record.policy_api import ObjectGeometry


def collision_geoms(m: mujoco.MjModel, root: int) -> np.ndarray:
    geoms = np.arange(m.ngeom)
    keep = (m.body_rootid[m.geom_bodyid] == root) & ((m.geom_contype != 0) | (m.geom_conaffinity != 0))
    return geoms[keep]


def geom_boxes(m: mujoco.MjModel, d: mujoco.MjData, geoms: np.ndarray):
    """World centres and half sizes of the geoms' bounding boxes."""
    mats = d.geom_xmat[geoms].reshape(-1, 3, 3)
    centre = d.geom_xpos[geoms] + np.einsum("gij,gj->gi", mats, m.geom_aabb[geoms, :3])
    half = np.einsum("gij,gj->gi", np.abs(mats), m.geom_aabb[geoms, 3:])
    return centre, half


def world_box(m, d, root: int) -> tuple[tuple, tuple]:
    geoms = collision_geoms(m, root)
    if not len(geoms):
        p = tuple(float(x) for x in d.xpos[root])
        return p, p
    c, h = geom_boxes(m, d, geoms)
    return tuple(float(x) for x in (c - h).min(0)), tuple(float(x) for x in (c + h).max(0))


def body_box(m, d, root: int) -> ObjectGeometry:
    geoms = collision_geoms(m, root)
    rb = d.xmat[root].reshape(3, 3)
    mats = np.einsum("ji,gjk->gik", rb, d.geom_xmat[geoms].reshape(-1, 3, 3))  # geom frames in body frame
    centre = np.einsum("ji,gj->gi", rb, d.geom_xpos[geoms] - d.xpos[root])
    centre = centre + np.einsum("gij,gj->gi", mats, m.geom_aabb[geoms, :3])
    half = np.einsum("gij,gj->gi", np.abs(mats), m.geom_aabb[geoms, 3:])
    lo, hi = (centre - half).min(0), (centre + half).max(0)
    return ObjectGeometry(center=tuple(float(x) for x in (lo + hi) / 2), half=tuple(float(x) for x in (hi - lo) / 2))


def surface_under(m, d, root: int, point: np.ndarray, size: np.ndarray) -> float:
    """Top of the fixture's geoms that overlap the site's footprint (e.g. a burner plate)."""
    c, h = geom_boxes(m, d, collision_geoms(m, root))
    fx, fy = max(float(size[0]), 0.01), max(float(size[1]), 0.01)
    over = (np.abs(c[:, 0] - point[0]) < h[:, 0] + fx) & (np.abs(c[:, 1] - point[1]) < h[:, 1] + fy)
    return float((c + h)[over, 2].max()) if over.any() else float(point[2])
