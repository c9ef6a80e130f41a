"""The client-side player's measurements for benchmarks/bench_dashboard.py: what a user waits
for with the replay drawn in the browser (WebGL), and what the server holds for it.

- player: on a fresh server with empty caches (its own $XDG_CACHE_HOME and compiled-scene
  cache, no warm-up), seconds from navigation to the first drawn picture of (a) a scene whose
  web scene must first be converted, (b) another episode of that scene in a new session, and,
  on a second fresh server sharing those caches, (c) a scene never opened in that server whose
  web scene is on disk, each with where its time went (`first_draw_breakdown`). Each is navigated
  once the new session's window has settled (`dashboard_frames.WINDOW_SETTLE_S`), as a link opens
  in a running browser; (a) and (c) are also timed navigated as the window is made, which on this
  machine's two cores adds chromium's building of its window's own UI. Then, in that last
  page once it has settled (`settle`: its tables drawn, no request for 1 s), 30 key steps (each
  timed in the page until its pixels can be read back) with the requests they made, and
  playback at 1x, 2x and 4x (steps advanced per second against the recording's rate, pictures
  drawn per second).
  Then, on the worst SBU episode's detail page, n six times (`next_in_page`): key to the next
  episode's first picture, for an episode of a scene the page had drawn and of a new scene.
- replay_sessions: the server's resident memory with 5 sessions at once, each on the detail
  page of a different scene's worst SBU episode, stepping; and the disk the caches hold.
- list_click, link_converted, link_on_disk, next_shipped (this module's own command only; in
  benchmarks/dashboard_shipped.py): on servers as shipped, with their start-up warm-up.
- floor (this module's own command only; in benchmarks/streamlit_floor.py): a bare Streamlit
  app with one component, its frame's first WebGL draw: what any Streamlit page costs here.
- payload (this module's own command only): the web scene of every distinct demo scene, its
  bytes, vertices, textures and conversion time, and one episode's poses each.
Run against a checkout before the WebGL player (`--baseline`), the same steps time its
server frames (the player there shows pre-rendered JPEG frames).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dashboard_bench import PLAYER_IFRAME, dashboard_server
from dashboard_frames import WINDOW_SETTLE_S, _first_frame, _sbu_by_scene, renderer

_ROOT_JS = "document.querySelector('iframe[title*=\"safevla_timeline\"]').contentDocument"

# In the player's iframe: `n` steps by the → key, each timed until its picture can be read back
# (a 1-pixel readPixels waits for the GPU, SwiftShader here); server frames: until the <img> decoded.
STEP_JS = """async ([s, n]) => {
  const d = document.querySelector(s).contentDocument, w = d.defaultView;
  const r = d.querySelector('#timeline'), c = d.querySelector('#gl'), img = d.querySelector('#frame');
  const gl = r.dataset.renderer === 'webgl' ? (c.getContext('webgl2') || c.getContext('webgl')) : null;
  const px = new Uint8Array(4), out = [];
  for (let k = 0; k < n; k++) {
    const want = String(Number(r.dataset.step) + 1);
    const t0 = w.performance.now();
    d.dispatchEvent(new w.KeyboardEvent('keydown', { key: 'ArrowRight', bubbles: true }));
    if (gl) gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, px);
    else {
      while (img.dataset.step !== want) await new Promise((ok) => w.setTimeout(ok, 2));
      await img.decode().catch(() => {});
    }
    out.push(w.performance.now() - t0);
    await new Promise((ok) => w.requestAnimationFrame(ok));
  }
  return out;
}"""


@contextlib.contextmanager
def fresh_caches():
    """A $XDG_CACHE_HOME of its own (the player's web scenes) with vl-convert's vega bundle
    copied in, as scripts/install.sh (in the environment) or a user's earlier run (in ~/.cache)
    leaves it: a baseline from before the install made it looks in the cache folder only. And
    an empty compiled-scene cache; both removed after."""
    from dashboard.player import installed_vega_bundle

    home = Path(tempfile.mkdtemp(prefix="safevla-bench-xdg-"))
    installed = installed_vega_bundle()
    made = (*(Path.home() / ".cache" / "safevla" / "player").glob("vl-convert-*/vega-bundle.js"),
            *([installed] if installed.is_file() else []))
    try:
        for bundle in made:
            dest = home / "safevla" / "player" / bundle.parent.name
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(bundle, dest / bundle.name)
        yield {"XDG_CACHE_HOME": str(home), "SAFEVLA_SCENE_CACHE": str(home / "scenes"), "SAFEVLA_NO_PREWARM": "1"}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _same_scene_episode(store: Path, eid: str, skip: tuple[str, ...] = ()) -> str:
    """Another episode of `eid`'s scene file (the same task), with a trajectory, not in `skip`."""
    import pandas as pd

    from replay.render.scene_models import scene_key
    from scoring.records.io import load_record

    eps = pd.read_parquet(store / "episodes.parquet").set_index("episode_id")
    key = scene_key(load_record(store / eps.at[eid, "trajectory"]))
    for other, row in eps.iterrows():
        if other != eid and other not in skip and isinstance(row["trajectory"], str) \
                and (store / row["trajectory"]).is_file() and scene_key(load_record(store / row["trajectory"])) == key:
            return other
    raise LookupError(f"no other episode of {eid}'s scene")


# The page's rest follows the player's first picture: its value "drawn" reruns the page, which
# then draws the tables (Streamlit fetches its DataFrame code for the first one).
_TABLES_DRAWN = """() => { const app = document.querySelector('[data-testid="stApp"]');
    return !!app && app.dataset.testScriptState === 'notRunning'
        && document.querySelector('[data-testid="stDataFrame"]') !== null; }"""


def settle(pg, requests: list, *, quiet_s: float = 1.0, timeout_s: float = 60.0) -> float:
    """Waits until the page has settled after its first picture: the script not running, the
    tables drawn and no request made for `quiet_s` (`requests`: the page's request log, kept
    by the caller); seconds waited."""
    t0 = time.perf_counter()
    pg.wait_for_function(_TABLES_DRAWN, timeout=timeout_s * 1000)
    seen, quiet_since = len(requests), time.perf_counter()
    while time.perf_counter() - quiet_since < quiet_s and time.perf_counter() - t0 < timeout_s:
        time.sleep(0.05)
        if len(requests) != seen:
            seen, quiet_since = len(requests), time.perf_counter()
    return round(time.perf_counter() - t0, 3)


# Where the player's first picture went, in ms since the page's navigation: the page's first
# script run seen starting and ending (`browser_timing`'s record of the app's state), the
# player's frame created, its files fetched (the web scene, the poses), the scene built, the
# picture drawn.
_BREAKDOWN = """(s) => { const f = document.querySelector(s), w = f.contentWindow, d = f.contentDocument;
    const o = w.performance.timeOrigin - performance.timeOrigin;
    const mark = (n) => { const e = w.performance.getEntriesByName(n)[0]; return e ? Math.round(o + e.startTime) : null; };
    const bins = w.performance.getEntriesByType('resource').filter((e) => e.name.endsWith('.bin'));
    const runs = window.__sv ? window.__sv.runs : [], from = runs.findIndex((r) => r[1] === 'running');
    const to = from < 0 ? -1 : runs.findIndex((r, k) => k > from && r[1] !== 'running');
    return { run_from: from < 0 ? null : Math.round(runs[from][0]), run_to: to < 0 ? null : Math.round(runs[to][0]),
             frame: Math.round(o),
             files_from: bins.length ? Math.round(o + Math.min(...bins.map((e) => e.startTime))) : null,
             files: mark('web:files'), scene_built: mark('web:scene'),
             drawn: Math.round(o + Number(d.querySelector('#timeline').dataset.firstDraw)) }; }"""


def first_draw_breakdown(pg) -> dict:
    return pg.evaluate(_BREAKDOWN, PLAYER_IFRAME)


# n in the player (the next episode of the picker's list, in the same page), timed in the page
# from the key to that episode's first picture; whether its web scene was fetched on the way
# (a scene the page had not drawn yet) or only its poses.
NEXT_JS = """async (s) => { const f = document.querySelector(s), d = f.contentDocument, w = d.defaultView;
  const r = d.querySelector('#timeline'), was = r.dataset.episode, seen = w.performance.getEntriesByType('resource').length;
  const t0 = w.performance.now();
  d.dispatchEvent(new w.KeyboardEvent('keydown', { key: 'n', bubbles: true }));
  while (r.dataset.episode === was) await new Promise((ok) => w.setTimeout(ok, 5));
  await new Promise((ok) => {  // the player's next draw sets data-draw-ms: the new episode's first picture
    const mo = new w.MutationObserver(() => { mo.disconnect(); ok(); });
    mo.observe(r, { attributes: true, attributeFilter: ['data-draw-ms'] });
  });
  const got = w.performance.getEntriesByType('resource').slice(seen).map((e) => e.name);
  return { ms: w.performance.now() - t0, scene: got.some((u) => /\\/scene-[^/]*\\.bin$/.test(u)) }; }"""
DWELL_S = 3.0  # between two n: the user watches the episode (work ahead of the user runs meanwhile)


def next_in_page(b, url: str, n: int = 6, dwell_s: float = DWELL_S) -> dict:
    """A new session on the detail page `url`, then `n` presses of n, each after the page
    settled and `dwell_s` more: ms from the key to the next episode's first picture, split by
    whether its scene was new to the page."""
    got = _first_frame(b.browser, url, keep=True)
    pg, requests, same, new = got["page"], [], [], []
    pg.on("request", lambda r: requests.append(r.url))
    try:
        for _ in range(n):
            settle(pg, requests)
            time.sleep(dwell_s)
            step = pg.evaluate(NEXT_JS, PLAYER_IFRAME)
            (new if step["scene"] else same).append(round(step["ms"]))
    finally:
        pg.context.close()
    pick = lambda v: {"median_ms": round(statistics.median(v)), "all_ms": v} if v else None  # noqa: E731
    return {"same_scene": pick(same), "new_scene": pick(new), "dwell_s": dwell_s}


PLAY_S = {1: 3.0, 2: 1.5, 4: 0.9}  # played seconds per speed: within a 120-step episode at 20 Hz


def _play(pg, speed: float, seconds: float | None = None) -> dict:
    """Plays from step 0 at `speed` for `seconds` (`PLAY_S`: the episode's end is not reached,
    where playback stops): steps advanced per second and pictures drawn per second."""
    seconds = seconds or PLAY_S[speed]
    pg.evaluate(f"""() => {{ const d = {_ROOT_JS}; d.getElementById('speed').value = '{speed:g}';
        d.dispatchEvent(new d.defaultView.KeyboardEvent('keydown', {{ key: 'Home', bubbles: true }})); }}""")
    time.sleep(0.5)
    s0 = int(pg.evaluate(f"() => {_ROOT_JS}.getElementById('timeline').dataset.step"))
    pg.evaluate(f"() => {_ROOT_JS}.getElementById('play').click()")
    time.sleep(seconds)
    got = pg.evaluate(f"() => {{ const r = {_ROOT_JS}.getElementById('timeline'); "
                      "return [r.dataset.step, r.dataset.fps]; }")
    pg.evaluate(f"() => {{ const d = {_ROOT_JS}; if (d.getElementById('timeline').dataset.playing === '1') "
                "d.getElementById('play').click(); }")
    return {"speed": speed, "steps_per_s": round((int(got[0]) - s0) / seconds, 1), "drawn_per_s": float(got[1] or 0)}


def _converted_new_window(b, code: Path, store: Path, eid: str) -> float:
    """The first picture of `eid` on a fresh server with empty caches, navigated as a new
    window is made (`_first_frame(window="new")`)."""
    with fresh_caches() as env, dashboard_server(code, store, env) as srv:
        srv.wait_healthy()
        return _first_frame(b.browser, f"{srv.url}/detail?ep={eid}")


def player(b, code: Path) -> dict:
    store = b.demo
    first, other_scene = _sbu_by_scene(store, 2)
    same = _same_scene_episode(store, first)
    same_tab = _same_scene_episode(store, first, skip=(same,))
    out = {"store": str(store), "episodes": [first, same, other_scene, same_tab], "window_settle_s": WINDOW_SETTLE_S}
    with fresh_caches() as env:
        with dashboard_server(code, store, env) as srv:
            srv.wait_healthy()
            got = _first_frame(b.browser, f"{srv.url}/detail?ep={first}", keep=True, window="open")
            out["renderer"] = renderer(got["page"])
            out["first_scene_breakdown_ms"] = first_draw_breakdown(got["page"])
            out["first_scene_converted_s"] = got["value_s"]
            # the other episode in a new tab of the same browser (its HTTP cache holds Streamlit's
            # frontend and three.js), as a researcher opens the next link; then in a new browser
            tab = _first_frame(b.browser, f"{srv.url}/detail?ep={same_tab}", keep=True, tab_of=got["page"].context)
            out["same_scene_other_episode_tab_s"] = tab["value_s"]
            out["same_scene_tab_breakdown_ms"] = first_draw_breakdown(tab["page"])
            got["page"].context.close()
            got = _first_frame(b.browser, f"{srv.url}/detail?ep={same}", keep=True, window="open")
            out["same_scene_other_episode_s"] = got["value_s"]
            out["same_scene_breakdown_ms"] = first_draw_breakdown(got["page"])
            got["page"].context.close()
            # the other scene's web scene to disk, as an earlier run leaves it (not timed)
            _first_frame(b.browser, f"{srv.url}/detail?ep={other_scene}")
        with dashboard_server(code, store, env) as srv:  # restarted: nothing in memory
            srv.wait_healthy()
            got = _first_frame(b.browser, f"{srv.url}/detail?ep={other_scene}", keep=True, window="open")
            pg = got["page"]
            try:
                out["never_opened_scene_on_disk_s"] = got["value_s"]
                out["first_draw_breakdown_ms"] = first_draw_breakdown(pg)
                requests = []
                pg.on("request", lambda r: requests.append(r.url))
                out["settled_s"] = settle(pg, requests)
                before = len(requests)
                steps = pg.evaluate(STEP_JS, [PLAYER_IFRAME, 30])
                time.sleep(1.0)  # the page's answer to the last key (one value after the keys stop)
                out["step_ms"] = {"median": round(statistics.median(steps), 1), "max": round(max(steps), 1),
                                  "n": len(steps)}
                out["step_requests"] = [u for u in requests[before:] if not u.startswith("data:")]
                out["playback"] = [_play(pg, v) for v in (1, 2, 4)]
            finally:
                pg.context.close()
            # the worst SBU episode (its scene on disk), then n through the picker's list
            out["next_in_page"] = next_in_page(b, f"{srv.url}/detail")
        with dashboard_server(code, store, env) as srv:  # restarted again: the same page from a new window
            srv.wait_healthy()
            out["never_opened_scene_on_disk_new_window_s"] = _first_frame(b.browser, f"{srv.url}/detail?ep={other_scene}")
    out["first_scene_converted_new_window_s"] = _converted_new_window(b, code, store, first)
    out["value_s"] = out["first_scene_converted_s"]
    out["includes"] = ("fresh servers with empty caches, no warm-up: navigation -> first picture drawn, for a scene "
                       "converted on the way, another episode of that scene (a new tab of the same browser, then a "
                       "third in a new browser session), and a scene on disk in a "
                       "restarted server (each with where its time went, ms since navigation), each navigated once "
                       "the new session's window had settled (window_settle_s; the two *_new_window_s: navigated "
                       "as the window is made, its making timed with the page); then, once that page "
                       "has settled (tables drawn, no request for 1 s), 30 key steps timed in the page to readable "
                       "pixels and the requests they made; playback at 1x/2x/4x; then, on the worst SBU episode's "
                       "page, n six times, each after the page settled and 3 s of watching, key -> the next "
                       "episode's first picture (same scene: its poses fetched; new scene: its web scene too)")
    return out


def _rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS:"))


def _du_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1) if path.exists() else 0.0


