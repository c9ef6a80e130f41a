"""A web scene not converted yet does not hold the detail page's player back
(dashboard/web_files.py): the poses come from the model the conversion compiles first (no
second compile), the player's request for the scene waits until the file is written
(`CachedWebFiles`), and a conversion that fails after the player was sent gives the server's
frames for that episode; a page served without that middleware waits for its scene first."""

import asyncio
import os
import threading
from collections import OrderedDict
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
os.environ.setdefault("MUJOCO_GL", "egl")

from render_helpers import VIOL, toy_record, toy_scene  # noqa: E402

pytestmark = pytest.mark.render

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_models(monkeypatch):
    """No model of an earlier test in memory or on disk; the texture-free compiles counted (the
    MJCF texts compiled: a render thread an earlier test left running may compile its own)."""
    from replay.render import scene_models

    for cache in ("_POSE_CACHE", "_MODEL_CACHE"):
        monkeypatch.setattr(scene_models, cache, OrderedDict())
    monkeypatch.setattr(scene_models, "load_cached", lambda *a, **k: None)
    flat = []
    real = scene_models._compile
    monkeypatch.setattr(scene_models, "_compile", lambda *a, **k: flat.append(a[0]) or real(*a, **k))
    return flat


@pytest.fixture
def own_converter(monkeypatch):
    """A converter thread of the test's own: not behind conversions an earlier test's pages queued."""
    from concurrent.futures import ThreadPoolExecutor

    from dashboard import web_files as WF

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-web-scene")
    monkeypatch.setattr(WF, "_CONVERTER", pool)
    yield pool
    pool.shutdown(wait=True)


def _held_scene_blob(monkeypatch):
    """`scene_blob` made to wait for the returned event: the conversion stops after its compile."""
    from replay.render import web_scene as W

    release, real = threading.Event(), W.scene_blob
    monkeypatch.setattr(W, "scene_blob", lambda model: release.wait(60) and real(model))
    return release


def test_the_poses_are_made_while_the_scene_converts(tmp_path, monkeypatch, fresh_models, own_converter):
    from dashboard import web_files as WF
    from replay.render import scene_models

    release = _held_scene_blob(monkeypatch)
    gave_back = []
    monkeypatch.setattr(WF, "_give_back_memory", lambda: gave_back.append(threading.current_thread().name))
    rec = toy_record(mjcf=toy_scene(3))
    got = WF.web_files(rec, [VIOL], tmp_path, wait=False)
    scene, poses = (tmp_path / Path(got[k]).name for k in ("scene", "poses"))
    assert poses.is_file() and not scene.exists()
    assert gave_back == []  # the page's poses collect nothing: the conversion gives its memory back after
    assert got["pending"] is not None and not got["pending"].done() and WF.converting(scene)
    mine = scene_models._resolved_scene(scene_models.scene_key(rec))[0]
    assert mine not in fresh_models  # the poses' model is the conversion's: no texture-free compile
    again = WF.web_files(rec, [], tmp_path, wait=False)  # another page on that scene: the same conversion
    assert again["pending"] is got["pending"]
    release.set()
    assert got["pending"].result(60) is True and scene.is_file() and not WF.converting(scene)
    assert [name.startswith("test-web-scene") for name in gave_back] == [True]
    on_disk = WF.web_files(rec, [VIOL], tmp_path, wait=False)
    assert on_disk["pending"] is None and on_disk["poses"] == got["poses"]


class _Folder:
    """The downstream app (Streamlit's component route): the file, or 404."""

    def __init__(self, folder: Path):
        self.folder, self.asked = folder, []

    async def __call__(self, scope, receive, send):
        path = self.folder / scope["path"].rsplit("/", 1)[-1]
        self.asked.append(path.name)
        body = path.read_bytes() if path.is_file() else b""
        await send({"type": "http.response.start", "status": 200 if body else 404, "headers": []})
        await send({"type": "http.response.body", "body": body})


