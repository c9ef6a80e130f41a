"""The web scene and poses a browser draws a replay from (replay/render/web_scene.py), on the
toy scenes and a demo LIBERO scene: what they hold is what MuJoCo draws and computes."""

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

from render_helpers import MESH_XML, TOY_XML, VIOL, toy_record, toy_scene, write_stl  # noqa: E402
from replay.render import web_scene as W  # noqa: E402
from replay.render.highlight import SceneHighlighter  # noqa: E402
from replay.render.scene_cache import evict  # noqa: E402
from replay.render.scene_models import scene_model  # noqa: E402
from scoring.records.io import load_record  # noqa: E402

pytestmark = pytest.mark.render

ROOT = Path(__file__).resolve().parent.parent


def test_scene_holds_every_drawn_geom_with_its_body_and_colour():
    rec = toy_record(mjcf=toy_scene(1))
    m = scene_model(rec)
    head, arrays = W.read_blob(W.scene_blob(m))
    got = {g["id"]: g for g in head["geoms"]}
    assert set(got) == set(range(m.ngeom))  # the toy draws all its geoms
    box = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "box_g")
    assert got[box]["type"] == "box" and got[box]["body"] == m.geom_bodyid[box]
    assert got[box]["size"] == pytest.approx(m.geom_size[box].tolist())
    assert got[box]["rgba"] == pytest.approx(m.geom_rgba[box].tolist())
    floor = next(g for g in head["geoms"] if g["type"] == "plane")
    tex = head["textures"][head["materials"][floor["material"]]["texture"]]
    assert tex["kind"] == "2d" and tex["width"] == 64 and arrays_have_png(arrays, tex)
    assert [c["name"] for c in head["cameras"]] == ["cam", "side"]
    assert head["cameras"][0]["fovy"] == pytest.approx(float(m.cam_fovy[0]))


def arrays_have_png(arrays, tex) -> bool:
    return any(isinstance(v, bytes) and v.startswith(b"\x89PNG") for v in arrays.values())


def test_collision_group_is_left_out_as_the_replay_does():
    xml = TOY_XML.replace('<geom name="box_g"', '<geom name="box_c" type="box" size=".1 .1 .1" group="0"/>'
                          '<geom name="box_g" group="1"')
    m = scene_model(toy_record(mjcf=xml))
    head, _ = W.read_blob(W.scene_blob(m))
    assert mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "box_c") not in {g["id"] for g in head["geoms"]}


def test_mesh_corners_dequantise_to_the_model_vertices(tmp_path):
    write_stl(tmp_path / "meshes" / "tet.stl")
    (tmp_path / "scene.xml").write_text(MESH_XML.format(tex=""))
    rec = toy_record(mjcf="scene.xml", source=str(tmp_path / "ep.json"))
    m = scene_model(rec)
    head, arrays = W.read_blob(W.scene_blob(m))
    mesh = head["meshes"][next(g["mesh"] for g in head["geoms"] if g["type"] == "mesh")]
    pos = arrays_by_ref(head, arrays, mesh["pos"]).reshape(-1, 3) / 32767 * mesh["half"] + mesh["centre"]
    idx = arrays_by_ref(head, arrays, mesh["index"]).reshape(-1, 3)
    verts = m.mesh_vert[: m.mesh_vertnum[0]]
    faces = m.mesh_face[: m.mesh_facenum[0]]
    assert idx.shape == faces.shape and head["vertices"] == mesh["vertices"]
    # every triangle's corners are the model's, within the int16 step
    np.testing.assert_allclose(pos[idx], verts[faces], atol=float(np.max(mesh["half"])) / 32767 * 1.01)
    normals = arrays_by_ref(head, arrays, mesh["normal"]).reshape(-1, 3) / 127
    assert np.all(np.abs(np.linalg.norm(normals, axis=1) - 1) < 0.02)


def arrays_by_ref(head, arrays, ref):
    name = next(k for k, v in head["buffers"].items() if v == ref)
    return arrays[name]


