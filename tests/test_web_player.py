"""The replay drawn in the browser (dashboard/player_static/webview.js, three.js) agrees with
MuJoCo's own offscreen render of the same step, in a real headless chromium with WebGL on
SwiftShader: every body's projected centre and silhouette, and the picture's colours.

Thresholds, from the demo libero_object task 0 scene at 320x240, its meshes simplified to
74,445 of 842,834 corners (2026-11-28, steps 0, 70 and 143 of one episode; bodies of 100
pixels or more): body centres differed by at most 0.88 px (the world body, a few edge pixels
of the floor), per-body silhouette IoU was 0.942-1.00 but 0.87 for the robot's base at step 0
(it meets the mount in coplanar faces, which two rasterisers break differently; 0.87 unsimplified
too), the union of all silhouettes 0.9976-0.9986, and the mean colour difference 10.7-10.8
levels of 255 (lit per pixel by three.js's Phong material, as the player was before it lit per
vertex as MuJoCo does, 11.8-12.2, and 23.5-24.7 with a floor of two triangles). Where that
difference lies (step 0): the floor, 62,930 of the 76,800 pixels, 11.4 levels on average but
only +2.9 signed: its grain and plank lines sampled at other sub-texel positions and mip levels
by SwiftShader than by MuJoCo's GL (both trilinear); the basket, a textured mesh clustered to
4 mm, 20.5 levels, 12 darker; every other body 1-12. Shadows play no part: the scene's lights
cast none (castshadow false), nor does MuJoCo's headlight. The test asks for centres within
2 px, IoU of at least 0.8 for every body and 0.99 for the union, and a mean colour difference
under 15 levels: a wrong fovy or aspect, a quaternion in the wrong order or a mesh offset moves
or cuts silhouettes far past these, and lights placed or tessellated unlike MuJoCo's move the
colours past 15.
"""

import base64
import io
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

from replay.render import web_scene as W  # noqa: E402
from replay.render.offscreen import OffscreenContext  # noqa: E402
from replay.render.replayer import apply_state  # noqa: E402
from replay.render.scene_models import replay_option, scene_model  # noqa: E402
from scoring.records.io import load_record  # noqa: E402
from dashboard_helpers import WEBGL_ARGS  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.render]
sync_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "dashboard" / "player_static"
# how long the player holds an episode's chart back for its first picture at most
CHART_WAIT_MS = int(re.search(r"const CHART_WAIT_MS = (\d+);", (STATIC / "player.js").read_text()).group(1))
CHROMIUM = "/usr/bin/chromium"
EPISODE = ROOT / "assets" / "demo" / "archive" / "libero_object" / "task_0" / "scripted-careful" / "ep_000.npz"
SIZE = (320, 240)
STEPS = (0, 70, 143)
CENTRE_PX, BODY_IOU, UNION_IOU, MEAN_LEVELS, MIN_PX = 2.0, 0.8, 0.99, 15.0, 100

PAGE = """<!doctype html><html><head>
<script type="importmap">{"imports": {"three": "./vendor/three.module.js"}}</script>
<script>  // the WebGL buffers and textures alive
const live = window.__live = { buffers: 0, textures: 0 }, gl = WebGL2RenderingContext.prototype;
for (const [make, drop, kind] of [["createBuffer", "deleteBuffer", "buffers"], ["createTexture", "deleteTexture", "textures"]]) {
  const m = gl[make], d = gl[drop];
  gl[make] = function (...a) { live[kind]++; return m.apply(this, a); };
  gl[drop] = function (x) { if (x) live[kind]--; return d.call(this, x); };
}
</script></head>
<body style="margin:0"><canvas id="c" width="%(w)d" height="%(h)d"></canvas>
<canvas id="o" width="%(w)d" height="%(h)d" style="position:absolute;left:0;top:0"></canvas>
<script type="module">
import { openScene, openEpisode, closeScene } from "./webview.js";
const get = (u) => fetch(u).then((r) => r.arrayBuffer());
const [canvas, overlay, sceneBuf, posesBuf] = [document.getElementById("c"), document.getElementById("o"),
                                               await get("scene.bin"), await get("poses.bin")];
window.view = await openScene(canvas, overlay, sceneBuf);
window.ep = openEpisode(view, posesBuf);
window.reopen = async () => {  // the scene again in the same canvas, as the player opens another
  const old = window.view;
  window.view = await openScene(canvas, overlay, sceneBuf, old.renderer);
  window.ep = openEpisode(window.view, posesBuf);
  ep.setView("orbit");
  closeScene(old);
};
window.ep.setView("agentview");
window.ready = true;
</script></body></html>"""


