"""The first-frame measurements of benchmarks/bench_dashboard.py: seconds until the detail
page's player shows an episode's first frame, for every way a user opens one (a link on a
fresh, warm or restarted server, the page's picker, the Overview's list), split by whether
the episode's scene brought an asset set no episode before it had."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from browser_timing import NotDrawn, remove_tree, wait_drawn
from dashboard_bench import OVERVIEW, PLAYER_IFRAME, dashboard_server, open_drawn, server_env, summary


# The player's first picture: a server frame shown, or a step drawn with WebGL (the player
# then sets data-first-draw on its root).
_DRAWN = """(s) => { const f = document.querySelector(s); const d = f && f.contentDocument;
    const img = d && d.querySelector('#frame'); const r = d && d.querySelector('#timeline');
    return (!!r && r.dataset.firstDraw !== undefined)
        || (!!img && img.dataset.step !== '-1' && img.complete && img.naturalWidth > 0); }"""


def renderer(pg) -> str:
    """"webgl" or "frames": what the page's player draws with (a player of before the WebGL
    player names none: "frames")."""
    got = pg.evaluate("""(s) => { const f = document.querySelector(s); const d = f && f.contentDocument;
        const r = d && d.querySelector('#timeline'); return r ? (r.dataset.renderer || 'frames') : null; }""",
                      PLAYER_IFRAME)
    return got or "frames"


# A new browser context is a new window, and headless chromium 156 builds its window's own UI
# then (two top-chrome WebUI pages, its omnibox popup): 0.56 CPU-s in that UI's renderer and 0.27 s
# in the browser process within the first second (/proc, an idle machine), which on two cores
# competes with the page for the whole of a page load. A user opening a link in a running
# browser does not wait for it; `window="open"` lets it finish before the navigation.
WINDOW_SETTLE_S = 2.0


def _first_frame(browser, url: str, *, keep: bool = False, tab_of=None, window: str = "new",
                 frame: str = PLAYER_IFRAME):
    """Seconds from navigating a new browser session to `url` until the player (the component
    in `frame`) shows its first frame; with `keep`, {"value_s", "page"} and the page is left
    open for the caller to close.
    The session is a new browser context (empty HTTP cache), or with `tab_of` a new tab of that
    context (its HTTP cache holds what the context loaded before). `window`: "new" navigates as
    the context's window is made (its making is timed with the page), "open" once the window
    has settled (`WINDOW_SETTLE_S`), as a link opens in a browser already running."""
    pg = browser.page() if tab_of is None else tab_of.new_page()
    close = pg.context.close if tab_of is None else pg.close
    try:
        if window == "open":
            time.sleep(WINDOW_SETTLE_S)
        t0 = time.perf_counter()
        pg.goto(url)
        pg.wait_for_function(_DRAWN, arg=frame, timeout=300_000)
        took = round(time.perf_counter() - t0, 3)
    except BaseException:
        close()
        raise
    if keep:
        return {"value_s": took, "page": pg}
    close()
    return took


@contextlib.contextmanager
def _scene_cache(code: Path, store: Path, compiled_before: list[str] = ()):
    """A compiled-scene cache folder of its own, removed after: empty, or holding the scenes of
    the episodes `compiled_before` (written by an earlier process of `code`, as an earlier
    dashboard run leaves them)."""
    cache = Path(tempfile.mkdtemp(prefix="safevla-bench-scenes-"))
    try:
        if compiled_before:
            _fill_scene_cache(code, store, cache, compiled_before)
        yield cache
    finally:
        remove_tree(cache)


@contextlib.contextmanager
def _server_with_scene_cache(code: Path, store: Path, *, compiled_before: list[str] = (), warm_up: bool = False,
                             cache: Path | None = None):
    """A running server of `code` on `store` with the compiled-scene cache `cache` (one of
    `_scene_cache`, shared by several servers), else with one of its own (`compiled_before` as
    for `_scene_cache`); the background warm-up only with `warm_up`."""
    with contextlib.ExitStack() as stack:
        if cache is None:
            cache = stack.enter_context(_scene_cache(code, store, compiled_before))
        env = {"SAFEVLA_SCENE_CACHE": str(cache), **({} if warm_up else {"SAFEVLA_NO_PREWARM": "1"})}
        with dashboard_server(code, store, env) as srv:
            srv.wait_healthy()
            yield srv


# What an earlier dashboard leaves in the cache: each scene and its preview (small textures),
# which the render service's background writer builds and writes once the page is idle. A
# checkout from before the deferred writer (no save_pending) leaves the scene only.
FILL_SCENE_CACHE = """import sys
from dashboard.replay_bridge import PAGE_TEXTURES
from replay.render.replayer import Replayer
from scoring.records.io import load_record
try:
    from replay.render.scene_cache import defer_saves, save_pending