def test_poses_are_mujocos_kinematics_of_the_recorded_state():
    rec = toy_record()
    m = scene_model(rec)
    head, arrays = W.read_blob(W.episode_blob(m, rec, [VIOL]))
    box, ball = (mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n) for n in ("box", "ball"))
    assert head["moving"] == [box]  # the ball stays put: sent once
    poses = arrays["poses"].reshape(head["n_steps"], 1, 7)
    d = mujoco.MjData(m)
    for s in (0, 5, 11):
        d.qpos[:] = rec.replay.qpos[s]
        mujoco.mj_forward(m, d)
        np.testing.assert_allclose(poses[s, 0, :3], d.xpos[box], atol=1e-6)
        np.testing.assert_allclose(poses[s, 0, 3:], d.xquat[box], atol=1e-6)
        cams = arrays["cams"].reshape(head["n_steps"], -1, 7)
        np.testing.assert_allclose(cams[s, 0, :3], d.cam_xpos[0], atol=1e-6)
    static = arrays["static"].reshape(m.nbody, 7)
    np.testing.assert_allclose(static[ball, :3], d.xpos[ball], atol=1e-6)
    assert head["cameras"][0]["name"] == "cam"  # the record's camera: the toy has no agentview


def test_violation_marks_are_the_highlighters():
    rec = toy_record()
    m = scene_model(rec)
    head, _ = W.read_blob(W.episode_blob(m, rec, [VIOL]))
    assert sorted(map(int, head["marks"])) == list(range(VIOL.step - W.WINDOW, VIOL.step + W.WINDOW + 1))
    mark = head["marks"][str(VIOL.step)]
    want = SceneHighlighter(m, rec).focus(VIOL).tint_geoms
    assert set(mark["tint"]) == set(want) and want
    assert mark["captions"] == [VIOL.caption]
    assert mark["discs"] and mark["arrows"] and mark["arrows"][0]["label"].endswith("N")
    assert head["success_step"] == rec.meta["success_step"]
    assert head["orbit"]["distance"] > 0


def test_cached_file_is_made_once_and_the_folder_is_trimmed(tmp_path, monkeypatch):
    calls = []

    def make(n):
        calls.append(n)
        return bytes(300_000)

    p1, made1 = W.cached_file(tmp_path, "a", lambda: make("a"))
    p2, made2 = W.cached_file(tmp_path, "a", lambda: make("again"))
    assert (p1, made1, made2, calls) == (p2, True, False, ["a"])
    monkeypatch.setenv("SAFEVLA_WEB_CACHE_MB", "0.5")  # room for one file of 300 kB
    os.utime(p1, (1, 1))  # the oldest
    p3, _ = W.cached_file(tmp_path, "b", lambda: make("b"))
    assert p3.is_file() and not p1.exists()
    evict(tmp_path, 0, keep=p3, suffix=".bin")
    assert p3.is_file()  # the file just written is kept


def _ball_scene(n: int, base: str = TOY_XML):
    rng = np.random.default_rng(1)
    pts = rng.normal(size=(n, 3))
    pts = 0.1 * pts / np.linalg.norm(pts, axis=1, keepdims=True)  # a ball's hull of `n` vertices
    xml = base.replace("<worldbody>", '<asset><mesh name="ball" vertex="' + " ".join(f"{v:.5f}" for v in pts.ravel())
                          + '"/></asset><worldbody><geom type="mesh" mesh="ball" pos="0 .3 .2"/>')
    return scene_model(toy_record(mjcf=xml))


def test_a_mesh_over_the_corner_budget_is_simplified_within_its_box(monkeypatch):
    m = _ball_scene(300)
    monkeypatch.setattr(W, "MAX_MESH_VERTS", 200)
    monkeypatch.setattr(W, "SMALL_MESH_VERTS", 200)
    monkeypatch.setattr(W, "MIN_CELL_M", 0.0)
    head, arrays = W.read_blob(W.scene_blob(m))
    mesh = head["meshes"][0]
    assert mesh["source_vertices"] > 200 >= mesh["vertices"] > 20 and head["vertices"] == mesh["vertices"]
    idx = arrays_by_ref(head, arrays, mesh["index"])
    assert idx.size % 3 == 0 and idx.size >= 3 * 20 and idx.max() < mesh["vertices"]
    tri = idx.reshape(-1, 3)
    assert not ((tri[:, 0] == tri[:, 1]) | (tri[:, 1] == tri[:, 2]) | (tri[:, 0] == tri[:, 2])).any()
    pos = arrays_by_ref(head, arrays, mesh["pos"]).reshape(-1, 3) / 32767 * mesh["half"] + mesh["centre"]
    verts = m.mesh_vert[: m.mesh_vertnum[0]]
    assert np.all(pos >= verts.min(axis=0) - 1e-4) and np.all(pos <= verts.max(axis=0) + 1e-4)
    radius = np.linalg.norm(pos - verts.mean(axis=0), axis=1)
    assert 0.085 < radius.min() and radius.max() < 0.115  # still the ball's surface


