"""dashboard/link_open.py: a detail page's request starts opening its episode's scene before the
page's script runs (dashboard/server.py's middleware), only for a store the link may open,
loading that store if no page has."""

import re
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from dashboard_helpers import build_store  # noqa: E402
from dashboard.link_open import linked_episode, open_linked_episode  # noqa: E402


@pytest.mark.parametrize("path, query, expected", [
    ("/detail", "ep=libero-goal%2Ftask_1%2Fep_000", ("libero-goal/task_1/ep_000", None)),
    ("/base/detail/", "ep=x&store=%2Fdata%2Fstore&step=3", ("x", "/data/store")),
    ("/", "page=detail&ep=x", ("x", None)),  # app.py switches to the `page` of a link
    ("/overview", "ep=x", None),
    ("/detail", "ep=", None),
    ("/detail", "", None),
    ("/static/js/detail", "", None),
])
def test_only_a_detail_page_with_an_episode_is_a_linked_episode(path, query, expected):
    assert linked_episode(path, query) == expected


def test_a_link_opens_only_for_a_store_it_may_open_loading_it_if_no_page_has(tmp_path, monkeypatch):
    from dashboard import cached, stores

    store = build_store(tmp_path / "store", 4, renderable=False)
    other = build_store(tmp_path / "other", 4, renderable=False)
    eid = pd.read_parquet(store / "episodes.parquet")["episode_id"].iat[0]
    monkeypatch.delenv("SAFEVLA_STORES", raising=False)
    monkeypatch.setattr("sys.argv", ["server.py", "--store", str(store)])
    opened = []  # what would be handed to the render thread (no EGL work in this test)
    monkeypatch.setattr(cached, "open_episode_replay", lambda data, e: opened.append((data.key, e)) or True)
    assert stores.loaded_store(str(store)) is None
    assert not open_linked_episode(eid, str(other))  # not given with --stores: neither loaded nor opened
    assert not open_linked_episode(eid, "/etc")
    assert stores.loaded_store(str(other)) is None and opened == []
    assert open_linked_episode(eid, None)  # the server's store, loaded by the request (no page has)
    loaded = stores.loaded_store(str(store))
    assert loaded is not None and stores.load_store(str(store)) is loaded  # the page finds it loaded
    assert open_linked_episode(eid, str(store))
    assert opened == [(loaded.key, eid)] * 2


def test_a_page_asking_for_a_store_a_link_is_loading_waits_for_that_load(tmp_path, monkeypatch):
    """One load per store version: the page's run that asks while the link's request loads
    gets that load's store (or its error), and a failed load is not kept."""
    import threading
    from concurrent.futures import Future

    from dashboard import data as D
    from dashboard import stores

    store = str(build_store(tmp_path / "store", 4, renderable=False))
    real_open, calls, release = D.open_store, [], threading.Event()

    def slow_open(path):
        calls.append(path)
        assert release.wait(60)
        if len(calls) == 1:
            raise D.StoreProblem(f"{path}: episodes.parquet: unreadable (a test's first load)")
        return real_open(path)

    monkeypatch.setattr(D, "open_store", slow_open)
    waiting = []  # askers that found the load under way and wait for it

    class CountedFuture(Future):
        def result(self, timeout=None):
            waiting.append(1)
            return super().result(timeout)

    monkeypatch.setattr(stores, "Future", CountedFuture)
    got = []

    def ask():
        try:
            got.append(stores.load_store_at_request(store))
        except D.StoreProblem as exc:
            got.append(exc)

    askers = [threading.Thread(target=ask) for _ in range(3)]
    for t in askers:
        t.start()
    deadline = time.monotonic() + 30
    while not (calls and len(waiting) == 2) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(calls) == 1 and len(waiting) == 2  # one loads, the other two wait for that load
    release.set()
    for t in askers:
        t.join(60)
    assert len(calls) == 1 and len(got) == 3 and all(isinstance(g, D.StoreProblem) for g in got)
    assert stores.loaded_store(store) is None  # the failure was not kept: the next ask loads again
    first = stores.load_store_at_request(store)
    assert len(calls) == 2 and stores.load_store_at_request(store) is first and stores.loaded_store(store) is first


CONVERT_CHILD = """import json, sys
from dashboard import link_open
got = [link_open.convert_linked_scene(eid, sys.argv[1]) for eid in sys.argv[2:]]
print(json.dumps({"converted": got, "imported": [m for m in ("dashboard.cached", "dashboard.data", "pandas")
                                                 if m in sys.modules]}))
"""