except ImportError:
    defer_saves = save_pending = lambda: None
defer_saves()
for path in sys.argv[1:]:
    Replayer(load_record(path), textures=PAGE_TEXTURES).close()
save_pending()
"""


def _fill_scene_cache(code: Path, store: Path, cache: Path, episodes: list[str]) -> None:
    """Compiles the scenes of `episodes` into `cache` in a process of `code` of its own."""
    import pandas as pd

    eps = pd.read_parquet(store / "episodes.parquet").set_index("episode_id")
    extra = server_env(code)
    env = {**os.environ, **extra, "SAFEVLA_SCENE_CACHE": str(cache), "MUJOCO_GL": "egl",
           "PYTHONPATH": os.pathsep.join(p for p in (str(code), extra.get("PYTHONPATH", "")) if p)}
    subprocess.run([sys.executable, "-c", FILL_SCENE_CACHE, *(str(store / eps.at[e, "trajectory"]) for e in episodes)],
                   cwd=code, env=env, check=True, stdout=subprocess.DEVNULL)


def _sbu_by_scene(store: Path, n: int) -> list[str]:
    """Episode ids of the worst SBU episodes of `n` different scenes (`scene_key`), worst first."""
    import pandas as pd

    from replay.render.scene_models import scene_key
    from scoring.records.io import load_record

    eps = pd.read_parquet(store / "episodes.parquet")
    sbu = eps[eps["sbu"]].sort_values(["vsi", "episode_id"], ascending=[False, True])
    picked, scenes = [], set()
    for _, row in (sbu if len(sbu) else eps).iterrows():
        scene = scene_key(load_record(store / row["trajectory"]))
        if scene not in scenes:
            scenes.add(scene)
            picked.append(row["episode_id"])
            if len(picked) == n:
                break
    return picked


def _by_asset_set(store: Path, opened: list[str], timed: list[str], times: list[float]) -> dict:
    """Splits `times` (of the episodes `timed`) by whether the episode's scene brought an asset
    set (`render_assets_key`: what its GL context holds) that no episode of `opened` (in
    opening order, in the same server) had before it: a new set uploads a context, a seen one
    shares it. Compiled here after the measurement, with the scene cache off."""
    import pandas as pd

    from replay.render.render_assets import render_assets_key
    from replay.render.scene_models import scene_model
    from scoring.records.io import load_record

    eps = pd.read_parquet(store / "episodes.parquet").set_index("episode_id")
    seen, new = set(), {}
    with mock.patch.dict(os.environ, {"SAFEVLA_SCENE_CACHE": "off"}):
        for eid in opened:
            key = render_assets_key(scene_model(load_record(store / eps.at[eid, "trajectory"])))
            new.setdefault(eid, key not in seen)
            seen.add(key)
    fresh = [t for eid, t in zip(timed, times) if new[eid]]
    shared = [t for eid, t in zip(timed, times) if not new[eid]]
    return {"new_asset_set": [new[eid] for eid in timed],
            "median_new_asset_set_s": round(statistics.median(fresh), 3) if fresh else None,
            "median_seen_asset_set_s": round(statistics.median(shared), 3) if shared else None}


def frame(b: "Bench", code: Path) -> dict:
    store = b.demo
    eid = _sbu_by_scene(store, 1)[0]
    with _server_with_scene_cache(code, store) as srv:
        open_drawn(b.browser, srv.url, OVERVIEW)[0].context.close()  # server warm, no scene opened
        t = _first_frame(b.browser, f"{srv.url}/detail?ep={eid}")
    return {"value_s": t, "episode": eid, "store": str(store),
            "includes": "new session opening the detail page of a scene never opened (empty compiled-scene "
                        "cache, no warm-up): navigation -> the player's first frame drawn"}


def _links_to_new_scenes(b: "Bench", code: Path, *, same_browser: bool, shipped: bool = False) -> dict:
    """Page loads of the detail pages of SBU episodes of scene files never opened, after one
    other scene was opened in the same server. Each link opens in a new browser context (empty
    HTTP cache), or with `same_browser` in a new tab of the context that opened the first scene.
    With `shipped`, the server runs as a returning user has it: the scenes compiled by an earlier
    process, the warm-up on."""
    store = b.demo
    first, *others = _sbu_by_scene(store, 1 + max(1, b.repeat))
    with _server_with_scene_cache(code, store, compiled_before=[first, *others] if shipped else [],
                                  warm_up=shipped) as srv:
        before = _first_frame(b.browser, f"{srv.url}/detail?ep={first}", keep=True)
        first_tab = before.pop("page")
        ctx = first_tab.context
        try:
            first_tab.close() if same_browser else ctx.close()  # no page of the first scene left open
            times = [_first_frame(b.browser, f"{srv.url}/detail?ep={eid}", tab_of=ctx if same_browser else None)
                     for eid in others]
        finally:
            ctx.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times), "first_scene_s": before["value_s"],
            **_by_asset_set(store, [first, *others], others, times),
            "episode_ids": [first, *others], "store": str(store)}


def frame_next_scene(b: "Bench", code: Path) -> dict:
    """A scene never opened, in a dashboard where the user has opened another scene before."""
    return {**_links_to_new_scenes(b, code, same_browser=False),
            "includes": "new session opening the detail page of a scene file never opened or compiled, after "
                        "one other scene was opened in the same server (empty compiled-scene cache, no "
                        "warm-up): navigation -> the player's first frame drawn"}


def frame_link_warm(b: "Bench", code: Path) -> dict:
    """`frame_next_scene` in a browser that has shown the dashboard before: each link opens in
    a new tab (a new session) of the browser context that opened the first scene."""
    return {**_links_to_new_scenes(b, code, same_browser=True),
            "includes": "as frame_next_scene, but each link opens in a new tab (new session) of the browser context "
                        "that opened the first scene: its HTTP cache holds Streamlit's frontend files and the "
                        "player's, as a browser that has shown the dashboard before"}


def frame_link_shipped(b: "Bench", code: Path) -> dict:
    """`frame_next_scene` on a server as a returning user runs it: the scenes were compiled by
    an earlier run (disk cache), the background warm-up is on."""
    return {**_links_to_new_scenes(b, code, same_browser=False, shipped=True),
            "includes": "as frame_next_scene (new session, scene file never opened in this server), but the "
                        "compiled-scene cache on disk holds the scenes (written by an earlier process) and the "
                        "background warm-up is on, as `safevla dashboard` runs the second time: navigation -> "
                        "the player's first frame drawn"}


RESTART_PAUSE_S = 2.0  # frame_link_restart: the link opens this long after the server first answers


def frame_link_restart(b: "Bench", code: Path) -> dict:
    """The first link on a freshly started server whose scene an earlier process compiled
    (disk cache), the warm-up on: one server per sample, the link opened RESTART_PAUSE_S
    after the server first answers (a user starts `safevla dashboard`, then opens a link)."""
    store = b.demo
    eids = _sbu_by_scene(store, max(1, b.repeat))
    times = []
    with _scene_cache(code, store, eids) as cache:
        for eid in eids:
            with _server_with_scene_cache(code, store, cache=cache, warm_up=True) as srv:
                time.sleep(RESTART_PAUSE_S)
                times.append(_first_frame(b.browser, f"{srv.url}/detail?ep={eid}"))
    return {"value_s": round(statistics.median(times), 3), **summary(times), "episode_ids": eids,
            "store": str(store),
            "includes": f"a server started with the scenes in the compiled-scene cache on disk (an earlier process) "
                        f"and the warm-up on; {RESTART_PAUSE_S:g} s after it first answers, a new session opens a "
                        "detail link: navigation -> the player's first frame drawn"}


READ_S = 15.0  # frame_link_paced: how long the user reads each page before opening the next link


def frame_link_paced(b: "Bench", code: Path) -> dict:
    """Links to scene files never opened, opened one after another as a reader does: each page
    stays open READ_S after its first frame (its frames pre-render, then the server's
    background work runs: scene writes), then closes, and the next link opens in a new
    browser context. The first link (server still cold) is not timed."""
    store = b.demo
    eids = _sbu_by_scene(store, 1 + max(1, b.repeat))
    times = []
    with _server_with_scene_cache(code, store) as srv:
        for k, eid in enumerate(eids):
            out = _first_frame(b.browser, f"{srv.url}/detail?ep={eid}", keep=True)
            try:
                if k:
                    times.append(out["value_s"])
                time.sleep(READ_S)
            finally:
                out["page"].context.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times),
            **_by_asset_set(store, eids, eids[1:], times), "episode_ids": eids, "store": str(store),
            "includes": f"as frame_next_scene (new session, scene file never opened or compiled, no warm-up), but "
                        f"each page stays open {READ_S:g} s after its first frame before the next link opens: "
                        "navigation -> the player's first frame drawn, with what the server does while a user reads"}


_PLAYER_IMAGE = """(s) => { const f = document.querySelector(s); const d = f && f.contentDocument;
    const img = d && d.querySelector('#frame'); const status = d && d.querySelector('#status');
    const root = d && d.querySelector('#timeline');
    return img ? {src: img.src, step: img.dataset.step, drawn: img.complete && img.naturalWidth > 0,
                  episode: root.dataset.episode, prerendering: !!(status && status.textContent)} : null; }"""


def _all_frames_in(pg) -> None:
    """Waits until the player has every frame of its episode (its pre-render status line is gone)."""
    pg.wait_for_function(f"(s) => {{ const p = ({_PLAYER_IMAGE})(s); return !!p && !p.prerendering; }}",
                         arg=PLAYER_IFRAME, timeout=300_000)


def frame_switch(b: "Bench", code: Path) -> dict:
    """Scenes never opened, reached with the detail page's episode picker (no page load)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    store = b.demo
    first, *others = _sbu_by_scene(store, 1 + max(1, b.repeat))
    with _server_with_scene_cache(code, store) as srv:
        before = _first_frame(b.browser, f"{srv.url}/detail?ep={first}", keep=True)
        pg, times = before.pop("page"), []
        try:
            for eid in others:
                _all_frames_in(pg)  # so only the switch changes the image
                pg.wait_for_timeout(1000)  # the user looks at the episode before choosing the next one
                old = pg.evaluate(_PLAYER_IMAGE, PLAYER_IFRAME)
                box = pg.get_by_test_id("stSelectbox").filter(has_text="Episode (").locator("input")
                box.click()
                box.fill(eid)
                pg.get_by_role("option").filter(has_text=eid).first.wait_for()
                t0 = time.perf_counter()
                box.press("Enter")
                # a frame of another episode than the one shown before (the player names its episode)
                pg.wait_for_function(f"""([s, old]) => {{ const p = ({_PLAYER_IMAGE})(s);
                    return !!p && p.step !== '-1' && p.drawn && p.episode !== old.episode && p.src !== old.src; }}""",
                                     arg=[PLAYER_IFRAME, old], timeout=300_000)
                times.append(round(time.perf_counter() - t0, 3))
                try:  # the address follows at the end of the page's run, which may be after the frame is shown
                    pg.wait_for_function("(ep) => location.search.includes(ep)", arg=eid.replace("/", "%2F"),
                                         timeout=30_000)
                except PlaywrightTimeout:
                    raise NotDrawn(f"the picker did not open {eid} (address {pg.url})") from None
        finally:
            pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times), "first_scene_s": before["value_s"],
            **_by_asset_set(store, [first, *others], others, times),
            "episode_ids": [first, *others], "store": str(store),
            "includes": "the detail page's episode picker (Enter) set to an episode of a scene file never opened or "
                        "compiled, with another scene's detail page open (empty compiled-scene cache, no warm-up): "
                        "Enter -> the player shows the new episode's first frame"}