def test_a_large_mesh_is_clustered_to_cells_no_finer_than_the_floor(monkeypatch):
    m = _ball_scene(20000)
    monkeypatch.setattr(W, "DECIMATED_TRIANGLE_M2", 1e-9)  # decimation would keep every triangle: clustered
    counts = {}
    for cell in (0.004, 0.002):
        monkeypatch.setattr(W, "MIN_CELL_M", cell)
        head, arrays = W.read_blob(W.scene_blob(m))
        mesh = head["meshes"][0]
        assert mesh["source_vertices"] > W.SMALL_MESH_VERTS and mesh["simplified"] == "clustered"
        pos = arrays_by_ref(head, arrays, mesh["pos"]).reshape(-1, 3) / 32767 * mesh["half"] + mesh["centre"]
        verts = m.mesh_vert[: m.mesh_vertnum[0]]
        radius = np.linalg.norm(pos - (verts.min(axis=0) + verts.max(axis=0)) / 2, axis=1)
        assert 0.1 - 2 * cell < radius.min() and radius.max() < 0.1 + 1e-3  # a corner is a mean of its cell's
        counts[cell] = mesh["vertices"]
    # a 20 cm ball of 20,000 corners about 2.5 mm apart: cells of 4 mm or more (48 across) keep
    # about half the corners cells of 2 mm (96 across) keep, and those about the corners it has
    assert counts[0.004] < 0.6 * counts[0.002] and counts[0.002] > 0.6 * mesh["source_vertices"]


def test_a_mesh_is_simplified_once_per_process_for_every_scene_that_has_it(monkeypatch):
    from collections import OrderedDict

    from replay.render import web_mesh

    monkeypatch.setattr(web_mesh, "_KEPT", OrderedDict())
    monkeypatch.setattr(web_mesh, "_KEPT_SIZE", [0])
    made, real = [], W._web_mesh
    monkeypatch.setattr(W, "_web_mesh", lambda *source: made.append(len(source[0])) or real(*source))
    first = W.scene_blob(_ball_scene(20000))
    elsewhere = _ball_scene(20000, TOY_XML.replace('<body name="ball" pos="0.4 0 .095">',
                                                    '<body name="ball" pos="0.6 0.1 .095">'))
    second = W.scene_blob(elsewhere)
    assert len(made) == 1 and made[0] > W.SMALL_MESH_VERTS and first != second  # another scene, its mesh kept
    monkeypatch.setattr(web_mesh, "_KEPT", OrderedDict())
    assert W.scene_blob(elsewhere) == second and len(made) == 2  # made anew: the same bytes
    monkeypatch.setattr(W, "MIN_CELL_M", 0.05)  # other settings: made anew
    W.scene_blob(elsewhere)
    assert len(made) == 3


def test_a_small_mesh_is_sent_whole(monkeypatch):
    monkeypatch.setattr(W, "MIN_CELL_M", 0.05)  # a floor that would cut a clustered ball to a few corners
    head, _ = W.read_blob(W.scene_blob(_ball_scene(300)))
    mesh = head["meshes"][0]
    assert mesh["source_vertices"] <= W.SMALL_MESH_VERTS and mesh["vertices"] == mesh["source_vertices"]