def replay_sessions(b, code: Path, sessions: int = 5) -> dict:
    store = b.demo
    eids = _sbu_by_scene(store, sessions)
    with fresh_caches() as env:
        with dashboard_server(code, store, env) as srv:
            srv.wait_healthy()
            rss = {"started": _rss_mb(srv.proc.pid)}
            pages = []
            try:
                for eid in eids:
                    pages.append(_first_frame(b.browser, f"{srv.url}/detail?ep={eid}", keep=True)["page"])
                rss["sessions_open"] = _rss_mb(srv.proc.pid)
                for pg in pages:
                    pg.evaluate(STEP_JS, [PLAYER_IFRAME, 10])
                time.sleep(10)  # what each page's player still asks of the server (pre-rendering, polls)
                rss["after_steps"] = _rss_mb(srv.proc.pid)
                kinds = [renderer(pg) for pg in pages]
            finally:
                for pg in pages:
                    pg.context.close()
            time.sleep(10)
            rss["idle_after_close"] = _rss_mb(srv.proc.pid)
            home = Path(env["XDG_CACHE_HOME"])
            disk = {"scenes_mb": _du_mb(Path(env["SAFEVLA_SCENE_CACHE"])),
                    "player_mb": _du_mb(home / "safevla" / "player")}
    return {"value_s": None, "sessions": sessions, "episodes": eids, "renderers": kinds, "rss_mb": rss,
            "peak_mb": max(v for k, v in rss.items() if k != "idle_after_close"), "disk_mb": disk,
            "includes": f"VmRSS of the streamlit process, demo store, {sessions} sessions at once, each on the detail "
                        "page of a different scene's worst SBU episode (empty caches, no warm-up), 10 key steps each; "
                        "and the disk its caches hold after"}