def frame_from_list(b: "Bench", code: Path) -> dict:
    """Scenes never opened, reached as a user finds them: a click on a row of the Overview's
    worst unsafe successes (the page switches to the episode's detail page in the same session)."""
    from urllib.parse import parse_qs, urlparse

    import pandas as pd

    from replay.render.scene_models import scene_key
    from scoring.records.io import load_record

    store = b.demo
    eps = pd.read_parquet(store / "episodes.parquet").set_index("episode_id")
    times, opened, clicked, scenes, shown = [], [], [], set(), None
    with _server_with_scene_cache(code, store) as srv:
        pg, _ = open_drawn(b.browser, srv.url, OVERVIEW)
        try:
            for row in range(12):
                if len(times) == max(1, b.repeat):
                    break
                grid = pg.get_by_test_id("stDataFrame").first.bounding_box()  # the worst-SBU list
                t0 = time.perf_counter()
                pg.mouse.click(grid["x"] + 17, grid["y"] + 35 + 17 + 35 * row)  # the row's selection box
                pg.wait_for_url("**/detail?**", timeout=60_000)
                eid = parse_qs(urlparse(pg.url).query)["ep"][0]
                clicked.append(eid)
                # a frame of another episode than the last one opened (the player names its episode)
                pg.wait_for_function(f"""([s, before]) => {{ const p = ({_PLAYER_IMAGE})(s);
                    return !!p && p.step !== '-1' && p.drawn && p.episode !== before; }}""",
                                     arg=[PLAYER_IFRAME, shown], timeout=300_000)
                took = round(time.perf_counter() - t0, 3)
                shown = pg.evaluate(_PLAYER_IMAGE, PLAYER_IFRAME)["episode"]
                scene = scene_key(load_record(store / eps.at[eid, "trajectory"]))
                if scene not in scenes:  # a scene opened before is not what this measures
                    scenes.add(scene)
                    times.append(took)
                    opened.append(eid)
                _all_frames_in(pg)  # before the next click, as a user watches the episode
                pg.goto(srv.url)  # the Overview again (a page load; the server keeps its scenes and caches)
                wait_drawn(pg, since_ms=0.0, expect=OVERVIEW, need_run=False)
        finally:
            pg.context.close()
    if not times:
        raise NotDrawn("no row of the worst-SBU list opened a scene not opened before")
    return {"value_s": round(statistics.median(times), 3), **summary(times),
            **_by_asset_set(store, clicked, opened, times), "episode_ids": opened,
            "store": str(store),
            "includes": "a click on a row of the Overview's worst unsafe successes, for rows whose scene file was never "
                        "opened or compiled (empty compiled-scene cache, no warm-up) -> the detail page's player shows "
                        "the episode's first frame (page switch in the same session, script run, scene open, render)"}
