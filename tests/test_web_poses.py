"""An episode's poses and violation marks for the browser (replay/render/web_scene.py
`episode_blob`) come out the same from the scene's texture-free model
(`scene_models.pose_model`) and its web scene's model as from its full model, on a toy scene and on a demo LIBERO
episode with a contact-force and a displacement violation; and the dashboard makes them ahead
of the page (dashboard/web_files.py `prepare_scene`, `prepare_poses`)."""

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from render_helpers import VIOL, toy_record, toy_scene  # noqa: E402
from replay.render import web_scene as W  # noqa: E402
from replay.render.scene_models import pose_model, scene_model_once  # noqa: E402

pytestmark = pytest.mark.render

ROOT = Path(__file__).resolve().parent.parent
DEMO_STORE = ROOT / "assets" / "demo" / "store"
DEMO_EPISODE = "libero-goal/task_1/scripted-hasty/ep_001"  # two violations: a displacement and a contact force


def _same(a, b, path="header") -> None:
    """Equal JSON-like values, numbers to 1e-6 (float32 poses of float64 kinematics)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{k}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-6), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _assert_same_blobs(full: bytes, flat: bytes) -> dict:
    (h1, a1), (h2, a2) = W.read_blob(full), W.read_blob(flat)
    _same({k: v for k, v in h1.items() if k != "buffers"}, {k: v for k, v in h2.items() if k != "buffers"})
    for name in ("static", "poses", "cams"):
        assert a1[name].shape == a2[name].shape, name
        np.testing.assert_allclose(a2[name], a1[name], atol=1e-6, err_msg=name)
    return h1


def test_toy_poses_and_marks_of_the_texture_free_model_are_the_full_models():
    rec = toy_record(mjcf=toy_scene(1))  # a textured floor
    full, flat = scene_model_once(rec), pose_model(rec)
    assert full.ntexdata > 64 * 64 and flat.ntexdata < 100 and flat.ntex == full.ntex
    head = _assert_same_blobs(W.episode_blob(full, rec, [VIOL]), W.episode_blob(flat, rec, [VIOL]))
    assert head["marks"][str(VIOL.step)]["discs"]  # there were marks to compare
    assert pose_model(rec) is flat  # kept for the scene's next episode


def test_libero_poses_and_marks_of_the_texture_free_and_web_models_are_the_full_models(monkeypatch):
    """The texture-free pose model, and the textures-shrunk model a web scene's conversion
    compiles (`web_model`, kept as the pose model after it), give the full model's poses and marks."""
    from collections import OrderedDict

    from dashboard import data as D
    from replay.render import scene_models
    from dashboard.replay_bridge import build_violations
    from scoring.records.io import load_record

    data = D.open_store(DEMO_STORE)
    i = data.index_of(DEMO_EPISODE)
    rec = load_record(data.trajectory_path(i))
    rows = D.episode_specs(data, D.verdicts(data, {}), i)
    bad = rows[rows["violated"] & ~rows["report_only"].astype(bool)]
    viol = build_violations(rec, bad.to_dict("records"), force_sampling=D.scored_option(data, i))
    assert len(viol) >= 2
    for cache in ("_POSE_CACHE", "_MODEL_CACHE"):  # none compiled by an earlier test
        monkeypatch.setattr(scene_models, cache, OrderedDict())
    monkeypatch.setattr(scene_models, "load_cached", lambda *a, **k: None)
    full, flat = scene_model_once(rec), pose_model(rec)
    assert flat.ntexdata * 1000 < full.ntexdata and (flat.nbody, flat.ngeom, flat.nmesh) == (
        full.nbody, full.ngeom, full.nmesh)
    expected = W.episode_blob(full, rec, viol)
    head = _assert_same_blobs(expected, W.episode_blob(flat, rec, viol))
    marks = head["marks"].values()
    assert any(m["tint"] for m in marks) and any(m["arrows"] for m in marks) and any(m["discs"] for m in marks)
    # what `web_model` compiles (and keeps as the pose model: the toy test below), compiled here
    # so that no model a background render thread of an earlier test keeps stands in for it
    web = scene_models._compile_shrunk(*scene_models._resolved_scene(scene_models.scene_key(rec)), W.WEB_TEXTURE_PX)
    assert flat.ntexdata < web.ntexdata < full.ntexdata
    _assert_same_blobs(expected, W.episode_blob(web, rec, viol))


