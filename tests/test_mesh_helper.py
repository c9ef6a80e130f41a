"""A compile with half its meshes loaded beside it (`mesh_helper.loading_meshes_beside`) gives
the model a compile alone gives, on a demo LIBERO scene, and the helper did load them."""

import os
import threading
from pathlib import Path

import mujoco
import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from replay.render import mesh_helper, scene_models  # noqa: E402
from scoring.records.io import load_record  # noqa: E402

pytestmark = pytest.mark.render

ROOT = Path(__file__).resolve().parent.parent
DEMO_EPISODE = ROOT / "assets" / "demo" / "archive" / "libero_goal" / "task_1" / "scripted-careful" / "ep_001.npz"
MODEL_FIELDS = ("mesh_vert", "mesh_normal", "mesh_texcoord", "mesh_face", "mesh_facenormal", "mesh_facetexcoord",
                "mesh_graph", "mesh_pos", "mesh_quat", "mesh_scale", "geom_pos", "geom_quat", "geom_size", "geom_aabb",
                "geom_rbound", "body_mass", "body_inertia", "body_ipos", "body_iquat")


@pytest.fixture
def demo_spec():
    resolved, base, origin = scene_models._resolved_scene(scene_models.scene_key(load_record(DEMO_EPISODE)))
    return lambda: scene_models._parse(resolved, base, origin)


@pytest.fixture
def empty_asset_cache():
    cache = mujoco.mj_getCache()
    capacity = mujoco.mj_getCacheCapacity(cache)
    mujoco.mj_clearCache(cache)
    yield cache
    mujoco.mj_clearCache(cache)
    mujoco.mj_setCacheCapacity(cache, capacity)


def _helper_done() -> None:
    for t in threading.enumerate():
        if t.name == "safevla-mesh-helper":
            t.join(60)


def test_a_compile_with_the_helper_is_the_compile_without(demo_spec, empty_asset_cache, monkeypatch):
    monkeypatch.setattr(mesh_helper, "compiler_threads", lambda: 1)  # as on a 2-core machine, whatever this one is
    spec = demo_spec()
    later = mesh_helper._helped(spec)
    assert later, "a LIBERO scene's meshes are worth a helper"
    files = [m.file for m in spec.meshes if m.file]
    assert {m.file for m, _ in later} <= set(files[len(files) // 3:])  # the later meshes, last first
    assert later[0][0].file == next(f for f in reversed(files) if f in {m.file for m, _ in later})
    total = sum(os.path.getsize(os.path.join(spec.modelfiledir, spec.compiler.meshdir, m.file)) for m in spec.meshes
                if m.file)
    assert sum(size for _, size in later) <= total / 2

    mujoco.mj_setCacheCapacity(empty_asset_cache, 0)  # the cache off: no helper, each mesh loaded here
    alone = scene_models._compiled(demo_spec(), Path(spec.modelfiledir), "demo")
    assert not any(t.name == "safevla-mesh-helper" for t in threading.enumerate())
    mujoco.mj_setCacheCapacity(empty_asset_cache, 512 * 2**20)
    with mesh_helper.loading_meshes_beside(demo_spec()):
        _helper_done()  # the helper alone: what the compile below finds in the cache is its work
    assert mujoco.mj_getCacheSize(empty_asset_cache) > 0
    helped = scene_models._compiled(demo_spec(), Path(spec.modelfiledir), "demo")
    _helper_done()
    for field in MODEL_FIELDS:
        assert np.array_equal(getattr(alone, field), getattr(helped, field)), field

def test_no_helper_where_mujoco_uses_threads_or_a_mesh_is_missing(demo_spec, monkeypatch, tmp_path):
    monkeypatch.setattr(mesh_helper, "compiler_threads", lambda: 2)
    started = threading.active_count()
    with mesh_helper.loading_meshes_beside(demo_spec()):
        assert threading.active_count() == started
    spec = demo_spec()
    spec.meshes[-1].file = str(tmp_path / "gone.obj")
    assert mesh_helper._helped(spec) == []  # the compile says which file is missing
    monkeypatch.setattr(mesh_helper, "compiler_threads", lambda: 1)
    with pytest.raises(scene_models.RenderError, match="gone.obj"):
        scene_models._compiled(spec, Path(spec.modelfiledir), "demo")


def _cube_obj(path: Path, n: int) -> None:
    """A closed cube of 6 n² quads as triangles: sharp edges, where `smoothnormal` changes the normals."""
    g = np.linspace(-1, 1, n + 1)
    verts, faces = [], []
    for axis in range(3):
        for side in (-1.0, 1.0):
            base = len(verts)
            for a in g:
                for b in g:
                    p = [a, b]
                    p.insert(axis, side)
                    verts.append(p)
            for i in range(n):
                for j in range(n):
                    q = [base + i * (n + 1) + j, base + (i + 1) * (n + 1) + j, base + (i + 1) * (n + 1) + j + 1,
                         base + i * (n + 1) + j + 1]
                    if (side > 0) == (axis == 1):
                        q.reverse()
                    faces += [(q[0], q[1], q[2]), (q[0], q[2], q[3])]
    index = {}  # one vertex per corner: the sides share their edges
    remap = [index.setdefault(tuple(np.round(v, 6)), len(index)) for v in verts]
    path.write_text("".join(f"v {x:.6f} {y:.6f} {z:.6f}\n" for x, y, z in index)
                    + "".join(f"f {remap[a] + 1} {remap[b] + 1} {remap[c] + 1}\n" for a, b, c in faces))


def test_meshes_with_their_own_attributes_compile_the_same_helped(tmp_path, empty_asset_cache, monkeypatch):
    """Meshes whose scale or normals differ from the defaults (shared edges, where `smoothnormal`
    changes the normals): the helper's copies are the compile's own meshes."""
    monkeypatch.setattr(mesh_helper, "compiler_threads", lambda: 1)
    monkeypatch.setattr(mesh_helper, "MIN_MESH_BYTES", 0)
    for name, n in (("first", 20), ("second", 4), ("third", 16)):
        _cube_obj(tmp_path / f"{name}.obj", n)
    xml = f"""<mujoco><compiler meshdir="{tmp_path}"/><asset>
      <mesh name="first" file="first.obj"/><mesh name="second" file="second.obj" scale="1 2 1"/>
      <mesh name="third" file="third.obj" smoothnormal="true"/></asset><worldbody><body>
      <geom type="mesh" mesh="first" contype="0" conaffinity="0"/>
      <geom type="mesh" mesh="second" contype="0" conaffinity="0" pos="3 0 0"/>
      <geom type="mesh" mesh="third" contype="0" conaffinity="0" pos="6 0 0"/></body></worldbody></mujoco>"""

    def parse():
        return scene_models._parse(xml, tmp_path, "cubes")

    assert [m.name for m, _ in mesh_helper._helped(parse())] == ["third", "second"]  # half the bytes, last first
    mujoco.mj_setCacheCapacity(empty_asset_cache, 0)
    alone = scene_models._compiled(parse(), tmp_path, "cubes")
    mujoco.mj_setCacheCapacity(empty_asset_cache, 64 * 2**20)
    with mesh_helper.loading_meshes_beside(parse()):
        _helper_done()
    helped = scene_models._compiled(parse(), tmp_path, "cubes")
    for field in MODEL_FIELDS:
        assert np.array_equal(getattr(alone, field), getattr(helped, field)), field
