#!/usr/bin/env python
"""Dashboard speed in a real headless chromium against a real `streamlit run` server.

    python benchmarks/bench_dashboard.py
        [--only cold,warm,filter,whatif,overview_whatif,ci,frame,frame_next_scene,frame_link_warm,frame_link_shipped,
               frame_link_restart,frame_link_paced,frame_switch,frame_from_list,playback,player,replay_sessions,
               memory,memory_sessions]
        [--baseline REV] [--store DIR] [--episodes 20000] [--repeat 3]

Every measurement is a function in MEASUREMENTS (the first-frame ones, frame*, in
benchmarks/dashboard_frames.py), selected with `--only`, and prints ONE JSON line. "Fully drawn" is defined in `benchmarks/browser_timing.py`: status idle, the
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
- memory_sessions: the server's resident memory on the demo store with 5 browser sessions open
  at once, --repeat rounds of Episodes, What-if (a slider step) and the Overview in each; no
  detail page (the replay's memory is the player's measure).
filter and whatif also report what the server sent and did per interaction (websocket messages
and bytes, and its CPU seconds, medians): figures the machine's load moves little or not at
all, unlike the times on a shared machine.

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
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(1, str(ROOT / "tests"))  # the player helpers the browser tests use (dashboard_helpers)
from browser_timing import Browser, NotDrawn, archive_of, now_ms, remove_tree, wait_drawn  # noqa: E402
from dashboard_bench import (DEMO, EPISODES, OVERVIEW, WHATIF, WITHOUT, dashboard_server, ensure_store,  # noqa: E402
                             cpu_s, hide_modules, messages_since, open_drawn, received, secs, sent_summary,
                             sidebar_click, slider_step, summary)
from dashboard_frames import (frame, frame_from_list, frame_link_paced, frame_link_restart,  # noqa: E402
                              frame_link_shipped, frame_link_warm, frame_next_scene, frame_switch)
from dashboard_player import player, replay_sessions  # noqa: E402

TARGETS_S = {"cold": 5.0, "warm": None, "filter": 0.3, "whatif": 0.3, "overview_whatif": 0.3, "ci": 2.0,
             "frame": 2.0, "frame_next_scene": 2.0, "frame_link_warm": 2.0,
             "frame_link_shipped": 2.0, "frame_link_restart": 2.0, "frame_link_paced": 2.0, "frame_switch": 2.0,
             "frame_from_list": 2.0,
             "playback": None, "memory": None, "memory_sessions": None}

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
        open_drawn(b.browser, srv.url, OVERVIEW)[0].context.close()  # the server's first session loads the store
        times = []
        for _ in range(b.repeat):
            pg, t = open_drawn(b.browser, srv.url, OVERVIEW)
            times.append(t)
            pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times),
            "includes": "new browser session: page load, websocket, script run, Overview fully drawn"}


def filter_change(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = open_drawn(b.browser, f"{srv.url}/episodes", EPISODES)
        times, sent = [], []
        models = ["policy-a", "policy-b", "policy-c", "policy-d"][: max(2, b.repeat + 1)]
        for m in models:
            box = pg.get_by_test_id("stMultiSelect").filter(has_text="Model").locator("input")
            box.click()
            box.fill(m)
            n0, c0 = len(received(pg)), cpu_s(srv.proc.pid)
            t0 = now_ms(pg)
            box.press("Enter")
            times.append(secs(wait_drawn(pg, since_ms=t0, expect=EPISODES)["drawn_ms"] - t0))
            sent.append((*messages_since(pg, n0), cpu_s(srv.proc.pid) - c0))
            pg.keyboard.press("Escape")
        pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times), **sent_summary(sent),
            "includes": "Enter in the Model multiselect -> re-filtered table and counts drawn"}


def whatif(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = open_drawn(b.browser, f"{srv.url}/whatif", WHATIF)
        sent: list = []
        times = [slider_step(pg, "Contact force", sent=sent, pid=srv.proc.pid) for _ in range(max(3, b.repeat + 1))]
        pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times), **sent_summary(sent),
            "includes": "one keyboard step of the contact-force slider -> What-if page drawn"}


def overview_whatif(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = open_drawn(b.browser, f"{srv.url}/whatif", WHATIF)
        times, slider = [], []
        for _ in range(max(3, b.repeat + 1)):
            slider.append(slider_step(pg, "Contact force", "ArrowLeft"))
            times.append(sidebar_click(pg, "Overview", OVERVIEW))
            sidebar_click(pg, "What-if", WHATIF)
        pg.context.close()
    return {"value_s": round(statistics.median(times), 3), **summary(times),
            "slider_s": [round(x, 3) for x in slider],
            "includes": "sidebar click -> Overview re-scored under thresholds not seen before, fully drawn"}


def ci(b: "Bench", code: Path) -> dict:
    with b.server(code) as srv:
        pg, _ = open_drawn(b.browser, srv.url, OVERVIEW)
        button = pg.get_by_role("button", name="Compute VSI bootstrap CIs")
        t0 = now_ms(pg)
        button.click()
        p = wait_drawn(pg, since_ms=t0, expect=OVERVIEW)
        shown = pg.get_by_test_id("stDataFrame").nth(1).inner_text()
        pg.context.close()
    out = {"value_s": secs(p["drawn_ms"] - t0), "includes": "button click -> main table with VSI CIs drawn"}
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
        pg, _ = open_drawn(b.browser, f"{srv.url}/whatif", WHATIF)
        rss = [_rss_mb(srv.proc.pid)]
        for i in range(rounds):
            slider_step(pg, "Contact force", "ArrowLeft" if (i // 10) % 2 == 0 else "ArrowRight")
            sidebar_click(pg, "Overview", OVERVIEW)
            sidebar_click(pg, "Episodes", EPISODES)
            sidebar_click(pg, "What-if", WHATIF)
            if i % 5 == 4:
                rss.append(_rss_mb(srv.proc.pid))
        pg.context.close()
    return {"value_s": None, "rss_mb": rss, "interactions": 4 * rounds,
            "growth_second_half_mb": rss[-1] - rss[len(rss) // 2],
            "includes": "VmRSS of the streamlit process: after the What-if page's first load, then every 5 rounds "
                        "of (what-if step, Overview, Episodes, What-if)"}


SESSIONS = 5


def memory_sessions(b: "Bench", code: Path) -> dict:
    """The server's resident memory with SESSIONS concurrent browser sessions on the demo store,
    the replay left out (no detail page): each session opens Episodes, What-if (one slider step)
    and the Overview, round after round, all sessions open at once; VmRSS after the first page,
    after each round, and 20 s after the sessions closed."""
    # no background warm-up: it opens the worst episodes' scenes (MuJoCo), the player's memory
    with dashboard_server(code, b.demo, env={"SAFEVLA_NO_PREWARM": "1"}) as srv:
        srv.wait_healthy()
        rss = {"started": _rss_mb(srv.proc.pid)}
        pages = [open_drawn(b.browser, f"{srv.url}/", OVERVIEW)[0] for _ in range(SESSIONS)]
        rss["sessions_open"] = _rss_mb(srv.proc.pid)
        rounds, missed = [], []
        for r in range(b.repeat):
            for k, pg in enumerate(pages):
                for what, step in (("Episodes", lambda: sidebar_click(pg, "Episodes", EPISODES)),
                                   ("What-if", lambda: sidebar_click(pg, "What-if", WHATIF)),
                                   ("slider", lambda: slider_step(pg, "Contact force", "ArrowLeft" if r % 2 else
                                                                  "ArrowRight")),
                                   ("Overview", lambda: sidebar_click(pg, "Overview", OVERVIEW))):
                    try:
                        step()
                    except NotDrawn as exc:  # memory is the measure: a step the page missed is named
                        missed.append(f"round {r} session {k} {what}: {str(exc)[:80]}")
            rounds.append(_rss_mb(srv.proc.pid))
        for pg in pages:
            pg.context.close()
        time.sleep(20)
        rss["rounds"] = rounds
        rss["idle_after_close"] = _rss_mb(srv.proc.pid)
    return {"value_s": None, "sessions": SESSIONS, "rss_mb": rss, "peak_mb": max(rounds + [rss["sessions_open"]]),
            "steps_not_drawn": missed,
            "includes": f"VmRSS of the streamlit process, demo store, {SESSIONS} sessions open at once, each round "
                        "Episodes, What-if + a slider step, Overview; no detail page and no warm-up "
                        "(SAFEVLA_NO_PREWARM: no replay)"}


MEASUREMENTS = {"cold": cold, "warm": warm, "filter": filter_change, "whatif": whatif,
                "overview_whatif": overview_whatif, "ci": ci, "frame": frame, "frame_next_scene": frame_next_scene,
                "frame_link_warm": frame_link_warm, "frame_link_shipped": frame_link_shipped,
                "frame_link_restart": frame_link_restart, "frame_link_paced": frame_link_paced,
                "frame_switch": frame_switch, "frame_from_list": frame_from_list, "playback": playback,
                "player": player, "replay_sessions": replay_sessions,
                "memory": memory, "memory_sessions": memory_sessions}
BASELINE_OK = ("cold", "warm", "filter", "whatif", "overview_whatif", "ci", "frame", "frame_next_scene",
               "frame_link_warm", "frame_link_shipped", "frame_link_restart", "frame_link_paced", "frame_switch",
               "frame_from_list", "player", "replay_sessions")


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
                                                                      "median_seen_asset_set_s",
                                                                      "messages_per_interaction",
                                                                      "bytes_per_interaction",
                                                                      "server_cpu_s_per_interaction") if k in ref})
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
        for stubs in WITHOUT.values():
            remove_tree(stubs)
    return status


if __name__ == "__main__":
    sys.exit(main())
