"""dashboard/link_open.py: a detail page's request starts opening its episode's scene before the
page's script runs (dashboard/server.py's middleware), only for a store the link may open and
a page has loaded."""

import os
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


def test_a_link_opens_only_for_a_store_it_may_open_and_a_page_has_loaded(tmp_path, monkeypatch):
    from dashboard import cached, stores

    store = build_store(tmp_path / "store", 4, renderable=False)
    other = build_store(tmp_path / "other", 4, renderable=False)
    eid = pd.read_parquet(store / "episodes.parquet")["episode_id"].iat[0]
    monkeypatch.delenv("SAFEVLA_STORES", raising=False)
    monkeypatch.setattr("sys.argv", ["server.py", "--store", str(store)])
    opened = []  # what would be handed to the render thread (no EGL work in this test)
    monkeypatch.setattr(cached, "open_episode_replay", lambda data, e: opened.append((data.key, e)) or True)
    assert stores.loaded_store(str(store)) is None
    assert not open_linked_episode(eid, None)  # no page has loaded it: the middleware never loads a store
    stores.load_store(str(store))
    stores.load_store(str(other))  # loaded (say, by a test's page), but not given with --stores
    assert stores.loaded_store(str(other)) is not None
    assert not open_linked_episode(eid, str(other))
    assert not open_linked_episode(eid, "/etc")
    assert opened == []
    assert open_linked_episode(eid, None) and open_linked_episode(eid, str(store))
    assert opened == [(stores.loaded_store(str(store)).key, eid)] * 2


@pytest.mark.browser
@pytest.mark.slow
def test_a_detail_page_request_opens_its_scene_before_any_page_script_runs(tmp_path):
    """A plain HTTP GET of a detail link (no browser: no websocket, so no page script runs for
    it) compiles the episode's scene: the disk scene cache gains its model. Without the
    middleware nothing would, since prewarm is off."""
    if not os.path.exists(os.environ.get("SAFEVLA_CHROMIUM", "/usr/bin/chromium")):
        pytest.skip("chromium is not installed")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("mujoco")
    from browser_timing import Browser, Server, dashboard_entry

    store = build_store(tmp_path / "store", 4, renderable=True)
    eid = pd.read_parquet(store / "episodes.parquet")["episode_id"].iat[0]
    cache = tmp_path / "scenes"
    link = f"/detail?ep={urllib.parse.quote(eid, safe='')}"
    env = {"SAFEVLA_NO_PREWARM": "1", "SAFEVLA_SCENE_CACHE": str(cache)}
    assert dashboard_entry(ROOT).name == "server.py"
    with Browser() as browser, Server(dashboard_entry(ROOT), store=store, cwd=ROOT, env=env) as srv:
        srv.wait_healthy()
        pg = browser.page()  # a page loads the store (the middleware never does)
        pg.goto(srv.url)
        pg.wait_for_selector('[data-testid="stMetric"]')
        pg.context.close()
        assert not list(cache.glob("*.mjb"))  # the Overview compiles no scene
        with urllib.request.urlopen(srv.url + link, timeout=30) as r:
            assert r.status == 200 and b"<html" in r.read().lower()  # the page itself, untouched
        deadline = time.monotonic() + 120
        while not list(cache.glob("*.mjb")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(cache.glob("*.mjb")), srv.log.read_text()[-2000:]