def payload(b, code: Path) -> dict:
    """The web scene of every distinct scene of the demo store's episodes (scene files that
    differ only in their bodies' placements share one) and one episode's poses each: bytes,
    vertices (and the model's), textures, seconds to convert. In this process, compiled scenes
    not cached on disk (each is compiled as on a first visit)."""
    import glob

    os.environ["SAFEVLA_SCENE_CACHE"] = "off"
    from replay.render import web_scene as W
    from replay.render.scene_models import scene_digest_of, scene_model_once
    from scoring.records.io import load_record

    rows, seen = [], set()
    for path in sorted(glob.glob(str(code / "assets" / "demo" / "archive" / "*" / "task_*" / "*" / "ep_*.npz"))):
        rec = load_record(path)
        key = scene_digest_of(rec, placement=False)
        if key in seen:
            continue
        seen.add(key)
        model = scene_model_once(rec)
        t0 = time.perf_counter()
        blob = W.scene_blob(model)
        took = time.perf_counter() - t0
        head, _ = W.read_blob(blob)
        rows.append({"episode": path.split("archive/")[1], "bytes": len(blob), "vertices": head["vertices"],
                     "model_vertices": head["source_vertices"], "textures": len(head["textures"]),
                     "model_texture_mb": round(model.ntexdata / 2**20, 1), "convert_s": round(took, 2),
                     "poses_bytes": len(W.episode_blob(model, rec, [])), "steps": rec.n_steps})
    files = glob.glob(str(code / "assets" / "demo" / "archive" / "models" / "*.xml"))
    return {"value_s": None, "scenes": len(rows), "scene_files": len(files), "rows": rows}


