"""Toy episodes and frame-equality helpers shared by the replay render tests."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

from replay.render.highlight import Violation  # noqa: E402
from replay.render.replayer import Replayer  # noqa: E402
from scoring.records.schema import EpisodeRecord  # noqa: E402

DEMO_ARCHIVE = Path(__file__).resolve().parent.parent / "assets" / "demo" / "archive"
W, H = 160, 120
T = 12
TOY_XML = """<mujoco model="toy">
  <worldbody>
    <light pos="0 0 3" dir="0 0 -1"/>
    <geom name="floor" type="plane" size="2 2 .1" rgba=".75 .75 .75 1"/>
    <body name="box" pos="0 0 .095"><freejoint/><geom name="box_g" type="box" size=".1 .1 .1" rgba="0 0 1 1"/></body>
    <body name="ball" pos="0.4 0 .095"><freejoint/><geom name="ball_g" type="sphere" size=".1" rgba="0 .8 0 1"/></body>
    <camera name="cam" pos="0.1 -1.3 1.1" xyaxes="1 0 0 0 .64 .77"/>
    <camera name="side" pos="1.5 0 .5" xyaxes="0 1 0 -.3 0 1"/>
  </worldbody>
</mujoco>"""

# Three textures larger than 256 px a side (2D, skybox, cube): what a "preview" upload shrinks
BIG_TEXTURE_XML = """<mujoco model="bigtex">
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1=".9 .1 .1" rgb2=".1 .1 .9" width="1024" height="1024"
             mark="random" random="0.3" markrgb="1 1 1"/>
    <texture type="skybox" builtin="gradient" rgb1=".3 .5 .7" rgb2="0 0 0" width="800" height="800"/>
    <texture name="cube" type="cube" builtin="checker" rgb1=".2 .8 .2" rgb2=".8 .8 .2" width="700" height="700"/>
    <material name="cube" texture="cube"/>
    <material name="grid" texture="grid" texrepeat="1 1"/>
  </asset>
  <worldbody>
    <light pos="0 0 3" dir="0 0 -1"/>
    <geom name="floor" type="plane" size="1 1 .1" material="grid"/>
    <geom name="dice" type="box" size=".05 .05 .05" pos=".35 -.1 .05" material="cube"/>
    <camera name="cam" pos=".3 -.4 .35" xyaxes="1 0 0 0 .7 .7"/>
  </worldbody>
