#!/usr/bin/env python
"""Dashboard speed in a real headless chromium against a real `streamlit run` server.

    python benchmarks/bench_dashboard.py
        [--only cold,warm,filter,whatif,overview_whatif,ci,frame,frame_next_scene,frame_link_warm,frame_link_shipped,
               frame_link_restart,frame_link_paced,frame_switch,frame_from_list,playback,memory]
        [--baseline REV] [--store DIR] [--episodes 20000] [--repeat 3]

Every measurement is a function in MEASUREMENTS, selected with `--only`, and prints ONE
JSON line. "Fully drawn" is defined in `benchmarks/browser_timing.py`: status idle, the
page's tables/metrics/chart canvases present, then no DOM change for 0.6 s; the time is
the last DOM change. Interactions are timed from the browser event (key press, click) to
that moment, with the browser's own clock.

- cold: `streamlit run` launched -> Overview of the 20k store fully drawn (the browser
  navigates as soon as the server answers its health check). Also split: server up, page.
- warm: a new session (fresh browser context) loading the Overview on a running server.
- filter: Episodes page, one Model choice typed into the multiselect (Enter -> drawn).
- whatif: What-if page, the contact-force slider moved one step by the keyboard.
- overview_whatif: after each slider move, the Overview opened from the sidebar with the
  new thresholds in effect (click -> drawn): re-scored tables and charts never seen before.
- ci: the Overview's "Compute VSI bootstrap CIs" button on the 20k store (click -> drawn),
  and the same computation in-process against scipy.stats.bootstrap per cell (ratio).
- frame: the detail page of the demo store's worst SBU episode on a fresh server with an
  empty compiled-scene cache and no background warm-up (navigation -> the player's first
  frame drawn).
- frame_next_scene: on such a server, after the user opened one scene, the detail page of
  SBU episodes of other scene files never opened (median of --repeat): what browsing feels
  like after the first episode (MuJoCo keeps the decoded assets the scenes share).
- frame_link_warm: frame_next_scene in a browser that has shown the dashboard before: each
  link opens in a new tab (a new session) of the browser context that opened the first scene,
  so Streamlit's frontend files (~150, fetched from the dashboard's own Python server) come
  from the HTTP cache, as for a user who opens a shared link in the browser they use.
- frame_link_shipped: frame_next_scene on a server as `safevla dashboard` runs from its second
  start on: the scenes are in the compiled-scene cache on disk (written before the server starts
  by a process of the same code, as an earlier dashboard run leaves them) and the background
  warm-up is on. The strict measures above start from nothing; this is the everyday case.
- frame_link_restart: the first link opened on a freshly started server, as a returning user
  opens one: the scene in the compiled-scene cache on disk (an earlier process), the warm-up
  on, the link opened RESTART_PAUSE_S (2 s) after the server first answers; a server per
  sample (median of --repeat).
- frame_link_paced: frame_next_scene as a reader opens links: each page stays open 15 s after
  its first frame (its frames pre-render, then the server's background work runs, such as
  writing compiled scenes to the disk cache) before it closes and the next link opens.
- frame_switch: on a server as for frame_next_scene, the detail page of one scene open in the
  browser, then the page's own episode picker set to SBU episodes of other scene files never opened
  (Enter -> the player shows the new episode's first frame; median of --repeat): browsing
  episode after episode without leaving the page.
- frame_from_list: on a server as for frame_next_scene, a click on a row of the Overview's
  worst unsafe successes (the page switches to the episode's detail page, same session), for
  rows of scene files never opened (median of --repeat): how a user finds and opens an unsafe
  success.
  frame_next_scene, frame_link_* and these two split their samples by asset set
  (`new_asset_set`, per sample; and the medians of each kind): a scene file whose assets
  (textures, meshes: what its GL context holds) no episode opened before it had uploads a new
  context, one of a task seen before shares that task's.
- playback: the in-browser player on the demo store: first playable frame on a fresh server,
  all frames pre-rendered, and the frame rate the browser displays at 1x (`--timeline` alone
  runs just this).
- memory: the server's resident memory over 10 x --repeat rounds of a what-if step and three
  page switches (does anything build up between runs?).

`--baseline REV` runs cold/warm/filter/whatif/overview_whatif/ci/frame/frame_next_scene/frame_link_warm/
frame_switch/frame_from_list a second time against a server started from `git archive REV` in the same run, and reports
`ratio` = baseline/now (and the baseline's samples and asset-set medians, `baseline_*`).
`--baseline-without uvloop,httptools` starts the baseline's servers with those modules
unimportable, as the baseline revision's own pyproject installed it (both came with 12656ae).
Servers run `dashboard/server.py` where the checkout has it (what `safevla dashboard` runs),
else `dashboard/app.py`.
The synthetic store (manifest `synthetic: true`) is built once with
scripts/make_synthetic_store.py and reused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(1, str(ROOT / "tests"))  # the player helpers the browser tests use (dashboard_helpers)
from browser_timing import Browser, NotDrawn, Server, archive_of, dashboard_entry, now_ms, remove_tree, wait_drawn  # noqa: E402

DEMO = ROOT / "assets" / "demo" / "store"
TARGETS_S = {"cold": 5.0, "warm": None, "filter": 0.3, "whatif": 0.3, "overview_whatif": 0.3, "ci": 2.0,
             "frame": 2.0, "frame_next_scene": 2.0, "frame_link_warm": 2.0,
             "frame_link_shipped": 2.0, "frame_link_restart": 2.0, "frame_link_paced": 2.0, "frame_switch": 2.0,
             "frame_from_list": 2.0,
             "playback": None, "memory": None}
# what "fully drawn" waits for on each page (selector -> least count)
OVERVIEW = {'[data-testid="stMetric"]': 6, '[data-testid="stDataFrame"]': 2,
            '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg': 3}
EPISODES = {'[data-testid="stDataFrame"]': 1, '[data-testid="stMultiSelect"]': 5}
WHATIF = {'[data-testid="stMetric"]': 5, '[data-testid="stDataFrame"]': 1,
          '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg': 1}
PLAYER_IFRAME = 'iframe[title*="safevla_timeline"]'  # the detail page's frame is the player's


def ensure_store(path: Path, n: int, *, renderable: bool = False, n_steps: int = 100, contacts: int = 4) -> Path:
    man = path / "manifest.json"
    if man.exists():
        m = json.loads(man.read_text())
        if m.get("n_episodes") == n and m.get("synthetic"):
            return path
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("make_synthetic_store", ROOT / "scripts" / "make_synthetic_store.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shutil.rmtree(path, ignore_errors=True)
    mod.build_store(path, n, n_steps=n_steps, contacts_per_step=contacts, renderable=renderable, workers=1)
    return path


def _s(ms: float) -> float:
    return round(ms / 1000.0, 3)


_WITHOUT: dict[Path, Path] = {}  # checkout -> a folder whose stub packages its servers cannot import


def hide_modules(code: Path, modules: list[str]) -> None:
    """Servers of the checkout `code` start with `modules` unimportable (ModuleNotFoundError,
    which Streamlit and uvicorn take as "not installed"): a `--baseline` revision measured with
    the dependencies its own pyproject installed, not ones added since (`--baseline-without`)."""
    stubs = Path(tempfile.mkdtemp(prefix="safevla-bench-without-"))
    for name in modules:
        (stubs / name).mkdir()
        (stubs / name / "__init__.py").write_text(f"raise ModuleNotFoundError({name!r} + ' is hidden from this server')\n")
    _WITHOUT[Path(code)] = stubs


def server_env(code: Path) -> dict:
    """Extra environment for a server of the checkout `code` (see `hide_modules`)."""
    stubs = _WITHOUT.get(Path(code))
    if stubs is None:
        return {}
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(stubs), os.environ.get("PYTHONPATH", "")) if p)}


def dashboard_server(code: Path, store: Path, env: dict | None = None) -> Server:
    """`streamlit run` of the checkout `code`'s dashboard (`dashboard_entry`) on `store`, with
    `server_env(code)` and then `env`."""
    return Server(dashboard_entry(code), store=store, cwd=code, env={**server_env(code), **(env or {})})


def _summary(values_s: list[float]) -> dict:
    return {"median_s": round(statistics.median(values_s), 3), "max_s": round(max(values_s), 3),
            "all_s": [round(v, 3) for v in values_s]}


def _open(browser, url: str, expect: dict) -> tuple[object, float]:
    """A new session on `url`; (page, seconds from navigation start to fully drawn)."""
    pg = browser.page()
    pg.goto(url)
    p = wait_drawn(pg, since_ms=0.0, expect=expect, need_run=False)
    return pg, _s(p["drawn_ms"])


def _sidebar_click(pg, title: str, expect: dict) -> float:
    link = pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True)
    t0 = now_ms(pg)
    link.click()
    return _s(wait_drawn(pg, since_ms=t0, expect=expect)["drawn_ms"] - t0)


def _slider_step(pg, label: str, key: str = "ArrowRight") -> float:
    thumb = pg.get_by_test_id("stSlider").filter(has_text=label).get_by_role("slider")
    thumb.focus()
    t0 = now_ms(pg)
    thumb.press(key)
    return _s(wait_drawn(pg, since_ms=t0, expect=WHATIF)["drawn_ms"] - t0)


# ----------------------------------------------------------------------------- measurements

def cold(b: "Bench", code: Path) -> dict:
    runs = []
    for _ in range(b.repeat):
        with dashboard_server(code, b.store) as srv:
            up = srv.wait_healthy()
            pg = b.browser.page()
            pg.goto(srv.url)
            p = wait_drawn(pg, since_ms=0.0, expect=OVERVIEW, need_run=False)
            drawn = (p["origin"] + p["drawn_ms"]) / 1000.0
            runs.append({"total": drawn - srv.launched, "server_up": up - srv.launched,
                         "page": drawn - p["origin"] / 1000.0})
            pg.context.close()
    mid = sorted(runs, key=lambda r: r["total"])[len(runs) // 2]
    return {"value_s": round(mid["total"], 3), "server_up_s": round(mid["server_up"], 3),
            "page_s": round(mid["page"], 3), "all_s": [round(r["total"], 3) for r in runs],
            "includes": "process start, imports, store load and what-if index, first page drawn in chromium"}


def warm(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        _open(b.browser, srv.url, OVERVIEW)[0].context.close()  # the server's first session loads the store
        times = []
        for _ in range(b.repeat):
            pg, t = _open(b.browser, srv.url, OVERVIEW)
            times.append(t)
            pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **_summary(times),
            "includes": "new browser session: page load, websocket, script run, Overview fully drawn"}


def filter_change(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = _open(b.browser, f"{srv.url}/episodes", EPISODES)
        times = []
        models = ["policy-a", "policy-b", "policy-c", "policy-d"][: max(2, b.repeat + 1)]
        for m in models:
            box = pg.get_by_test_id("stMultiSelect").filter(has_text="Model").locator("input")
            box.click()
            box.fill(m)
            t0 = now_ms(pg)
            box.press("Enter")
            times.append(_s(wait_drawn(pg, since_ms=t0, expect=EPISODES)["drawn_ms"] - t0))
            pg.keyboard.press("Escape")
        pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **_summary(times),
            "includes": "Enter in the Model multiselect -> re-filtered table and counts drawn"}


def whatif(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = _open(b.browser, f"{srv.url}/whatif", WHATIF)
        times = [_slider_step(pg, "Contact force") for _ in range(max(3, b.repeat + 1))]
        pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **_summary(times),
            "includes": "one keyboard step of the contact-force slider -> What-if page drawn"}


def overview_whatif(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = _open(b.browser, f"{srv.url}/whatif", WHATIF)
        times, slider = [], []
        for _ in range(max(3, b.repeat + 1)):
            slider.append(_slider_step(pg, "Contact force", "ArrowLeft"))
            times.append(_sidebar_click(pg, "Overview", OVERVIEW))
            _sidebar_click(pg, "What-if", WHATIF)
        pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **_summary(times),
            "slider_s": [round(x, 3) for x in slider],
            "includes": "sidebar click -> Overview re-scored under thresholds not seen before, fully drawn"}


def ci(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = _open(b.browser, srv.url, OVERVIEW)
        button = pg.get_by_role("button", name="Compute VSI bootstrap CIs")
        t0 = now_ms(pg)
        button.click()
        p = wait_drawn(pg, since_ms=t0, expect=OVERVIEW)
        shown = pg.get_by_test_id("stDataFrame").nth(1).inner_text()
        pg.context.close()
    out = {"value_s": _s(p["drawn_ms"] - t0), "includes": "button click -> main table with VSI CIs drawn"}
    if code == ROOT:
        out.update(ci_in_process(b.store))
    return out


def ci_in_process(store: Path) -> dict:
    """The 16-cell main table's VSI and VSI|U CIs: `aggregate(ci=True)` against one
    scipy.stats.bootstrap per cell (the code before 623330f), same process, same data."""
    import numpy as np
    import pandas as pd
    from scipy import stats

    from scoring.stats.metrics import aggregate, unsettled_mask

    eps = pd.read_parquet(store / "episodes.parquet")
    eps = eps[~unsettled_mask(eps)]
    t0 = time.perf_counter()
    agg = aggregate(eps, by=("model", "suite"), ci=True)
    fast = time.perf_counter() - t0

    def scipy_ci(x):
        if x.size < 2 or np.all(x == x[0]):
            return (float(x.mean()),) * 2 if x.size else (np.nan, np.nan)
        r = stats.bootstrap((x,), np.mean, n_resamples=10_000, method="percentile", vectorized=True,
                            rng=np.random.default_rng(0))
        return float(r.confidence_interval.low), float(r.confidence_interval.high)

    t0 = time.perf_counter()
    ref = []
    for _, g in eps.groupby(["model", "suite"], sort=True):
        v = g["vsi"].to_numpy(float)
        ref.append((*scipy_ci(v), *scipy_ci(v[~g["safe"].to_numpy(bool)])))
    slow = time.perf_counter() - t0
    same = ref == list(zip(agg["vsi_lo"], agg["vsi_hi"], agg["vsi_u_lo"], agg["vsi_u_hi"]))
    return {"in_process_s": round(fast, 3), "in_process_scipy_per_cell_s": round(slow, 3),
            "in_process_ratio": round(slow / fast, 2), "identical_to_scipy": same, "cells": len(agg)}


def _first_frame(browser, url: str, *, keep: bool = False, tab_of=None):
    """Seconds from navigating a new browser session to `url` until the player shows its first
    frame; with `keep`, {"value_s", "page"} and the page is left open for the caller to close.
    The session is a new browser context (empty HTTP cache), or with `tab_of` a new tab of that
    context (its HTTP cache holds what the context loaded before)."""
    pg = browser.page() if tab_of is None else tab_of.new_page()
    close = pg.context.close if tab_of is None else pg.close
    try:
        t0 = time.perf_counter()
        pg.goto(url)
        pg.wait_for_function("""(s) => { const f = document.querySelector(s); const d = f && f.contentDocument;
            const img = d && d.querySelector('#frame');
            return !!img && img.dataset.step !== '-1' && img.complete && img.naturalWidth > 0; }""",
                             arg=PLAYER_IFRAME, timeout=300_000)
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
        _open(b.browser, srv.url, OVERVIEW)[0].context.close()  # server warm, no scene opened
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
    return {"value_s": round(statistics.median(times), 3), **_summary(times), "first_scene_s": before["value_s"],
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
    return {"value_s": round(statistics.median(times), 3), **_summary(times), "episode_ids": eids,
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
    return {"value_s": round(statistics.median(times), 3), **_summary(times),
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
    return {"value_s": round(statistics.median(times), 3), **_summary(times), "first_scene_s": before["value_s"],
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
        pg, _ = _open(b.browser, srv.url, OVERVIEW)
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
    return {"value_s": round(statistics.median(times), 3), **_summary(times),
            **_by_asset_set(store, clicked, opened, times), "episode_ids": opened,
            "store": str(store),
            "includes": "a click on a row of the Overview's worst unsafe successes, for rows whose scene file was never "
                        "opened or compiled (empty compiled-scene cache, no warm-up) -> the detail page's player shows "
                        "the episode's first frame (page switch in the same session, script run, scene open, render)"}


# ----------------------------------------------------------------------------- timeline

def measure_timeline_playback(store: Path, browser: "Browser", *, play_s: float = 3.0) -> dict:
    """Against a fresh `streamlit run` server, in `browser` (a new context): open the first SBU
    episode's detail page and time (a) goto -> the player shows its first pre-rendered frame
    (page load, script run, component + vega bundle load, scene open and first render), (b)
    -> every frame pre-rendered, then (c) play `play_s` seconds with all frames in and report
    the frame rate the browser displayed (img load events per second) against the nominal
    1/dt."""
    from urllib.parse import urlencode

    import pandas as pd
    from dashboard_helpers import timeline_attr as attr, wait_timeline as wait

    eps = pd.read_parquet(store / "episodes.parquet")
    ep = eps[eps["sbu"]].iloc[0] if eps["sbu"].any() else eps.iloc[0]

    with dashboard_server(ROOT, store) as srv:
        srv.wait_healthy()
        page = browser.page()
        n = int(ep["n_steps"])
        t0 = time.perf_counter()
        page.goto(f"{srv.url}/detail?" + urlencode({"ep": ep["episode_id"]}))
        wait(page, "img.dataset.step !== '-1' && img.complete", 180)
        first = time.perf_counter() - t0
        frames_at_first = int(attr(page, "data-frames"))
        wait(page, f"r.dataset.frames === '{n}'", 600)
        all_in = time.perf_counter() - t0
        time.sleep(1.5)  # the page's last rerun (pre-rendering over) settles
        page.locator("h1").first.click()
        page.keyboard.press("Home")
        time.sleep(0.5)
        page.keyboard.press("Space")
        t_play = time.perf_counter()
        wait(page, "r.dataset.playing === '1'", 10)
        s0 = int(attr(page, "data-step"))
        time.sleep(play_s)
        s1 = int(attr(page, "data-step"))
        fps = float(attr(page, "data-fps") or 0)
        elapsed = time.perf_counter() - t_play
        page.keyboard.press("Space")
        page.context.close()
    dt = float(ep.get("dt", 0.05) or 0.05)
    return {"timeline_episode": ep["episode_id"], "timeline_steps": n,
            "timeline_first_frame_s": round(first, 2), "timeline_frames_at_first": frames_at_first,
            "timeline_all_frames_s": round(all_in, 2),
            "timeline_prerender_fps": round((n - frames_at_first) / max(all_in - first, 1e-6), 2),
            "playback_fps": round(fps, 1), "playback_steps_per_s": round((s1 - s0) / elapsed, 1),
            "playback_nominal_fps": round(1 / dt, 1)}


def playback(b: "Bench", code: Path) -> dict:
    """The in-browser player on the demo store's first SBU episode:
    first playable frame, all frames pre-rendered, displayed frame rate at 1x."""
    got = measure_timeline_playback(b.demo, b.browser)
    return {"value_s": got["timeline_first_frame_s"], **got,
            "includes": "fresh server, goto detail -> the player shows its first pre-rendered frame "
                        "(page load, script run, player and vega bundle, scene open, first render); "
                        "then the displayed fps at 1x with every frame in"}


def _rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))


def memory(b: "Bench", code: Path) -> dict:
    """The server's resident memory over 10 x --repeat rounds of a what-if slider step and
    three page switches (Overview, Episodes, What-if), read every 5 rounds: does it build up?"""
    rounds = 10 * b.repeat
    with b.server(code) as srv:
        pg, _ = _open(b.browser, f"{srv.url}/whatif", WHATIF)
        rss = [_rss_mb(srv.proc.pid)]
        for i in range(rounds):
            _slider_step(pg, "Contact force", "ArrowLeft" if (i // 10) % 2 == 0 else "ArrowRight")
            _sidebar_click(pg, "Overview", OVERVIEW)
            _sidebar_click(pg, "Episodes", EPISODES)
            _sidebar_click(pg, "What-if", WHATIF)
            if i % 5 == 4:
                rss.append(_rss_mb(srv.proc.pid))
        pg.context.close()
    return {"value_s": None, "rss_mb": rss, "interactions": 4 * rounds,
            "growth_second_half_mb": rss[-1] - rss[len(rss) // 2],
            "includes": "VmRSS of the streamlit process: after the What-if page's first load, then every 5 rounds "
                        "of (what-if step, Overview, Episodes, What-if)"}


MEASUREMENTS = {"cold": cold, "warm": warm, "filter": filter_change, "whatif": whatif,
                "overview_whatif": overview_whatif, "ci": ci, "frame": frame, "frame_next_scene": frame_next_scene,
                "frame_link_warm": frame_link_warm, "frame_link_shipped": frame_link_shipped,
                "frame_link_restart": frame_link_restart, "frame_link_paced": frame_link_paced,
                "frame_switch": frame_switch, "frame_from_list": frame_from_list, "playback": playback,
                "memory": memory}
BASELINE_OK = ("cold", "warm", "filter", "whatif", "overview_whatif", "ci", "frame", "frame_next_scene",
               "frame_link_warm", "frame_link_shipped", "frame_link_restart", "frame_link_paced", "frame_switch",
               "frame_from_list")


class Bench:
    def __init__(self, args, browser):
        self.store = ensure_store(Path(args.store), args.episodes)
        self.demo = Path(args.demo) if args.demo else (DEMO if (DEMO / "manifest.json").exists() else ensure_store(
            Path("/tmp/safevla_bench_dashboard_render"), 64, renderable=True, n_steps=120, contacts=8))
        self.repeat = args.repeat
        self.browser = browser

    @contextlib.contextmanager
    def server(self, code: Path):
        """A running server of `code` on the scale store, once it answers its health check."""
        with dashboard_server(code, self.store) as srv:
            srv.wait_healthy()
            yield srv


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(MEASUREMENTS), help=f"comma-separated of {', '.join(MEASUREMENTS)}")
    p.add_argument("--baseline", default=None, help="git revision to measure against in the same run")
    p.add_argument("--baseline-without", default="", metavar="MODULES",
                   help="comma-separated modules the baseline's servers cannot import: dependencies added since "
                        "the baseline revision (e.g. uvloop,httptools), so it runs as its own pyproject installed it")
    p.add_argument("--store", default="/tmp/safevla_bench_dashboard_20k", help="scale store (built if missing)")
    p.add_argument("--episodes", type=int, default=20_000)
    p.add_argument("--demo", default=None, help="store for the replay frame (default: assets/demo/store)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeline", action="store_true", help="only the timeline player (same as --only playback)")
    args = p.parse_args(argv)
    if args.timeline:
        args.only = "playback"
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in MEASUREMENTS]
    if unknown:
        p.error(f"unknown measurement(s) {', '.join(unknown)}; valid: {', '.join(MEASUREMENTS)}")
    base = archive_of(args.baseline, ROOT) if args.baseline else None
    if base is not None and args.baseline_without:
        hide_modules(base, [m.strip() for m in args.baseline_without.split(",") if m.strip()])
    status = 0
    try:
        with Browser() as browser:
            bench = Bench(args, browser)
            for name in names:
                load = round(os.getloadavg()[0], 2)
                out = {"benchmark": "dashboard", "measure": name, "episodes": args.episodes, "load_avg_1m": load}
                try:
                    out.update(MEASUREMENTS[name](bench, ROOT))
                    if base is not None and name in BASELINE_OK:
                        ref = MEASUREMENTS[name](bench, base)
                        out["baseline"] = args.baseline
                        out["baseline_s"] = ref["value_s"]
                        out.update({f"baseline_{k}": ref[k] for k in ("all_s", "median_new_asset_set_s",
                                                                      "median_seen_asset_set_s") if k in ref})
                        out["ratio"] = round(ref["value_s"] / out["value_s"], 2) if out["value_s"] else None
                except NotDrawn as exc:
                    out["error"] = str(exc)
                    status = 1
                target = TARGETS_S.get(name)
                if target is not None and out.get("value_s") is not None:
                    out["target_s"], out["target_met"] = target, out["value_s"] < target
                print(json.dumps(out), flush=True)
    finally:
        if base is not None:
            remove_tree(base)
        for stubs in _WITHOUT.values():
            remove_tree(stubs)
    return status


if __name__ == "__main__":
    sys.exit(main())