def _mujoco_renders(ctx, m, d, cam_id: int) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo's offscreen (H, W, 3) picture, as a replay draws it ("fast": no reflections, no
    multisampling), and (H, W) body id + 1 of each pixel (0: background) from its segmentation render."""
    scn = mujoco.MjvScene(m, maxgeom=10000)
    cam = mujoco.MjvCamera()
    cam.type, cam.fixedcamid = mujoco.mjtCamera.mjCAMERA_FIXED, cam_id
    mujoco.mjv_updateScene(m, d, replay_option(m), None, cam, mujoco.mjtCatBit.mjCAT_ALL.value, scn)
    scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
    rgb = ctx.render(scn).astype(int)
    scn.flags[mujoco.mjtRndFlag.mjRND_SEGMENT] = 1
    scn.flags[mujoco.mjtRndFlag.mjRND_IDCOLOR] = 1
    img = ctx.render(scn).astype(np.int64)
    seg = img[..., 0] + 256 * img[..., 1] + 65536 * img[..., 2] - 1
    body = np.zeros(seg.shape, int)
    for k in np.unique(seg[seg >= 0]):
        g = scn.geoms[int(k)]
        if g.objtype == mujoco.mjtObj.mjOBJ_GEOM:
            body[seg == k] = m.geom_bodyid[g.objid] + 1
    return rgb, body


def _png(url: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")).astype(int)


# WebGL contexts the player's frame has made, counted by a wrapper of getContext that the
# page's init script puts in every frame (`webgl_page`)
WEBGL_CONTEXTS = "() => document.querySelector('%s').contentWindow.__webglContexts || 0"
_COUNT_CONTEXTS = """(() => { const get = HTMLCanvasElement.prototype.getContext;
  HTMLCanvasElement.prototype.getContext = function (kind, ...rest) {
    const had = this.__svlKind, ctx = get.call(this, kind, ...rest);
    if (ctx && /webgl/.test(kind) && had !== kind) { this.__svlKind = kind; window.__webglContexts = (window.__webglContexts || 0) + 1; }
    return ctx; }; })();"""


@pytest.fixture(scope="module")
def webgl_page():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=WEBGL_ARGS)
        try:
            page = browser.new_page(viewport={"width": SIZE[0], "height": SIZE[1]})
            page.add_init_script(_COUNT_CONTEXTS)
            yield page
        finally:
            browser.close()


GRAB = "document.getElementById('c').toDataURL('image/png')"


def _open_lone(pg, m, rec, violations=()) -> None:
    """`pg` on a page of the player's viewer alone (`PAGE`) showing `rec` in its scene `m`."""
    files = {"scene.bin": W.scene_blob(m), "poses.bin": W.episode_blob(m, rec, violations),
             "index.html": (PAGE % {"w": SIZE[0], "h": SIZE[1]}).encode()}
    types = {".html": "text/html", ".js": "text/javascript"}

    def serve(route):
        name = route.request.url.split("//svl.test/", 1)[1]
        body = files[name] if name in files else (STATIC / name).read_bytes()
        kind = types.get(Path(name).suffix, "application/octet-stream")
        route.fulfill(status=200, body=body, headers={"content-type": kind})

    pg.unroute("http://svl.test/**")
    pg.route("http://svl.test/**", serve)
    pg.goto("http://svl.test/index.html")
    pg.wait_for_function("window.ready === true", timeout=60_000)


