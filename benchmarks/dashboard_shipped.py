"""The player's measurements on servers as `safevla dashboard` runs them, with the start-up
warm-up (`dashboard.link_open.warm_server`), for benchmarks/dashboard_player.py's command:

- list_click: the Overview's worst-SBU list, its first row clicked after a few seconds of
  reading: seconds from the click to the episode's first picture.
- link_converted: a link to a never-opened scene once the warm-up is done: seconds to the
  first picture, its web scene converted on the way.
- link_on_disk: the same in a restarted server, for another episode of a scene an earlier
  server converted (its web scene on disk): seconds to the first picture.
- next_shipped: the player measure's n in the page (`dashboard_player.next_in_page`), with a
  longer watch of each episode: ms from the key to the next episode's first picture.

Each round a fresh server with empty caches (`dashboard_player.fresh_caches`), pages navigated
once the new window has settled (`dashboard_frames.WINDOW_SETTLE_S`).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from dashboard_bench import PLAYER_IFRAME, dashboard_server, summary
from dashboard_frames import WINDOW_SETTLE_S, _DRAWN, _first_frame, _sbu_by_scene
from dashboard_player import _same_scene_episode, first_draw_breakdown, fresh_caches, next_in_page


READ_S = 4.0  # the Overview drawn, the user reads its list before choosing a row


def list_click(b, code: Path, rounds: int = 3) -> dict:
    """The Overview's worst-SBU list, its first row clicked: seconds from the click to the
    episode's first picture. Each round a fresh server with empty caches, as shipped (with its
    warm-up: what `safevla dashboard` runs), the Overview navigated once the new window settled,
    then `READ_S` of reading; with how many web scenes were on disk at each click."""
    from browser_timing import wait_drawn
    from dashboard_bench import OVERVIEW

    store, times, found = b.demo, [], []
    for _ in range(rounds):
        with fresh_caches() as env:
            env = _as_shipped(env)
            with dashboard_server(code, store, env) as srv:
                srv.wait_healthy()
                pg = b.browser.page()
                try:
                    time.sleep(WINDOW_SETTLE_S)
                    pg.goto(srv.url)
                    wait_drawn(pg, since_ms=0.0, expect=OVERVIEW, need_run=False)
                    time.sleep(READ_S)
                    found.append(len(list(Path(env["XDG_CACHE_HOME"]).glob("safevla/player/*/web/scene-*.bin"))))
                    grid = pg.get_by_test_id("stDataFrame").first.bounding_box()  # the worst-SBU list
                    t0 = time.perf_counter()
                    pg.mouse.click(grid["x"] + 17, grid["y"] + 35 + 17)  # the first row's selection box
                    pg.wait_for_url("**/detail?**", timeout=60_000)
                    pg.wait_for_function(_DRAWN, arg=PLAYER_IFRAME, timeout=300_000)
                    times.append(round(time.perf_counter() - t0, 3))
                finally:
                    pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times), "scenes_on_disk_at_click": found,
            "read_s": READ_S, "includes": "fresh server with empty caches and its warm-up, the Overview drawn, "
            f"{READ_S:g} s of reading, a click on the worst-SBU list's first row -> its first picture drawn"}


WARM_UP_WAIT_S = 8.0  # link_converted, link_on_disk: the server's start-up warm-up is done by then


def _as_shipped(env: dict) -> dict:
    return {k: v for k, v in env.items() if k != "SAFEVLA_NO_PREWARM"}


def _unwarmed_episode(store: Path) -> tuple[str, str]:
    """The worst SBU episode whose scene is not the one whose assets the warm-up loads
    (`link_open.first_replayable_episode`), and the warm-up's episode."""
    from dashboard.link_open import first_replayable_episode, linked_record
    from dashboard.web_files import scene_name

    warmed, warmed_record = first_replayable_episode(str(store))
    return next(e for e in _sbu_by_scene(store, 8)
                if scene_name(linked_record(e, str(store))) != scene_name(warmed_record)), warmed


def _first_picture_taken_apart(b, url: str) -> tuple[float, dict]:
    """Seconds from navigating to `url` in a new session, from a settled window, to the player's
    first picture, and where they went (`first_draw_breakdown`)."""
    got = _first_frame(b.browser, url, keep=True, window="open")
    try:
        return got["value_s"], first_draw_breakdown(got["page"])
    finally:
        got["page"].context.close()