async def _get(app, name: str) -> dict:
    from dashboard.web_files import WEB_PATH

    sent = {}

    async def send(message):
        sent.update({k: v for k, v in message.items() if k in ("status", "headers", "body")})

    scope = {"type": "http", "method": "GET", "path": f"{WEB_PATH}{name}", "headers": []}
    await app(scope, None, send)
    return sent


def test_a_request_for_a_scene_being_converted_is_answered_once_it_is_written(tmp_path, monkeypatch,
                                                                             own_converter):
    from dashboard import web_files as WF

    monkeypatch.setattr(WF, "web_dir", lambda: tmp_path)
    steps = {name: threading.Event() for name in ("good", "bad")}

    def convert(record, folder, scene, withdraw):
        assert steps[scene].wait(60)
        withdraw()
        if scene == "bad":
            raise RuntimeError("a mesh MuJoCo cannot load")
        (folder / f"{scene}.bin").write_bytes(b"SVW1 the scene")
        return True

    monkeypatch.setattr(WF, "_convert_now", convert)
    monkeypatch.setattr(WF, "_SERVED_HERE", threading.Event())
    folder = _Folder(tmp_path)
    assert not WF.requests_wait_for_scenes()
    app = WF.CachedWebFiles(folder)
    assert WF.requests_wait_for_scenes()  # the pages may send their player before the scene is written

    async def scenario():
        pending = {name: WF._conversion(toy_record(mjcf=toy_scene(5)), tmp_path, name) for name in steps}
        asks = {name: asyncio.ensure_future(_get(app, f"{name}.bin")) for name in steps}
        await asyncio.sleep(0.3)
        assert folder.asked == [] and not any(a.done() for a in asks.values())  # held, not a 404
        steps["good"].set()
        good = await asyncio.wait_for(asks["good"], 30)
        assert folder.asked == ["good.bin"] and not asks["bad"].done()
        steps["bad"].set()
        bad = await asyncio.wait_for(asks["bad"], 30)
        with pytest.raises(RuntimeError):
            pending["bad"].result(1)
        return good, bad

    good, bad = asyncio.run(scenario())
    assert good["status"] == 200 and good["body"] == b"SVW1 the scene"
    assert (b"cache-control", WF.FOREVER) in good["headers"]
    assert bad["status"] == 404 and (b"cache-control", WF.FOREVER) not in bad["headers"]


@pytest.mark.parametrize("held", [True, False], ids=["served-by-server.py", "streamlit-run-app.py"])
def test_a_scene_that_fails_gives_the_frames(tmp_path, monkeypatch, fresh_models, held):
    """The demo's detail page, its web scene's conversion failing once its model compiled. Served
    by dashboard/server.py (its middleware holds the player's request for the scene), the poses
    are made, the player is sent, and the page is drawn again with the server's frames; served
    without it (`streamlit run dashboard/app.py`), the page waits for the scene before any
    player and shows the frames at once."""
    from dashboard_helpers import app, ok

    from dashboard import web_files as WF
    from dashboard.web_timeline import SCENE_FAILED_KEY
    from replay.render import web_scene as W

    def broken(model):
        raise ValueError("a scene the web format cannot hold")

    monkeypatch.setattr(W, "scene_blob", broken)
    monkeypatch.setattr(WF, "web_dir", lambda: tmp_path)
    monkeypatch.setattr(WF, "_SERVED_HERE", threading.Event())
    if held:
        WF._SERVED_HERE.set()
    demo = ROOT / "assets" / "demo" / "store"
    eps = pd.read_parquet(demo / "episodes.parquet")
    at = ok(app(demo, page="detail", ep=eps[eps["sbu"]].iloc[0]["episode_id"]))
    assert (at.session_state[SCENE_FAILED_KEY] == at.session_state["_timeline_tag"]) if held else (
        SCENE_FAILED_KEY not in at.session_state)
    assert not list(tmp_path.glob("scene-*.bin"))
    assert list(tmp_path.glob("ep-*.bin")) or not held  # the poses the player was sent with
    assert not any("Drawn in your browser with WebGL" in c.value for c in at.caption)