def test_webgl_player_draws_the_demo_scene_as_mujoco_does(webgl_page):
    rec = load_record(EPISODE)
    m = scene_model(rec)
    pg = webgl_page
    _open_lone(pg, m, rec)
    cam = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, "agentview")
    d = mujoco.MjData(m)
    # the textures uploaded at the size the browser gets them: the same texels both ways
    ctx = OffscreenContext(m, width=SIZE[0], height=SIZE[1], max_texture_px=W.WEB_TEXTURE_PX)
    seen = []
    try:
        for step in STEPS:
            apply_state(m, d, rec.replay, step)
            rgb, ref = _mujoco_renders(ctx, m, d, cam)
            pg.evaluate(f"ep.segmentation(false); ep.show({step})")
            levels = np.abs(_png(pg.evaluate(GRAB)) - rgb).mean()
            pg.evaluate(f"ep.segmentation(true); ep.show({step})")
            web = _png(pg.evaluate(GRAB))
            web = web[..., 0] + 256 * web[..., 1]  # body id + 1
            union = ((ref > 0) & (web > 0)).sum() / ((ref > 0) | (web > 0)).sum()
            bodies = {}
            for b in np.unique(ref[ref > 0]):
                a, w = ref == b, web == b
                if a.sum() >= MIN_PX:
                    ya, xa = np.nonzero(a)
                    yw, xw = np.nonzero(w) if w.any() else (np.array([1e6]), np.array([1e6]))
                    bodies[mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, int(b) - 1)] = (
                        float(np.hypot(xa.mean() - xw.mean(), ya.mean() - yw.mean())), (a & w).sum() / (a | w).sum())
            seen.append((step, levels, union, bodies))
    finally:
        ctx.close()
    for step, levels, union, bodies in seen:
        assert levels < MEAN_LEVELS and union >= UNION_IOU, seen
        assert len(bodies) >= 8, seen  # the robot's links and the objects, not just the floor
        assert all(dist <= CENTRE_PX and iou >= BODY_IOU for dist, iou in bodies.values()), seen


