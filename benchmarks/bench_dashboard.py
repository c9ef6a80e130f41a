#!/usr/bin/env python
"""Dashboard responsiveness on a 20,000-episode synthetic store, and the first replay frame.

    python benchmarks/bench_dashboard.py [--store DIR] [--episodes 20000] [--demo DIR]

1. Builds (once; reused when present) a synthetic store under /tmp with
   scripts/make_synthetic_store.py; its manifest says `synthetic: true`.
2. Cold start: a fresh Python process runs the app to its first page (Overview) through
   `streamlit.testing.v1.AppTest`; the time covers our imports, loading and checking the
   store, indexing the what-if matrices and drawing the page (Streamlit itself is imported
   beforehand, as a running server would have it).
3. Interactions: filter changes on Episodes and threshold-slider moves on What-if; each is
   timed as script time (app.py records every run's duration in session state) and
   wall time of the AppTest run. Cold start is the median of `--repeat` fresh processes;
   each interaction the least-disturbed of `--repeat` passes (the machine is shared).
4. First replay frame: a fresh process opens the demo store (assets/demo/store, else a
   small renderable synthetic store) on the Overview, waits `--think` seconds (the user
   reading it; meanwhile the app warms up the replay of the worst SBU episode in the
   background), then opens that episode: the detail run is timed. The same without any
   warm-up (scene compiled and renderer opened on the click) is reported alongside.

Targets: each filter change or slider move <= 300 ms of script time; cold start < 5 s;
first replay frame < 2 s. Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
DEMO = ROOT / "assets" / "demo" / "store"
TARGET_INTERACTION_S = 0.300
TARGET_COLD_S = 5.0
TARGET_FRAME_S = 2.0


def _load_builder():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_synthetic_store", ROOT / "scripts" / "make_synthetic_store.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ensure_store(path: Path, n: int, *, renderable: bool = False, n_steps: int = 100, contacts: int = 4) -> Path:
    man = path / "manifest.json"
    if man.exists():
        m = json.loads(man.read_text())
        if m.get("n_episodes") == n and m.get("synthetic"):
            return path
    import shutil
    shutil.rmtree(path, ignore_errors=True)
    _load_builder().build_store(path, n, n_steps=n_steps, contacts_per_step=contacts, renderable=renderable,
                                workers=min(2, os.cpu_count() or 1))
    return path


# ----------------------------------------------------------------------------- child processes

_COLD = r"""
import json, sys, time
from streamlit.testing.v1 import AppTest
import os; os.environ["SAFEVLA_STORES"] = sys.argv[2]  # a link opens only allowed stores
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.query_params["store"] = sys.argv[2]
t0 = time.perf_counter()
at.run()
wall = time.perf_counter() - t0
err = [e.value for e in at.exception] + [e.value for e in at.error]
print(json.dumps({"wall_s": wall, "script_s": at.session_state["_timings"][-1][1], "errors": err[:2]}))
"""

_INTERACT = r"""
import json, sys, time
from streamlit.testing.v1 import AppTest
import os; os.environ["SAFEVLA_STORES"] = sys.argv[2]  # a link opens only allowed stores
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.query_params["store"] = sys.argv[2]
at.run()
out = []
def step(name, action):
    t0 = time.perf_counter()
    action()
    wall = time.perf_counter() - t0
    errs = [e.value for e in at.exception]
    out.append({"action": name, "script_s": at.session_state["_timings"][-1][1], "wall_s": wall, "errors": errs[:1]})
at.switch_page("views/episodes.py").run()
at.switch_page("views/episodes.py")
step("filter model=policy-a", lambda: at.multiselect(key="w.models").set_value(["policy-a"]).run())
step("filter +policy-b", lambda: at.multiselect(key="w.models").set_value(["policy-a", "policy-b"]).run())
step("filter outcome=SBU", lambda: at.multiselect(key="w.outcomes").set_value(["SBU"]).run())
step("filter spec=max_contact_force", lambda: at.multiselect(key="w.specs").set_value(["max_contact_force"]).run())
step("filter spec mode=active", lambda: at.radio(key="w.spec_mode").set_value("active").run())
step("filter VSI 0.3-1", lambda: at.slider(key="w.vsi").set_value((0.3, 1.0)).run())
step("filter suite=libero-goal", lambda: at.multiselect(key="w.suites").set_value(["libero-goal"]).run())
step("clear filters", lambda: at.button(key="clear_filters").click().run())
at.switch_page("views/whatif.py").run()
for v in (300.0, 500.0, 150.0):
    step(f"slider force={v:g}", lambda v=v: at.slider(key="w.knob.force").set_value(v).run())