def test_a_linked_scene_is_converted_from_the_episodes_row_alone(tmp_path):
    """`convert_linked_scene` reads two columns of the store's table and the episode's record,
    converts its web scene and imports neither the pages' modules nor pandas (a fresh
    interpreter); an unknown episode, or one whose trajectory lies outside the store and its
    archive, converts nothing."""
    import json
    import os
    import shutil
    import subprocess

    pytest.importorskip("mujoco")
    store = build_store(tmp_path / "store", 4, renderable=True)
    table = pd.read_parquet(store / "episodes.parquet")
    inside, outside = table["episode_id"].iat[0], table["episode_id"].iat[1]
    away = tmp_path / "elsewhere" / "ep.npz"  # the same record, outside the store and its archive
    away.parent.mkdir()
    shutil.copy(store / table["trajectory"].iat[1], away)
    table.loc[1, "trajectory"] = str(away)
    table.to_parquet(store / "episodes.parquet")
    xdg = tmp_path / "xdg"
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg), "SAFEVLA_SCENE_CACHE": str(tmp_path / "scenes"),
           "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CONVERT_CHILD, str(store), "no/such/episode", outside, inside],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"converted": [False, False, True], "imported": []}
    assert len(list(xdg.glob("safevla/player/*/web/scene-*.bin"))) == 1