def test_the_still_layer_draws_the_picture_that_drawing_every_geom_draws(webgl_page):
    """A step drawn over the still layer (the geoms the episode never moves, drawn once per camera
    pose with their depth) is pixel for pixel the picture of every geom drawn, at violating steps
    (tinted geoms, contact discs) and others, from a fixed camera and the orbit camera; a camera
    that moves with the robot (the wrist's) draws whole."""
    from replay.render.cli import violations_from_store

    store = ROOT / "assets" / "demo" / "store"
    eid = "libero-object/task_1/scripted-hasty/ep_000"  # a bystander pushed; the object put behind a basket wall
    row = pd.read_parquet(store / "episodes.parquet").set_index("episode_id").loc[eid]
    rec = load_record(store / row["trajectory"])
    violations = violations_from_store(store, eid, record=rec)
    pg = webgl_page
    _open_lone(pg, scene_model(rec), rec, violations)
    marks = pg.evaluate("ep.header.marks")
    with_discs = sorted(int(k) for k, v in marks.items() if v["discs"] and v["tint"])
    assert with_discs, marks  # the test draws tints and discs
    seen = []
    for view in ("agentview", "orbit"):
        pg.evaluate(f"ep.setView({view!r})")
        for step in (0, with_discs[0], with_discs[-1], rec.n_steps - 1):
            pg.evaluate(f"ep.layered(false); ep.show({step})")
            whole = _png(pg.evaluate(GRAB))
            pg.evaluate(f"ep.layered(true); ep.show({step + 1}); ep.show({step})")  # the layer made, then used
            drawn = pg.evaluate("ep.drawnWith")
            layered = _png(pg.evaluate(GRAB))
            seen.append((view, step, drawn, int((np.abs(whole - layered).max(axis=2) > 0).sum()), int((whole.sum(2) > 0).sum())))
    assert all(drawn == "layer" and differing == 0 and lit > SIZE[0] * SIZE[1] // 2 for _, _, drawn, differing, lit in seen), seen
    assert len(pg.evaluate("ep.views")) == 3  # the agent view, the wrist's, the orbit camera
    pg.evaluate("ep.setView(ep.views[1]); ep.show(10); ep.show(11); ep.show(12)")
    assert pg.evaluate("ep.drawnWith") == "whole"


def test_a_scene_opened_in_place_of_another_holds_what_the_first_held(webgl_page):
    """The player opening another scene in its canvas (`reopen`: the scene again, the old one
    closed after the new one's first draw) keeps the WebGL buffers and textures alive as they
    were, so n through many scenes holds one scene's; and the closed scene's orbit camera no
    longer answers the mouse (it drew the closed scene again, uploading it anew)."""
    rec = load_record(EPISODE)
    pg = webgl_page
    _open_lone(pg, scene_model(rec), rec)
    drag = """async () => { const o = document.getElementById('o'), r = o.getBoundingClientRect();
        for (const [type, dx] of [['pointerdown', 0], ['pointermove', 40], ['pointerup', 40]])
          o.dispatchEvent(new PointerEvent(type, { pointerId: 1, isPrimary: true, button: 0, buttons: 1, bubbles: true,
                                                    clientX: r.left + 100 + dx, clientY: r.top + 100 }));
        await new Promise((ok) => requestAnimationFrame(ok)); return ({...__live}); }"""
    held = []
    for _ in range(3):
        pg.evaluate("reopen()")
        pg.evaluate("ep.show(5); ep.show(6)")
        held.append(pg.evaluate(drag))
    assert held[0]["buffers"] > 10 and held[0]["textures"] > 2 and held[1] == held[0] == held[2], held


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """`streamlit run dashboard/server.py` on the demo store (what `safevla dashboard` runs)."""
    from dashboard_helpers import streamlit_server

    log = tmp_path_factory.mktemp("web_player") / "streamlit.log"
    with streamlit_server(ROOT / "assets" / "demo" / "store", log, env={"SAFEVLA_NO_PREWARM": "1"}) as url:
        yield url


def test_detail_page_draws_a_webgl_canvas_and_steps_without_fetching_frames(dashboard, webgl_page):
    """The detail page of the demo store's worst SBU episode: the player draws with WebGL, and
    30 steps by key move the picture without a single request for a frame or a scene file. The
    direct link's frontend found the server at once (dashboard/base_path.py): one health check,
    none at /detail/_stcore/health."""
    from dashboard_helpers import TIMELINE_IFRAME, timeline_attr, wait_timeline

    pg = webgl_page
    pg.set_viewport_size({"width": 1440, "height": 1000})
    requests = []
    pg.on("request", lambda r: requests.append(r))
    pg.goto(f"{dashboard}/detail")
    wait_timeline(pg, "r.dataset.renderer === 'webgl' && r.dataset.firstDraw !== undefined", timeout=90)
    assert [r.url for r in requests if "/_stcore/health" in r.url] == [f"{dashboard}/_stcore/health"]
    # the page's tables follow the first picture: its value "drawn" reruns the page, which draws them
    pg.get_by_text("Why each spec is active or inactive").wait_for(timeout=60_000)
    pg.get_by_text("follow the first frame").wait_for(state="detached", timeout=30_000)  # the run's stale caption goes
    gl = pg.evaluate("""(sel) => { const d = document.querySelector(sel).contentDocument;
        const c = d.querySelector('#gl'); return [c.getContext('webgl2') !== null, c.width, c.height]; }""",
                     TIMELINE_IFRAME)
    assert gl[0] and gl[1] > 100 and gl[2] > 75  # the canvas three.js drew in holds a WebGL2 context
    start = int(timeline_attr(pg, "data-step"))
    n_steps = 30
    before = len(requests)
    # back from the violation (the worst episode's may lie within 30 steps of its end), else forward
    key, target = ("ArrowLeft", start - n_steps) if start >= n_steps else ("ArrowRight", start + n_steps)
    for _ in range(n_steps):
        pg.keyboard.press(key)
    wait_timeline(pg, f"r.dataset.frameStep === '{target}'", timeout=30)
    after = requests[before:]
    assert not [r.url for r in after if r.resource_type == "image" or r.url.endswith(".bin")], after
    assert timeline_attr(pg, "data-frames") == "0"  # no server frame reached the player
    assert "WebGL" in pg.evaluate("(sel) => document.querySelector(sel).contentDocument.querySelector('#renderer')"
                                  ".textContent", TIMELINE_IFRAME)


def test_n_opens_the_next_episode_in_the_same_player_with_web_files_cached_for_good(dashboard, webgl_page):
    """On the detail page, n in the player opens the next episode of the picker's list in the
    same frame (no new iframe, no second page load), drawn with WebGL; the web scene and poses
    files came unzipped with an immutable cache header (their names change with their content),
    and the player's code unzipped with an ETag the server answers "not modified" to."""
    from dashboard_helpers import TIMELINE_IFRAME, timeline_attr, wait_timeline

    pg = webgl_page
    responses = []
    pg.on("response", lambda r: responses.append(r) if r.url.endswith(".bin") else None)
    pg.goto(f"{dashboard}/detail")
    wait_timeline(pg, "r.dataset.renderer === 'webgl' && r.dataset.firstDraw !== undefined", timeout=90)
    pg.get_by_text("Why each spec is active or inactive").wait_for(timeout=60_000)
    ep_now = "() => new URL(location.href).searchParams.get('ep')"
    picked = pg.evaluate(ep_now)
    assert picked  # the page names its episode in its link
    pg.evaluate("(s) => { window.__frame = document.querySelector(s); }", TIMELINE_IFRAME)
    contexts = WEBGL_CONTEXTS % TIMELINE_IFRAME
    made = pg.evaluate(contexts)
    was, draws = timeline_attr(pg, "data-episode"), timeline_attr(pg, "data-draw-ms")
    # what comes first for the next episode: its picture, or its chart embedded anew in the chart's box
    pg.evaluate("""(s) => { const d = document.querySelector(s).contentDocument, w = d.defaultView;
        const r = d.querySelector('#timeline'), was = r.dataset.episode, order = w.__order = [], at = w.__at = {};
        const note = (what) => { if (!order.includes(what)) { order.push(what); at[what] = w.performance.now(); } };
        new w.MutationObserver(() => { if (r.dataset.episode !== was) note('drawn'); })
            .observe(r, { attributes: true, attributeFilter: ['data-draw-ms'] });
        new w.MutationObserver(() => note('chart')).observe(d.getElementById('chart'), { childList: true }); }""",
                TIMELINE_IFRAME)
    pg.evaluate("""(s) => { const d = document.querySelector(s).contentDocument, w = d.defaultView;
        w.__at.key = w.performance.now();
        d.dispatchEvent(new w.KeyboardEvent('keydown', { key: 'n', bubbles: true })); }""", TIMELINE_IFRAME)
    wait_timeline(pg, f"r.dataset.episode !== {was!r} && r.dataset.renderer === 'webgl'", timeout=90)
    wait_timeline(pg, "r.ownerDocument.defaultView.__order.length === 2", timeout=60)
    # the chart's parse held the poses and the picture back when it came first: it waits for the
    # picture, or for CHART_WAIT_MS (player.js) from the page's message naming the episode, which
    # follows the key (a picture that slow: seen once under CI's load)
    order, at = pg.evaluate("(s) => { const w = document.querySelector(s).contentWindow; return [w.__order, w.__at]; }",
                            TIMELINE_IFRAME)
    assert order == ["drawn", "chart"] or at["chart"] - at["key"] >= CHART_WAIT_MS, (order, at)
    pg.wait_for_function(f"() => ({ep_now})() !== {picked!r}", timeout=60_000)  # the page's link names it
    assert pg.evaluate("(s) => window.__frame === document.querySelector(s)", TIMELINE_IFRAME)  # the same player
    # no new WebGL context for the next episode: Chromium loses a page's oldest past 16 (the player's)
    assert made >= 1 and pg.evaluate(contexts) == made
    assert draws is not None
    # the new episode's poses came over the network; the scene may have come from the browser's
    # cache (an earlier page drew it), so its URL is asked of the server again
    assert any("/web/ep-" in r.url and r.status == 200 for r in responses), responses
    scene = pg.evaluate("""(s) => document.querySelector(s).contentWindow.performance.getEntriesByType('resource')
        .map((e) => e.name).find((u) => u.includes('/web/scene-'))""", TIMELINE_IFRAME)
    fetched = pg.request.get(scene, headers={"Accept-Encoding": "gzip"})
    assert fetched.ok and len(fetched.body()) > 100_000
    for url, headers in [(r.url, r.all_headers()) for r in responses if r.status == 200] + [(scene, fetched.headers)]:
        assert headers.get("cache-control") == "public, max-age=31536000, immutable", (url, headers)
        assert "content-encoding" not in headers, (url, headers)
    # the player's code: not gzipped, with an ETag the server answers "not modified" to
    three = scene.split("/web/")[0] + "/vendor/three.core.js"
    code = pg.request.get(three, headers={"Accept-Encoding": "gzip"})
    assert code.ok and "content-encoding" not in code.headers and code.headers.get("cache-control") == "no-cache"
    again = pg.request.get(three, headers={"Accept-Encoding": "gzip", "If-None-Match": code.headers["etag"]})
    assert again.status == 304 and again.body() == b""


def test_a_webgl_context_the_browser_takes_away_is_drawn_again(dashboard, webgl_page):
    """The browser takes the player's WebGL context away (Chromium does past 16 live contexts in
    a page; WEBGL_lose_context here): the player says so, and draws the same picture when the
    context comes back; when it does not come back, it opens the scene on a new canvas and draws
    the same picture there, and the keys step it."""
    from dashboard_helpers import TIMELINE_IFRAME, wait_timeline

    pg = webgl_page
    pg.goto(f"{dashboard}/detail")
    wait_timeline(pg, "r.dataset.renderer === 'webgl' && r.dataset.firstDraw !== undefined", timeout=90)
    frame = pg.locator(TIMELINE_IFRAME).element_handle(timeout=90_000).content_frame()
    picture = "() => document.getElementById('gl').toDataURL('image/png')"
    before = frame.evaluate(picture)
    frame.evaluate("""() => { window.__lose = document.getElementById('gl').getContext('webgl2')
        .getExtension('WEBGL_lose_context'); window.__lose.loseContext(); }""")
    wait_timeline(pg, "r.dataset.webgl === 'lost'", timeout=10)
    # said, and still said after a step drawn meanwhile (a rerun of the page draws one)
    frame.evaluate("() => document.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight', bubbles: true }))")
    frame.evaluate("() => document.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowLeft', bubbles: true }))")
    assert "WebGL context away" in frame.evaluate("() => document.getElementById('status').textContent")
    frame.evaluate("() => window.__lose.restoreContext()")
    wait_timeline(pg, "r.dataset.webgl === 'restored'", timeout=10)
    frame.wait_for_function(f"() => document.getElementById('gl').toDataURL('image/png') === {before!r}", timeout=10_000)
    # gone for good: a new canvas, the same picture
    old = frame.evaluate_handle("() => document.getElementById('gl')")
    frame.evaluate("() => window.__lose.loseContext()")
    wait_timeline(pg, "r.dataset.webgl === 'renewed' && r.dataset.renderer === 'webgl'", timeout=30)
    frame.wait_for_function(f"() => document.getElementById('gl').toDataURL('image/png') === {before!r}", timeout=30_000)
    assert frame.evaluate("(old) => old !== document.getElementById('gl') && !old.isConnected", old)
    step = int(frame.evaluate("() => document.getElementById('timeline').dataset.frameStep"))
    frame.evaluate("""() => document.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight', bubbles: true }))""")
    wait_timeline(pg, f"r.dataset.frameStep === '{step + 1}'", timeout=10)