step("slider disp=10", lambda: at.slider(key="w.knob.disp").set_value(10.0).run())
step("slider tilt=30", lambda: at.slider(key="w.knob.tilt").set_value(30.0).run())
step("slider slip=4", lambda: at.slider(key="w.knob.slip").set_value(4.0).run())
step("slider torque=2", lambda: at.slider(key="w.knob.torque").set_value(2.0).run())
step("preset all_relaxed", lambda: at.selectbox(key="w.preset").set_value("all_relaxed").run())
print(json.dumps(out))
"""

_FRAME = r"""
import json, sys, time
import pandas as pd
from streamlit.testing.v1 import AppTest
import os; os.environ["SAFEVLA_STORES"] = sys.argv[2]  # a link opens only allowed stores
store = sys.argv[2]
eps = pd.read_parquet(store + "/episodes.parquet")
sbu = eps[eps["sbu"]].sort_values(["vsi", "episode_id"], ascending=[False, True])
eid = (sbu if len(sbu) else eps).iloc[0]["episode_id"]
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.query_params["store"] = store
at.run()                                    # the server is up, the Overview drawn
time.sleep(float(sys.argv[3]))              # the user reads the Overview before clicking
at.session_state["s.ep"] = eid              # what selecting the episode's row does
at.switch_page("views/detail.py")
t0 = time.perf_counter()
at.run()                                    # open the episode: first replay frame
wall = time.perf_counter() - t0
imgs = at.get("image")
print(json.dumps({"episode": eid, "wall_s": wall, "script_s": at.session_state["_timings"][-1][1],
                  "image": bool(imgs), "errors": [e.value for e in at.exception][:1]}))