def main(argv=None) -> int:
    """Runs `player` and `replay_sessions` on this checkout and, with --baseline REV, on that
    revision in the same run, and prints each result whole (one JSON line each)."""
    import argparse
    import json
    import types

    from browser_timing import Browser, archive_of, remove_tree
    from dashboard_shipped import link_converted, link_on_disk, list_click, next_shipped
    from streamlit_floor import floor

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="player,replay_sessions")
    p.add_argument("--baseline", default=None)
    args = p.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    codes = [("HEAD", root)] + ([(args.baseline, archive_of(args.baseline, root))]
                                if args.baseline and args.only != "payload" else [])
    try:
        with Browser() as browser:
            b = types.SimpleNamespace(demo=root / "assets" / "demo" / "store", browser=browser, repeat=1)
            for name in args.only.split(","):
                for rev, code in codes:
                    out = {"measure": name, "code": rev, "load_avg_1m": round(os.getloadavg()[0], 2)}
                    run = {"player": player, "replay_sessions": replay_sessions, "payload": payload,
                           "list_click": list_click, "link_converted": link_converted,
                           "link_on_disk": link_on_disk, "next_shipped": next_shipped, "floor": floor}[name]
                    out.update(run(b, code))
                    print(json.dumps(out), flush=True)
    finally:
        for rev, code in codes[1:]:
            remove_tree(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