def link_converted(b, code: Path, rounds: int = 3) -> dict:
    """A link to a never-opened scene on a server that has been up a while: each round a fresh
    server with empty caches, the link navigated `WARM_UP_WAIT_S` after the server answers, from
    a settled window; seconds to the episode's first picture, its web scene converted on the way,
    and where each went (`first_draw_breakdown`)."""
    eid, warmed = _unwarmed_episode(b.demo)
    times, breakdowns = [], []
    for _ in range(rounds):
        with fresh_caches() as env, dashboard_server(code, b.demo, _as_shipped(env)) as srv:
            srv.wait_healthy()
            time.sleep(WARM_UP_WAIT_S)
            took, breakdown = _first_picture_taken_apart(b, f"{srv.url}/detail?ep={eid}")
            times.append(took)
            breakdowns.append(breakdown)
    return {"value_s": round(statistics.median(times), 3), **summary(times), "breakdowns_ms": breakdowns,
            "episode": eid, "warm_up_scene_of": warmed, "includes": f"fresh server with empty caches and its warm-up, "
            f"{WARM_UP_WAIT_S:g} s after it answers a link to a scene never opened (not the warm-up's), navigated "
            "from a settled window -> its first picture drawn, the web scene converted on the way"}


WATCH_S = 5.0  # link_on_disk: the earlier server's page stays open this long before it stops


def link_on_disk(b, code: Path, rounds: int = 3) -> dict:
    """A link to an episode of a scene an earlier server converted: each round a fresh server
    with empty caches opens one episode of the scene (its web scene to disk, as an earlier run
    leaves it; not timed), its page open `WATCH_S`, and stops; a restarted server, `WARM_UP_WAIT_S` after it answers, is
    sent a link to another episode of that scene, from a settled window: seconds to its first
    picture (its poses made on the way), and where each went (`first_draw_breakdown`)."""
    eid, warmed = _unwarmed_episode(b.demo)
    other, times, breakdowns = _same_scene_episode(b.demo, eid), [], []
    for _ in range(rounds):
        with fresh_caches() as env:
            with dashboard_server(code, b.demo, _as_shipped(env)) as srv:
                srv.wait_healthy()
                page = _first_frame(b.browser, f"{srv.url}/detail?ep={eid}", keep=True)["page"]
                time.sleep(WATCH_S)  # the user watches the episode, then ends the dashboard
                page.context.close()
            with dashboard_server(code, b.demo, _as_shipped(env)) as srv:
                srv.wait_healthy()
                time.sleep(WARM_UP_WAIT_S)
                took, breakdown = _first_picture_taken_apart(b, f"{srv.url}/detail?ep={other}")
                times.append(took)
                breakdowns.append(breakdown)
    return {"value_s": round(statistics.median(times), 3), **summary(times), "breakdowns_ms": breakdowns,
            "episode": other, "converted_by_opening": eid, "warm_up_scene_of": warmed,
            "includes": f"a restarted server with its warm-up, {WARM_UP_WAIT_S:g} s after it answers a link to an "
            f"episode whose scene an earlier server converted ({WATCH_S:g} s on its page; not the warm-up's scene), "
            "navigated from a settled window -> its first picture drawn, its poses made on the way"}


NEXT_DWELL_S = 8.0  # next_shipped: each episode watched this long after its page settled


def next_shipped(b, code: Path) -> dict:
    """The worst SBU episode's page on a fresh server with empty caches, `WARM_UP_WAIT_S` after
    it answers, then n six times, each after the page settled and `NEXT_DWELL_S` of watching."""
    with fresh_caches() as env, dashboard_server(code, b.demo, _as_shipped(env)) as srv:
        srv.wait_healthy()
        time.sleep(WARM_UP_WAIT_S)
        got = next_in_page(b, f"{srv.url}/detail", dwell_s=NEXT_DWELL_S)
    return {"value_s": None, **got, "includes": "fresh server with empty caches and its warm-up, the worst SBU "
            f"episode's page, then n six times, each after the page settled and {NEXT_DWELL_S:g} s of watching: key "
            "-> the next episode's first picture (same scene: its poses fetched; new scene: its web scene too)"}