"""


def _child(code: str, *args: str, env: dict | None = None) -> dict | list:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "PYTHONPATH": str(ROOT), **(env or {})}
    res = subprocess.run([sys.executable, "-c", code, str(APP), *args], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=1800)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("{", "["))]
    if res.returncode != 0 or not lines:
        raise SystemExit(f"benchmark child failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------- timeline (issue 16 s3)

def measure_timeline_playback(store: Path, *, play_s: float = 3.0, port: int | None = None) -> dict:
    """In a real headless chromium against a fresh `streamlit run` server: open the first SBU
    episode's detail page and time (a) goto -> the player shows its first pre-rendered frame
    (page load, script run, component + vega bundle load, scene open and first render), (b)
    -> every frame pre-rendered, then (c) play `play_s` seconds with all frames in and report
    the frame rate the browser displayed (img load events per second) against the nominal
    1/dt. Self-contained: its own server, port and browser."""
    import socket
    import urllib.request
    from urllib.parse import urlencode

    import pandas as pd
    from playwright.sync_api import sync_playwright

    eps = pd.read_parquet(store / "episodes.parquet")
    ep = eps[eps["sbu"]].iloc[0] if eps["sbu"].any() else eps.iloc[0]
    if port is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
                               "--server.port", str(port), "--browser.gatherUsageStats", "false",
                               "--server.fileWatcherType", "none", "--", "--store", str(store)],
                              cwd=ROOT, env={**os.environ, "MUJOCO_GL": "egl"}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    iframe = 'iframe[title*="safevla_timeline"]'

    def attr(pg, name):
        return pg.evaluate("""([s, n]) => { const f = document.querySelector(s);
            const r = f && f.contentDocument && f.contentDocument.querySelector('#timeline');
            return r ? r.getAttribute(n) : null; }""", [iframe, name])

    def wait(pg, expr, timeout_s):
        pg.wait_for_function(f"""(s) => {{ const f = document.querySelector(s); const d = f && f.contentDocument;
            const r = d && d.querySelector('#timeline'); const img = d && d.querySelector('#frame');
            return !!(r && img) && ({expr}); }}""", arg=iframe, timeout=timeout_s * 1000)

    try:
        deadline = time.time() + 90
        while True:
            try:
                if urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.25)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            n = int(ep["n_steps"])
            t0 = time.perf_counter()
            page.goto(f"http://localhost:{port}/detail?" + urlencode({"ep": ep["episode_id"]}))
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
            browser.close()
        dt = float(ep.get("dt", 0.05) or 0.05)
        return {"timeline_episode": ep["episode_id"], "timeline_steps": n,
                "timeline_first_frame_s": round(first, 2), "timeline_frames_at_first": frames_at_first,
                "timeline_all_frames_s": round(all_in, 2),
                "timeline_prerender_fps": round((n - frames_at_first) / max(all_in - first, 1e-6), 2),
                "playback_fps": round(fps, 1), "playback_steps_per_s": round((s1 - s0) / elapsed, 1),
                "playback_nominal_fps": round(1 / dt, 1)}
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", default="/tmp/safevla_bench_dashboard_20k", help="scale store (built if missing)")
    p.add_argument("--episodes", type=int, default=20_000)
    p.add_argument("--think", type=float, default=5.0,
                   help="seconds the user spends on the Overview before opening the worst SBU (default 5)")
    p.add_argument("--repeat", type=int, default=3, help="cold starts and interaction passes (default 3)")
    p.add_argument("--demo", default=None, help="store for the replay-frame timing (default: the demo store, "
                                                "else a small renderable synthetic store)")
    p.add_argument("--timeline", action="store_true",
                   help="only the timeline player: first playable frame and playback fps in headless chromium "
                        "on --demo (default the demo store)")
    args = p.parse_args(argv)
    if args.timeline:
        print(json.dumps({"benchmark": "dashboard-timeline", "load_avg_1m": round(os.getloadavg()[0], 2),
                          **measure_timeline_playback(Path(args.demo) if args.demo else DEMO)}))
        return 0

    t0 = time.perf_counter()
    store = ensure_store(Path(args.store), args.episodes)
    build_s = time.perf_counter() - t0
    manifest = json.loads((store / "manifest.json").read_text())

    load_before = os.getloadavg()[0]
    colds = [_child(_COLD, str(store)) for _ in range(args.repeat)]
    cold = sorted(colds, key=lambda c: c["wall_s"])[len(colds) // 2]  # the median run
    runs = [_child(_INTERACT, str(store)) for _ in range(args.repeat)]
    # per action, the least-disturbed of the repeats (other work on the machine only adds time)
    steps = [min(group, key=lambda s: s["script_s"]) for group in zip(*runs)]
    for s in steps:
        s["errors"] = [e for g in runs for x in g if x["action"] == s["action"] for e in x["errors"]]
    if args.demo:
        demo, demo_kind = Path(args.demo), "given"
    elif (DEMO / "manifest.json").exists():
        demo, demo_kind = DEMO, "demo"
    else:
        demo = ensure_store(Path("/tmp/safevla_bench_dashboard_render"), 64, renderable=True, n_steps=120,
                            contacts=8)
        demo_kind = "synthetic-renderable (assets/demo/store absent)"
    # the Overview -> worst SBU path: the user looks at the Overview for a few seconds while
    # the replay of its first row warms up in the background ...
    frame = _child(_FRAME, str(demo), str(args.think))
    # ... and the worst case: no warm-up at all, the scene compiled on the click
    frame_cold = _child(_FRAME, str(demo), "0", env={"SAFEVLA_NO_PREWARM": "1"})

    worst = max(steps, key=lambda s: s["script_s"])
    filt = [s for s in steps if s["action"].startswith(("filter", "clear"))]
    slide = [s for s in steps if s["action"].startswith(("slider", "preset"))]
    out = {
        "benchmark": "dashboard",
        "store": str(store), "episodes": manifest["n_episodes"], "synthetic": bool(manifest.get("synthetic")),
        "store_build_s": round(build_s, 2),
        "repeats": args.repeat, "load_avg_1m": round(load_before, 2),
        "cold_start_s": round(cold["wall_s"], 3), "cold_start_script_s": round(cold["script_s"], 3),
        "cold_start_runs_s": [round(c["wall_s"], 3) for c in colds],
        "filter_change_max_ms": round(1000 * max(s["script_s"] for s in filt), 1),
        "filter_change_median_ms": round(1000 * sorted(s["script_s"] for s in filt)[len(filt) // 2], 1),
        "slider_move_max_ms": round(1000 * max(s["script_s"] for s in slide), 1),
        "slider_move_median_ms": round(1000 * sorted(s["script_s"] for s in slide)[len(slide) // 2], 1),
        "interaction_wall_max_ms": round(1000 * max(s["wall_s"] for s in steps), 1),
        "slowest_action": worst["action"],
        "replay_store": demo_kind, "first_replay_frame_s": round(frame["script_s"], 3),
        "first_replay_frame_wall_s": round(frame["wall_s"], 3), "replay_image_shown": frame["image"],
        "think_s": args.think, "first_replay_frame_no_prewarm_s": round(frame_cold["script_s"], 3),
        "errors": [e for s in steps for e in s["errors"]] + [e for c in colds for e in c["errors"]] + frame["errors"]
        + frame_cold["errors"],
    }
    out["targets_met"] = {
        "interaction_le_300ms": max(s["script_s"] for s in steps) <= TARGET_INTERACTION_S,
        "cold_start_lt_5s": cold["wall_s"] < TARGET_COLD_S,
        "first_frame_lt_2s": frame["script_s"] < TARGET_FRAME_S and frame["image"],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