@pytest.mark.slow
def test_a_detail_page_request_opens_its_scene_before_any_page_script_runs(tmp_path):
    """A plain HTTP GET of a detail link (no browser: no websocket, so no page script runs for
    it) to a server no page has loaded the store of converts the episode's web scene and makes
    its poses: the player's folder gains both. Without the middleware nothing would, since
    prewarm is off and no page runs."""
    pytest.importorskip("mujoco")
    from browser_timing import Server, dashboard_entry

    store = build_store(tmp_path / "store", 4, renderable=True)
    eid = pd.read_parquet(store / "episodes.parquet")["episode_id"].iat[0]
    xdg = tmp_path / "xdg"
    link = f"/detail?ep={urllib.parse.quote(eid, safe='')}"
    env = {"SAFEVLA_NO_PREWARM": "1", "SAFEVLA_SCENE_CACHE": str(tmp_path / "scenes"), "XDG_CACHE_HOME": str(xdg)}
    assert dashboard_entry(ROOT).name == "server.py"
    made = lambda: sorted(p.name.split("-")[0] for p in xdg.glob("safevla/player/*/web/*.bin"))  # noqa: E731
    with Server(dashboard_entry(ROOT), store=store, cwd=ROOT, env=env) as srv:
        srv.wait_healthy()
        assert made() == []
        with urllib.request.urlopen(srv.url + link, timeout=30) as r:
            assert r.status == 200 and b"<html" in r.read().lower()  # the page itself, untouched
        deadline = time.monotonic() + 120
        while made() != ["ep", "scene"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert made() == ["ep", "scene"], srv.log.read_text()[-2000:]


WARM_CHILD = """import json, os, sys
from dashboard import link_open, stores
loading = link_open.warm_server()
assets_found = loading.result(timeout=120) if loading else None
real_lstat, lstats = os.lstat, [0]
def counted(*args, **kwargs):
    lstats[0] += 1
    return real_lstat(*args, **kwargs)
os.lstat = counted
import streamlit as st
st.caption("the first element of a process")
repl_check, lstats[0] = lstats[0], 0
from dashboard import player
player._component()  # what the detail page's first run declares
os.lstat = real_lstat
print(json.dumps({"assets_found": assets_found, "store_loaded": stores.loaded_store(sys.argv[1]) is not None,
                  "imported": [m for m in link_open.PAGE_MODULES if m in sys.modules], "repl_check_lstats": repl_check,
                  "component_lstats": lstats[0]}))
"""


@pytest.mark.parametrize("warm", [True, False])
def test_warm_server_loads_the_store_and_imports_the_pages_modules(tmp_path, warm):
    """`link_open.warm_server` (run at server start) leaves the server's store loaded, every
    module a page's first run imports imported, and Streamlit's once-per-process REPL check
    (`inspect.stack()`, resolving every loaded module's path) done, so the first element of the
    first page run resolves no path, nor does the player component's declaration (inspect's
    module look-up); with $SAFEVLA_NO_PREWARM, none of it. A fresh interpreter, so nothing was
    imported before."""
    import json
    import os
    import subprocess

    store = build_store(tmp_path / "store", 4, renderable=False)
    env = {**os.environ, "SAFEVLA_STORE": str(store), "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    env.pop("SAFEVLA_NO_PREWARM", None)
    if not warm:
        env["SAFEVLA_NO_PREWARM"] = "1"
    out = subprocess.run([sys.executable, "-c", WARM_CHILD, str(store)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    from dashboard.link_open import PAGE_MODULES

    if warm:
        assert {k: got[k] for k in ("store_loaded", "imported")} == {"store_loaded": True, "imported": list(PAGE_MODULES)}
        assert got["assets_found"] is False  # queued, and the store has no episode with a replay
        assert got["repl_check_lstats"] < 50 and got["component_lstats"] < 50
    else:
        assert not got["store_loaded"] and "dashboard.charts" not in got["imported"] and got["assets_found"] is None
        assert got["repl_check_lstats"] > 1000


@pytest.mark.slow
def test_the_server_imports_the_pages_modules_at_start_before_any_page_is_asked_for(tmp_path):
    """dashboard/server.py runs `warm_server` from its lifespan: with no request but the health
    check, the server process imports the pages' modules (its import log, `-X importtime`,
    names MuJoCo, which only a page run or a link's scene open would import otherwise)."""
    from browser_timing import Server, dashboard_entry

    store = build_store(tmp_path / "store", 4, renderable=False)
    with Server(dashboard_entry(ROOT), store=store, cwd=ROOT, env={"PYTHONPROFILEIMPORTTIME": "1"}) as srv:
        srv.wait_healthy()
        imported = re.compile(r"^import time:.*\|\s+mujoco$", re.M)
        deadline = time.monotonic() + 120
        while not imported.search(srv.log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert imported.search(srv.log.read_text()), srv.log.read_text()[-2000:]


ASSETS_CHILD = """import json, sys
import mujoco
from dashboard import link_open
from dashboard.web_files import _cap_asset_cache
from replay.render import scene_models, web_scene
store, first, other, load = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
def bytes_read():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar")).split()[1])
found = link_open.load_a_scenes_assets(store) if load else None
_cap_asset_cache()
cache = mujoco.mj_getCache()
held, capacity = mujoco.mj_getCacheSize(cache), mujoco.mj_getCacheCapacity(cache)
kept = scene_models.pose_model_in_memory(link_open.linked_record(first, store))
record = link_open.linked_record(other, store)
before = bytes_read()
scene_models.web_model(record, web_scene.WEB_TEXTURE_PX)
print(json.dumps({"found": found, "held": held, "capacity": capacity, "kept": kept, "read": bytes_read() - before}))
"""


@pytest.mark.render
def test_a_scenes_assets_loaded_at_start_spare_the_first_conversion_reading_them(tmp_path):
    """`link_open.load_a_scenes_assets` (queued by the server's warm-up) loads the meshes and
    textures of the store's first replayable episode's scene into MuJoCo's asset cache (within
    its cap) and the texture cache, keeping no model (its web scene written), so the first
    conversion of another scene in the process reads the files the two share no more: a LIBERO
    scene's web model read 91 MB of files alone, 45 MB after another's assets were loaded.
    Fresh interpreters: MuJoCo's cache is the process's."""
    import json
    import os
    import subprocess

    from dashboard.link_open import linked_record
    from dashboard.web_files import ASSET_CACHE_BYTES, scene_name

    store = str(ROOT / "assets" / "demo" / "store")
    eps = pd.read_parquet(Path(store) / "episodes.parquet")
    replayable = [e for e in eps.loc[eps["trajectory"].notna(), "episode_id"] if linked_record(e, store) is not None]
    first = replayable[0]
    scene_of = lambda eid: scene_name(linked_record(eid, store))  # noqa: E731
    other = next(e for e in replayable if scene_of(e) != scene_of(first))
    got = {}
    for load in (True, False):
        env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT),
               "SAFEVLA_SCENE_CACHE": str(tmp_path / f"scenes-{load}"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
        out = subprocess.run([sys.executable, "-c", ASSETS_CHILD, store, first, other, str(int(load))], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        got[load] = json.loads(out.stdout.strip().splitlines()[-1])
    loaded, alone = got[True], got[False]
    assert loaded["found"] is True and not loaded["kept"]
    assert 10 * 2**20 < loaded["held"] <= loaded["capacity"] <= ASSET_CACHE_BYTES and alone["held"] == 0
    assert list((tmp_path / "scenes-True" / "textures").glob("*.npy"))
    assert len(list((tmp_path / "xdg").glob("safevla/player/*/web/scene-*.bin"))) == 1  # the loaded scene's, kept
    assert loaded["read"] < 0.7 * alone["read"], got
