"""What a Streamlit page costs before any of our code, for benchmarks/dashboard_player.py's
command: the floor under the player's first-picture figures (`link_on_disk`, `link_converted`).

- floor: a bare Streamlit app (`FLOOR_APP`: two pages, each one custom component and nothing
  else) served by `streamlit run` from this environment, each round a fresh server and a new
  browser session navigated from a settled window, as `link_on_disk` navigates; seconds until
  the component's frame has drawn with WebGL (a cleared canvas: a context made and one draw, no
  scene), and where they went (the breakdown of `dashboard_player.first_draw_breakdown`). Once
  to the app's second page (`/detail`), as the dashboard's links go, and once to its first
  (`/`): Streamlit's frontend, not knowing which part of a path is the server's base path, asks
  `/detail/_stcore/health` first, is answered 404 and tries `/_stcore/health` next (its
  `getPossibleBaseUris`), which a page other than the first pays on every direct navigation.

What it includes is what every Streamlit page pays on this machine: the frontend's files, its
start and its connection, the script's run (here empty), React's rendering of one element and
the component's frame. The dashboard's detail page adds its own elements, its player's code
(three.js) and its web scene on top.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from browser_timing import Server, remove_tree
from dashboard_bench import summary
from dashboard_frames import _first_frame
from dashboard_player import _BREAKDOWN

FLOOR_APP = '''import pathlib

import streamlit as st
import streamlit.components.v1 as components

drawn = components.declare_component("floor_frame", path=str(pathlib.Path(__file__).parent / "frame"))


def first():
    drawn(key="frame")


def detail():
    drawn(key="frame")


st.navigation([st.Page(first, title="First", default=True), st.Page(detail, title="Detail", url_path="detail")],
              position="hidden").run()
'''

# The component's page: at Streamlit's first render message, one WebGL draw, then the time of
# it in the attribute the player sets (dashboard/player_static/player.js, `onDraw`).
FLOOR_FRAME = '''<!doctype html>
<html><body style="margin:0">
<div id="timeline"><canvas id="gl" width="480" height="360"></canvas></div>
<script>
const send = (type, data) => window.parent.postMessage(Object.assign({ isStreamlitMessage: true, type }, data), "*");
window.addEventListener("message", (event) => {
  if (!event.data || event.data.type !== "streamlit:render") return;
  const gl = document.getElementById("gl").getContext("webgl2");
  gl.clearColor(0.84, 0.15, 0.16, 1);
  gl.clear(gl.COLOR_BUFFER_BIT);
  const root = document.getElementById("timeline");
  if (root.dataset.firstDraw === undefined) root.dataset.firstDraw = String(Math.round(performance.now()));
  send("streamlit:setFrameHeight", { height: 364 });
});
send("streamlit:componentReady", { apiVersion: 1 });
</script>
</body></html>
'''
FRAME = "iframe"  # the page's only frame


def _floor_app() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="safevla-bench-floor-"))
    (folder / "frame").mkdir()
    (folder / "frame" / "index.html").write_text(FLOOR_FRAME)
    (folder / "app.py").write_text(FLOOR_APP)
    return folder


def _drawn_after(b, url: str) -> tuple[float, dict]:
    """Seconds from navigating a new session to `url`, once its window has settled, to the
    component's first draw; and where they went."""
    got = _first_frame(b.browser, url, keep=True, window="open", frame=FRAME)
    try:
        return got["value_s"], {k: v for k, v in got["page"].evaluate(_BREAKDOWN, FRAME).items()
                                if k not in ("files_from", "files", "scene_built")}
    finally:
        got["page"].context.close()


def floor(b, code: Path, rounds: int = 3) -> dict:
    """Seconds from navigating to a page of a bare Streamlit app (`FLOOR_APP`) to its one
    component's first WebGL draw, the app's second page (`value_s`, as the dashboard's links go)
    and its first (`first_page`); and where each went. Each round a fresh server, warmed by one
    page load first (a first run imports what a component's call needs: pyarrow and numpy, 0.2
    s; the dashboard's server has them from its start-up warm-up), then each page in a new
    session navigated once the window has settled, in alternating order. `code` is unused: the
    floor is Streamlit's and this environment's, the same for every revision measured."""
    folder = _floor_app()
    got: dict[str, list] = {"detail": [], "first": []}
    try:
        for k in range(rounds):
            with Server(folder / "app.py", store=folder, cwd=folder) as srv:
                srv.wait_healthy()
                _drawn_after(b, srv.url)
                for page in ("detail", "first")[::1 if k % 2 == 0 else -1]:
                    got[page].append(_drawn_after(b, f"{srv.url}/detail" if page == "detail" else srv.url))
    finally:
        remove_tree(folder)
    times = [t for t, _ in got["detail"]]
    first = [t for t, _ in got["first"]]
    return {"value_s": round(statistics.median(times), 3), **summary(times),
            "breakdowns_ms": [d for _, d in got["detail"]],
            "first_page": {"value_s": round(statistics.median(first), 3), **summary(first),
                           "breakdowns_ms": [d for _, d in got["first"]]},
            "includes": "a fresh `streamlit run` of a bare app of two pages with one custom component each, "
            "warmed by one page load, its second page navigated from a settled window in a new session "
            "(first_page: its first) -> the component's frame drew once with WebGL"}