def test_the_page_finds_what_was_made_ahead(tmp_path):
    from dashboard.web_files import prepare_poses, prepare_scene, web_files

    rec = toy_record(mjcf=toy_scene(1))
    assert prepare_scene(rec, tmp_path) is True
    assert prepare_poses(rec, [VIOL], tmp_path) is True
    made = sorted(p.name for p in tmp_path.glob("*.bin"))
    got = web_files(rec, [VIOL], tmp_path)
    assert got["converted"] is False and sorted(p.name for p in tmp_path.glob("*.bin")) == made
    assert {got["scene"], got["poses"]} == {f"web/{n}" for n in made}
    other = web_files(rec, [], tmp_path)  # another mark set: its own poses, the same scene
    assert other["scene"] == got["scene"] and other["poses"] != got["poses"] and not other["converted"]


def test_a_pose_model_asked_for_while_the_web_model_compiles_is_that_model(monkeypatch):
    """`pose_model` during `web_model`'s compile of the same scene waits for it (no second,
    texture-free compile), and compiles its own when that compile fails."""
    import threading
    import time
    from collections import OrderedDict
    from concurrent.futures import ThreadPoolExecutor

    from replay.render import scene_models

    for cache in ("_POSE_CACHE", "_MODEL_CACHE"):
        monkeypatch.setattr(scene_models, cache, OrderedDict())
    monkeypatch.setattr(scene_models, "load_cached", lambda *a, **k: None)
    monkeypatch.setattr(scene_models, "compile_cached", lambda text, folder, make, **k: make())
    started, release, flat = threading.Event(), threading.Event(), []
    real_shrunk, real_flat = scene_models._compile_shrunk, scene_models._compile

    def held(*args, fail=False):
        started.set()
        assert release.wait(60)
        if fail:
            raise scene_models.RenderError("a texture MuJoCo cannot load")
        return real_shrunk(*args)

    rec = toy_record(mjcf=toy_scene(4))
    mine = scene_models._resolved_scene(scene_models.scene_key(rec))[0]  # not another test's render thread's
    monkeypatch.setattr(scene_models, "_compile",
                        lambda *a, **k: (a[0] == mine and flat.append(k)) or real_flat(*a, **k))
    for fail in (False, True):
        started.clear(), release.clear()
        monkeypatch.setattr(scene_models, "_compile_shrunk", lambda *a, fail=fail: held(*a, fail=fail))
        scene_models._POSE_CACHE.clear()
        with ThreadPoolExecutor(2) as pool:
            web = pool.submit(scene_models.web_model, rec, W.WEB_TEXTURE_PX)
            assert started.wait(60)
            poses = pool.submit(pose_model, rec)
            time.sleep(0.3)  # it reaches the compile under way (not a timing: the order of events)
            release.set()
            if fail:
                with pytest.raises(scene_models.RenderError):
                    web.result(60)
                assert poses.result(60).ntexdata < 100 and len(flat) == 1  # its own, texture-free
            else:
                assert poses.result(60) is web.result(60) and flat == []


def test_an_announced_web_model_is_waited_for_until_compiled_or_withdrawn(monkeypatch):
    """`web_model_ahead` (a conversion queued on the converter thread): `pose_model` waits for
    that model; withdrawn without a compile (the file was found on disk), it compiles its own."""
    import time
    from collections import OrderedDict
    from concurrent.futures import ThreadPoolExecutor

    from replay.render import scene_models

    for cache in ("_POSE_CACHE", "_MODEL_CACHE"):
        monkeypatch.setattr(scene_models, cache, OrderedDict())
    monkeypatch.setattr(scene_models, "load_cached", lambda *a, **k: None)
    monkeypatch.setattr(scene_models, "compile_cached", lambda text, folder, make, **k: make())
    rec = toy_record(mjcf=toy_scene(6))
    with ThreadPoolExecutor(1) as pool:
        withdraw = scene_models.web_model_ahead(rec)
        poses = pool.submit(pose_model, rec)
        time.sleep(0.3)
        assert not poses.done()  # waiting for the announced model
        withdraw()
        assert poses.result(60).ntexdata < 100  # its own, texture-free
        scene_models._POSE_CACHE.clear()
        withdraw = scene_models.web_model_ahead(rec)
        poses = pool.submit(pose_model, rec)
        web = scene_models.web_model(rec, W.WEB_TEXTURE_PX)
        withdraw()  # after the compile: nothing to take back
        assert poses.result(60) is web and pose_model(rec) is web and web.ntexdata > 100