</mujoco>"""


def write_stl(path: Path) -> None:
    """A binary STL tetrahedron (0.2 m edges) at `path`: a mesh file a scene can name."""
    tris = [((0, 0, 0), (1, 0, 0), (0, 1, 0)), ((0, 0, 0), (0, 1, 0), (0, 0, 1)),
            ((0, 0, 0), (0, 0, 1), (1, 0, 0)), ((1, 0, 0), (0, 1, 0), (0, 0, 1))]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(b"\0" * 80 + struct.pack("<I", len(tris)))
        for tri in tris:
            f.write(struct.pack("<3f", 0, 0, 0))
            for v in tri:
                f.write(struct.pack("<3f", *(0.2 * c for c in v)))
            f.write(b"\0\0")


# the toy scene with a tetrahedron from meshes/tet.stl; `{tex}`: a texture asset, or ""
MESH_XML = TOY_XML.replace("<worldbody>", '<compiler meshdir="meshes" texturedir="tex"/><asset>'
                           '<mesh name="tet" file="tet.stl"/>{tex}</asset><worldbody>'
                           '<geom type="mesh" mesh="tet" pos="0 .3 0" rgba="1 1 0 1"/>')


def toy_record(*, mjcf: str = TOY_XML, success: bool = True, source: str | None = None, **replay) -> EpisodeRecord:
    """The box slides +x over the floor (5 mm into it, so it has contacts); the ball stays put."""
    m = mujoco.MjModel.from_xml_string(TOY_XML)
    qpos = np.tile(m.qpos0, (T, 1))
    qpos[:, 0] = np.linspace(-0.3, 0.0, T)
    pos = np.stack([qpos[:, 0:3], qpos[:, 7:10]], axis=1)
    steps = np.repeat(np.arange(T), 2)
    contacts = {"step": steps, "a": np.tile([1, 2], T), "b": np.zeros(2 * T, int),
                "force": np.where(np.arange(2 * T) % 2 == 0, 10.0, 5.0)}
    contacts["force"][2 * 6] = 412.0  # box-floor at step 6
    return EpisodeRecord.build(
        episode_id="toy-1", benchmark="toy", task_id="slide", success=success, dt=0.05,
        body_roles={"world": "furniture", "box": "target", "ball": "bystander"}, target_object="box",
        eef_pos=np.zeros((T, 3)), pose_bodies=["box", "ball"], body_pos=pos, contacts=contacts,
        meta={"success_step": T - 1}, source=source,
        replay={"mjcf": mjcf, "qpos": qpos, "qvel": np.zeros((T, m.nv)), "camera": "cam", **replay})


VIOL = Violation("max_contact_force", 6, 412.0, 200.0, "N", ">", ("box", "world"))



# MuJoCo's own invariant: a frame equals a fresh render of the same state. llvmpipe
# rasterises the same GL commands on the same frame size to the same bytes whatever
# context runs them (the "fast" quality has no multisampling), so frames must be *equal*,
# not close: the broken life cycle gave noise, black or another scene, never a near miss.

def toy_scene(i: int) -> str:
    """Toy scene variant `i`: its own checker texture size and colours, a mesh, a box colour,
    so every scene uploads different textures, meshes and display lists to its context."""
    n = 32 * (i + 1)
    assets = (f'<asset><texture name="grid" type="2d" builtin="checker" rgb1="{i % 3 / 2} .2 .3" '
              f'rgb2=".9 .9 {i % 2}" width="{n}" height="{n}"/>'
              f'<material name="grid" texture="grid" texrepeat="{i + 2} {i + 2}"/>'
              f'<mesh name="tet" vertex="0 0 0 1 0 0 0 1 0 0 0 1" scale="{.1 + .05 * i} .2 .3"/></asset>')
    return (TOY_XML.replace("<worldbody>", assets + "<worldbody>")
            .replace('rgba=".75 .75 .75 1"', 'material="grid"')
            .replace('rgba="0 0 1 1"', f'rgba="{i % 2} {i % 3 / 2} 1 1"')
            .replace("</worldbody>", f'<geom type="mesh" mesh="tet" pos="-.5 .3 0" rgba="1 .5 {i / 5} 1"/></worldbody>'))


def fresh_frames(records: dict, steps, *, size=(W, H), **kw) -> dict:
    """Each record's frames from its own replayer in a brand-new GL context, nothing else open."""
    from replay.render.offscreen import pool_for_this_thread

    out = {}
    for key, rec in records.items():
        pool_for_this_thread().close()  # no idle context to reuse: a fresh one
        with Replayer(rec, width=size[0], height=size[1], **kw) as r:
            for s in steps:
                out[key, s] = r.frame(s, violation=VIOL if s == VIOL.step else None)
    pool_for_this_thread().close()
    return out


def churn(records: dict, order, steps, *, max_open: int = 3, size=(W, H)) -> dict:
    """Opens replayers in `order` as the render service does: at most `max_open` open, the
    least recently used closed when another opens; renders `steps` at every visit (and again
    for every still-open replayer after each close). Returns every frame rendered, per visit."""
    opened: dict = {}
    got = []
    for key in order:
        if key not in opened:
            opened[key] = Replayer(records[key], width=size[0], height=size[1])
            while len(opened) > max_open:
                opened.pop(next(iter(opened))).close()
                for k, r in opened.items():  # everyone still open, right after the close
                    got += [((k, s), r.frame(s, violation=VIOL if s == VIOL.step else None)) for s in steps]
        opened[key] = opened.pop(key)  # most recently used last
        got += [((key, s), opened[key].frame(s, violation=VIOL if s == VIOL.step else None)) for s in steps]
    for r in opened.values():
        r.close()
    return got


def assert_all_equal(got, ref) -> None:
    bad = [(k, int(np.abs(img.astype(int) - ref[k]).max())) for k, img in got if not np.array_equal(img, ref[k])]
    assert not bad, f"{len(bad)} of {len(got)} frames differ from a fresh render (key, max |diff|): {bad[:6]}"


def demo_records_of_distinct_scenes(n: int, suite: str = "") -> list:
    """The first `n` demo episodes with replay state (of `suite`, e.g. "libero_spatial": its
    folder in the archive; "": any), each of another LIBERO scene file."""
    from scoring.records.io import load_record

    out, scenes = [], set()
    folder = DEMO_ARCHIVE / suite
    for f in sorted(folder.rglob("*.npz")) if folder.is_dir() else []:
        rec = load_record(f)
        if rec.replay is not None and rec.replay.mjcf not in scenes:
            scenes.add(rec.replay.mjcf)
            out.append(rec)
            if len(out) == n:
                break
    if len(out) < n:
        pytest.skip(f"fewer than {n} demo scenes with replay state under {folder}")
    return out