def _uv_sphere(radius: float, slices: int, stacks: int):
    """A UV sphere's vertices and outward faces (the poles as one vertex each)."""
    th = np.linspace(0, np.pi, stacks + 1)[1:-1]
    ph = np.linspace(0, 2 * np.pi, slices, endpoint=False)
    ring = np.stack([np.outer(np.sin(th), np.cos(ph)), np.outer(np.sin(th), np.sin(ph)),
                     np.repeat(np.cos(th)[:, None], slices, axis=1)], axis=-1).reshape(-1, 3)
    verts = radius * np.vstack([[0, 0, 1], ring, [0, 0, -1]])
    faces, bottom = [], len(verts) - 1
    for j in range(slices):
        k = (j + 1) % slices
        faces.append([0, 1 + j, 1 + k])
        faces.append([bottom, 1 + (stacks - 2) * slices + k, 1 + (stacks - 2) * slices + j])
        for r in range(stacks - 2):
            a, b, c, d = 1 + r * slices + j, 1 + r * slices + k, 1 + (r + 1) * slices + j, 1 + (r + 1) * slices + k
            faces += [[a, c, d], [a, d, b]]
    return verts, np.array(faces)


def test_an_untextured_large_mesh_is_decimated_on_its_surface():
    verts, faces = _uv_sphere(0.1, 80, 40)
    xml = TOY_XML.replace("<worldbody>", '<asset><mesh name="ball" vertex="' + " ".join(f"{v:.6f}" for v in verts.ravel())
                          + '" face="' + " ".join(map(str, faces.ravel())) + '"/></asset><worldbody>'
                          '<geom type="mesh" mesh="ball" pos="0 .3 .2"/>')
    m = scene_model(toy_record(mjcf=xml))
    head, arrays = W.read_blob(W.scene_blob(m))
    mesh = head["meshes"][0]
    assert mesh["simplified"] == "decimated" and mesh["source_vertices"] > W.SMALL_MESH_VERTS
    tri = arrays_by_ref(head, arrays, mesh["index"]).reshape(-1, 3)
    target = 4 * np.pi * 0.1 ** 2 / W.DECIMATED_TRIANGLE_M2  # about 3,140 of the sphere's 6,320
    assert 0.9 * target < len(tri) < 1.1 * target
    pos = arrays_by_ref(head, arrays, mesh["pos"]).reshape(-1, 3) / 32767 * mesh["half"] + mesh["centre"]
    centre = (m.mesh_vert[: m.mesh_vertnum[0]].min(axis=0) + m.mesh_vert[: m.mesh_vertnum[0]].max(axis=0)) / 2
    radius = np.linalg.norm(pos - centre, axis=1)
    assert np.abs(radius - 0.1).max() < 1e-3  # still the sphere, to a millimetre
    normals = arrays_by_ref(head, arrays, mesh["normal"]).reshape(-1, 3) / 127 / mesh["half"]  # back to the mesh's frame
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    assert (np.einsum("ij,ij->i", normals, (pos - centre) / radius[:, None]) > 0.98).all()  # smooth and outward


def test_the_demo_robot_is_decimated_and_what_decimation_mangles_is_clustered():
    rec = load_record(ROOT / "assets" / "demo" / "archive" / "libero_goal" / "task_1" / "scripted-careful" / "ep_001.npz")
    head, _ = W.read_blob(W.scene_blob(scene_model(rec)))
    kinds = [(mesh["simplified"], "uv" in mesh) for mesh in head["meshes"] if mesh["simplified"]]
    # the Panda's links, decimated; the textured bowl and cream cheese box, and the robot's
    # pedestal (decimation changed its area by about 15 %), clustered
    assert kinds.count(("decimated", False)) >= 7 and ("clustered", True) in kinds and ("clustered", False) in kinds
    assert ("decimated", True) not in kinds  # texture coordinates are never decimated away
    assert head["vertices"] < 0.15 * head["source_vertices"]


def test_scene_files_differing_only_in_body_placement_share_one_web_scene(tmp_path):
    from replay.render.scene_models import scene_digest_of

    moved = TOY_XML.replace('<body name="ball" pos="0.4 0 .095">', '<body name="ball" pos="0.6 0.1 .095" quat="0 0 0 1">')
    recolored = TOY_XML.replace('rgba="0 .8 0 1"', 'rgba=".8 0 0 1"')
    a, b, c = (toy_record(mjcf=x) for x in (TOY_XML, moved, recolored))
    assert scene_digest_of(a) != scene_digest_of(b)
    assert scene_digest_of(a, placement=False) == scene_digest_of(b, placement=False)
    assert scene_digest_of(a, placement=False) != scene_digest_of(c, placement=False)  # what a body holds counts
