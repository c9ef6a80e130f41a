"""Shared page plumbing: the store in use, cached computations, the run context, guards.

Heavy objects (the store's frames, `WhatIf`, re-scored verdicts, records) are kept with
`st.cache_resource` (no pickling or copying; never mutated); small derived tables too.
Cached functions take the `StoreData` as an unhashed `_data` argument plus its `key`
(path and file stamps), so a re-scored store is reloaded.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import data as D
from dashboard import state as S

ROOT = Path(__file__).resolve().parent.parent
DEMO_STORE = ROOT / "assets" / "demo" / "store"
ENV_STORE = "SAFEVLA_STORE"
ENV_STORES = "SAFEVLA_STORES"  # more stores a link may open, os.pathsep-separated (`safevla dashboard --stores`)
# One message for every store a link may not open: whether the path exists, is a store,
# or is /etc must not show (finding 8 of issue 15).
NOT_AVAILABLE = ("This run store is not available on this dashboard. A link or the sidebar opens only the store "
                 "the dashboard was started with and those it was given with `safevla dashboard STORE --stores "
                 "DIR ...`.")
PAGE_TITLES = {"overview": "Overview", "episodes": "Episodes", "detail": "Episode detail", "whatif": "What-if",
               "export": "Export"}


# ----------------------------------------------------------------------------- store loading

@st.cache_resource(show_spinner=False)
def _store_cache() -> tuple[OrderedDict, threading.Lock]:
    return OrderedDict(), threading.Lock()


def load_store(path: str) -> D.StoreData:
    """The store at `path`, loaded once per version of its files (with a progress bar)."""
    cache, lock = _store_cache()
    key = D.store_stamp(path)
    with lock:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
    bar = st.progress(0.0, text=f"Loading run store {path} …")
    try:
        bar.progress(0.2, text=f"Reading {path}/episodes.parquet and spec_results.parquet …")
        data = D.open_store(path)
        bar.progress(1.0, text="Loaded.")
    finally:
        bar.empty()
    with lock:
        cache[key] = data
        while len(cache) > 3:
            cache.popitem(last=False)
    return data


def _server_args():
    import argparse
    import sys

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--store", default=None)
    p.add_argument("--stores", nargs="*", default=[])
    args, _ = p.parse_known_args(sys.argv[1:])
    return args


def server_default_store() -> tuple[str, str]:
    """(path, where it came from): `--store` after `--`, else $SAFEVLA_STORE, else the demo store."""
    args = _server_args()
    if args.store:
        return args.store, "--store"
    if os.environ.get(ENV_STORE):
        return os.environ[ENV_STORE], f"${ENV_STORE}"
    return str(DEMO_STORE), "bundled demo store"


def allowed_stores() -> tuple[str, ...]:
    """The stores a link (`?store=`) or the sidebar may open, as given: the server's own
    store, then `--stores` after `--`, then $SAFEVLA_STORES."""
    extra = [*_server_args().stores, *os.environ.get(ENV_STORES, "").split(os.pathsep)]
    return tuple(dict.fromkeys(p for p in [server_default_store()[0], *extra] if p))


def store_allowed(path: str) -> bool:
    """`path` is one of `allowed_stores()` (compared with symlinks resolved; nothing else is looked at)."""
    real = os.path.realpath(path)
    return any(real == os.path.realpath(p) for p in allowed_stores())


def chosen_store() -> tuple[str, str]:
    """The session's store: chosen in the sidebar, else the URL's `store`, else the server default."""
    picked = st.session_state.get("s.store")
    if picked:
        return picked, "chosen in the sidebar"
    url = st.query_params.get("store")
    if url:
        return url, "from the link"
    return server_default_store()


# ----------------------------------------------------------------------------- cached computations

def _items(overrides) -> tuple:
    return tuple(sorted((k, float(v)) for k, v in overrides.items()))


@st.cache_resource(show_spinner=False, max_entries=24)
def verdicts(_data: D.StoreData, key: str, items: tuple) -> D.Verdicts:
    return D.verdicts(_data, dict(items))


@st.cache_resource(show_spinner=False, max_entries=24)
def overview_tables(_data: D.StoreData, key: str, items: tuple) -> dict:
    v = verdicts(_data, key, items)
    return {"agg": D.cell_aggregates(v), "rates": D.cell_spec_rates(_data, v),
            "comp": D.cell_composition(_data, v), "top": D.top_sbu(_data, v, 10)}


def unvalidated(chart):
    """`chart`, drawn without Altair's jsonschema validation of the whole spec.

    Streamlit calls `chart.to_dict()` on every script run, and Altair validates the spec
    each time: ~80 ms a chart here, ~0.25 s for the Overview's three, on every threshold
    change. The builders' specs are validated by tests/test_dashboard_charts.py (plain
    `to_dict()`), so the dashboard skips it; `to_dict` still runs Streamlit's data
    transformer (it fills the Arrow datasets).
    """
    import functools

    object.__setattr__(chart, "to_dict", functools.partial(type(chart).to_dict, chart, validate=False))
    return chart


def on_canvas(chart):
    """`chart` drawn by Vega on a canvas instead of SVG (Streamlit's `usermeta.embedOptions`):
    the Overview's charts as SVG are ~5,000 DOM nodes, which the browser took 1-2 s to lay
    out after each run on this machine; a canvas is one node. Tooltips work the same."""
    meta = getattr(chart, "usermeta", None)
    meta = meta.to_dict() if hasattr(meta, "to_dict") else meta
    meta = meta if isinstance(meta, dict) else {}
    chart["usermeta"] = {**meta, "embedOptions": {**meta.get("embedOptions", {}), "renderer": "canvas"}}
    return chart


@st.cache_resource(show_spinner=False, max_entries=24)
def overview_charts(_data: D.StoreData, key: str, items: tuple) -> dict:
    """The Overview's three charts under one threshold setting, built once."""
    from dashboard import charts

    tabs = overview_tables(_data, key, items)
    labels = {f: _data.label(f) for f in _data.families}
    out = {"scatter": charts.sr_safety_scatter(tabs["agg"]),
           "heatmap": charts.violation_heatmap(tabs["rates"], labels=labels)}
    if not tabs["comp"].empty:
        out["composition"] = charts.composition_bars(tabs["comp"], tabs["agg"], labels=labels, colors=_data.colors())
    return {name: unvalidated(on_canvas(chart)) for name, chart in out.items()}


@st.cache_resource(show_spinner=False, max_entries=64)
def sensitivity_chart(_data: D.StoreData, key: str, knob: str, current: float):
    """The What-if sensitivity chart of `knob` with its rule at `current`, built once."""
    from dashboard import charts

    k = D.KNOB_BY_NAME[knob]
    return unvalidated(on_canvas(charts.sensitivity_chart(sensitivity(_data, key, knob), current=current,
                                                          default=D.knob_defaults(_data.registry)[knob],
                                                          label=k.label, unit=k.unit)))


@st.cache_resource(show_spinner=False, max_entries=8)
def composition_table(_data: D.StoreData, key: str, items: tuple) -> pd.DataFrame:
    from scoring.report.tables import composition_table as build
    v = verdicts(_data, key, items)
    return build(D.settled_frame(v), D.spec_results_under(_data, v), registry=_data.registry)


@st.cache_resource(show_spinner=False, max_entries=8)
def main_table(_data: D.StoreData, key: str, items: tuple, ci: bool) -> pd.DataFrame:
    from scoring.report.tables import main_table as build
    return build(D.settled_frame(verdicts(_data, key, items)), ci=ci)


@st.cache_resource(show_spinner=False, max_entries=32)
def sensitivity(_data: D.StoreData, key: str, knob: str) -> pd.DataFrame:
    """The knob's sweep with every other threshold at its default (computed once per store)."""
    return D.sensitivity_curve(_data, D.KNOB_BY_NAME[knob])


@st.cache_resource(show_spinner=False, max_entries=8)
def base_aggregates(_data: D.StoreData, key: str) -> dict:
    return D.base_aggregates(verdicts(_data, key, ()))


@st.cache_resource(show_spinner=False, max_entries=8)
def record(path: str, stamp: float):
    from scoring.records.io import load_record
    return load_record(path)


@st.cache_resource(show_spinner=False, max_entries=32)
def traces(_data: D.StoreData, key: str, i: int, items: tuple) -> pd.DataFrame:
    rec = episode_record(_data, i)
    fams = [f for j, f in enumerate(_data.families) if _data.active[i, j]]
    tr = D.robustness_traces(rec, _data.registry, verdicts(_data, key, items).thresholds, fams,
                             force_sampling=_data.manifest.get("force_sampling", "peak"))
    # raw plots read in the display units of the spec table and the red line (margin is unitless)
    return D.in_display_units(tr, ("value", "threshold"))


def episode_record(data: D.StoreData, i: int):
    """The episode's record; StoreProblem when it is missing or lies outside the store and its archive."""
    path = data.trajectory_path(i)
    if path is None or not path.is_file():
        raise D.StoreProblem(f"the trajectory of episode {data.episodes['episode_id'].iat[i]!r} is missing "
                             f"(expected {path}); robustness over time and replay need it")
    return record(str(path), path.stat().st_mtime)


def replay_record(data: D.StoreData, i: int):
    """`episode_record` for rendering: also StoreProblem when the MJCF file it names lies
    outside the store and its archive (its traces need no model file and stay available)."""
    rec = episode_record(data, i)
    D.check_mjcf_path(data, rec)
    return rec


@st.cache_resource(show_spinner=False)
def render_service():
    from dashboard.replay_bridge import RenderService
    return RenderService()


@st.cache_resource(show_spinner=False)
def replay_status() -> tuple[bool, str]:
    from dashboard.replay_bridge import available
    return available()


@st.cache_resource(show_spinner=False)
def _prewarmed() -> set:
    return set()


def prewarm_replays(c: "Ctx", n: int = 6) -> None:
    """Once per store: in the background, open the replay of the worst SBU episode and
    compile the scenes of the next few, so the first frame a user asks for is quick."""
    done = _prewarmed()
    if c.key in done or os.environ.get("SAFEVLA_NO_PREWARM"):
        return
    done.add(c.key)
    top = overview_tables(c.data, c.key, c.items)["top"]
    jobs = []
    for eid in top["episode_id"].head(n):
        i = c.data.index_of(eid)
        if i is None or c.data.missing_trajectory[i]:  # missing, or refused (outside the store)
            continue
        try:
            path = c.data.trajectory_path(i)
        except D.StoreProblem:  # a symlink pointing out: refused when opened, never prewarmed
            continue
        if path is not None:
            jobs.append((f"{c.key}#{i}", str(path)))
    if jobs:
        render_service().prewarm_episodes(jobs, roots=c.data.roots)


@st.cache_resource(show_spinner=False)
def _overview_warmer() -> tuple[ThreadPoolExecutor, dict]:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="overview-warm"), {}


def prewarm_overview(c: "Ctx") -> None:
    """After a What-if run under new thresholds: compute the Overview of that setting in the
    background (tables, charts, main table), so opening the Overview next finds it cached.

    One worker; a setting superseded by a newer slider move before its turn is skipped.
    A page that asks for the same setting meanwhile waits for this computation (Streamlit's
    cache computes each key once) instead of repeating it.
    """
    if c.page != "whatif" or not c.items or os.environ.get("SAFEVLA_NO_PREWARM"):
        return
    pool, latest = _overview_warmer()
    latest["want"] = (c.key, c.items)

    def job(data: D.StoreData, key: str, items: tuple) -> None:
        if latest.get("want") != (key, items):
            return
        try:
            overview_charts(data, key, items)  # and overview_tables
            main_table(data, key, items, False)
        except Exception:  # noqa: BLE001 - the page computes (and reports) it itself when opened
            logging.getLogger(__name__).exception("warming the Overview failed")

    pool.submit(job, c.data, c.key, c.items)


@st.cache_data(show_spinner=False, max_entries=400)
def frame_jpeg(_data: D.StoreData, key: str, i: int, step: int, items: tuple, highlight: bool) -> bytes:
    from dashboard.replay_bridge import jpeg
    rec = replay_record(_data, i)
    img = render_service().frame(f"{key}#{i}", rec, step, violations(_data, key, i, items), highlight=highlight)
    return jpeg(img)


@st.cache_resource(show_spinner=False, max_entries=32)
def violations(_data: D.StoreData, key: str, i: int, items: tuple):
    from dashboard.replay_bridge import build_violations
    v = verdicts(_data, key, items)
    rows = D.episode_specs(_data, v, i)
    bad = rows[rows["violated"] & ~rows["report_only"].astype(bool)].copy()
    if bad.empty:
        return ()
    worst = v.frame["worst_spec"].iat[i]
    bad["_w"] = bad["family"] != worst
    bad = bad.sort_values(["_w", "rho"])
    return build_violations(episode_record(_data, i), bad.to_dict("records"))


# ----------------------------------------------------------------------------- run context

@dataclasses.dataclass
class Ctx:
    """What every page needs: the store, the current thresholds and the verdicts under them."""

    data: D.StoreData
    knobs: dict
    overrides: dict
    items: tuple
    v: D.Verdicts
    store_param: str | None
    page: str

    @property
    def key(self) -> str:
        return self.data.key


def make_ctx(data: D.StoreData, page: str, store_param: str | None) -> Ctx:
    knobs = S.knob_values(data)
    overrides = D.knob_overrides(data.registry, knobs)
    items = _items(overrides)
    return Ctx(data=data, knobs=knobs, overrides=overrides, items=items, v=verdicts(data, data.key, items),
               store_param=store_param, page=page)


def ctx() -> Ctx:
    c = st.session_state.get("_ctx")
    if c is None:
        st.error("The dashboard context is missing: start the app with `safevla dashboard` "
                 "(or `streamlit run dashboard/app.py`).")
        st.stop()
    return c


def stop() -> None:
    """A page guard's `st.stop()` that still writes the view into the address bar first."""
    c = st.session_state.get("_ctx")
    if c is not None:
        S.sync_url(c.page, c.data, store_param=c.store_param)
    st.session_state["_switching"] = True  # nothing left for app.py to sync
    st.stop()


def go(page: str, **state) -> None:
    c = ctx()
    S.go(page, c.data, store_param=c.store_param, **state)


def thresholds_banner(c: Ctx) -> None:
    """Says when verdicts are re-scored under what-if thresholds, with a reset."""
    if not c.overrides:
        return
    defaults = D.knob_defaults(c.data.registry)
    moved = [f"{k.label} {c.knobs[k.name]:g} {k.unit}" for k in D.KNOBS
             if k.name in c.knobs and abs(c.knobs[k.name] - defaults.get(k.name, c.knobs[k.name])) > 1e-12]
    cols = st.columns([5, 1])
    cols[0].info("What-if thresholds in effect: " + ", ".join(moved) + ". Verdicts on this page are re-scored.",
                 icon=":material/tune:")
    cols[1].button("Reset thresholds", key=f"reset_thr_{c.page}", on_click=reset_knobs, args=(c.data,))


def reset_knobs(data: D.StoreData) -> None:
    for name, value in D.knob_defaults(data.registry).items():
        S.set_widget(f"knob.{name}", value)
    st.session_state.pop("w.preset", None)


def show(chart, **kw):
    """`st.altair_chart` at the chart's full width and the height its decorations need."""
    import altair as alt

    from dashboard.charts import display_height
    # facets cannot stretch (Vega-Lite sizes each cell): show them at their own width
    kw.setdefault("width", "content" if isinstance(chart, alt.FacetChart) else "stretch")
    return st.altair_chart(chart, height=display_height(chart) or "content", **kw)


def render_button_ui(label: str, *, key: str, tag, render, what: str, where=None, **button_kw):
    """A button that renders something slow (a clip, a figure) under a progress bar.

    `render(progress)` makes the result and reports with `progress(fraction, text)`. The
    result is kept in the session with `tag`, what it was made from, and returned on later
    runs while `tag` still holds: the bytes for `tag`, or None. A failed render is
    reported and the page stays usable.
    """
    if (where or st).button(label, key=key, **button_kw):
        bar = st.progress(0.0, text=f"Rendering {what} …")
        try:
            st.session_state[f"_{key}"] = (tag, render(lambda fraction, text: bar.progress(
                min(max(fraction, 0.0), 1.0), text=text)))
        except Exception as exc:  # noqa: BLE001 - whatever the renderer raises is shown, not a traceback
            st.error(f"Could not render {what}: {exc}")
        finally:
            bar.empty()
    got = st.session_state.get(f"_{key}")
    return got[1] if got is not None and got[0] == tag else None


def forget_render(key: str) -> None:
    """Drops what `render_button_ui(key=key)` kept, e.g. when the page shows another episode."""
    st.session_state.pop(f"_{key}", None)


def has_render(key: str) -> bool:
    """Whether `render_button_ui(key=key)` keeps a result (for whichever tag)."""
    return f"_{key}" in st.session_state


def file_safe(name: str) -> str:
    """`name` as a download file name: letters, digits, '-', '_' and '.' kept, anything else '_'."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def pct(x) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f}%"


# ----------------------------------------------------------------------------- paired comparison (issue 7)

@st.cache_resource(show_spinner=False, max_entries=8)
def comparison(_data: D.StoreData, key: str, items: tuple, models: tuple):
    """The paired comparison of `models` (`scoring.stats.compare.compare_models`), once per store,
    thresholds and model choice."""
    return D.comparison(verdicts(_data, key, items), models)


@st.cache_resource(show_spinner=False, max_entries=8)
def comparison_tables(_data: D.StoreData, key: str, items: tuple, models: tuple) -> dict:
    from scoring.cli.compare import comparison_tables as build
    return build(comparison(_data, key, items, models))


@st.cache_resource(show_spinner=False, max_entries=32)
def discordant(_data: D.StoreData, key: str, items: tuple, models: tuple, a: str, b: str, metric: str) -> pd.DataFrame:
    return D.discordant(_data, verdicts(_data, key, items), comparison(_data, key, items, models), a, b, metric)


def sync_url(page: str, data: D.StoreData, *, store_param: str | None = None) -> None:
    """`state.sync_url`, plus the link parameters a page keeps itself in
    `st.session_state["_params:<page>"]` (pages outside `state.PAGE_PARAMS`, e.g. Compare)."""
    extra = st.session_state.get(f"_params:{page}")
    if not extra:
        S.sync_url(page, data, store_param=store_param)
        return
    want = {**S.params_for(page, data, store_param=store_param), **extra}
    have = {}
    for k in st.query_params.keys():
        vals = st.query_params.get_all(k)
        have[k] = vals if len(vals) > 1 else st.query_params.get(k)
    norm = {k: (v if isinstance(v, str) or len(v) != 1 else v[0]) for k, v in want.items()}
    if have != norm:
        st.query_params.from_dict(want)


def side_by_side(images, captions, *, gap: int = 16, title: str | None = None):
    """Frames side by side (each (H, W, 3) uint8, heights may differ) on white, one caption
    (a string or lines) under each, an optional title above; a PIL image."""
    from PIL import Image

    from replay.render.highlight import paste_tile, text_tile

    ink, clear = (20, 20, 20), (0, 0, 0, 0)
    px = max(12, max(im.shape[1] for im in images) // 30)
    lines = [[c] if isinstance(c, str) else list(c) for c in captions]
    tiles = [[text_tile(t, px, ink, clear) for t in ls] for ls in lines]
    cap_h = max(sum(t.shape[0] + 2 for t in ts) for ts in tiles) + gap // 2
    head = text_tile(title, int(px * 1.2), ink, clear) if title else None
    top = gap + (head.shape[0] + gap // 2 if head is not None else 0)
    width = sum(im.shape[1] for im in images) + gap * (len(images) + 1)
    height = top + max(im.shape[0] for im in images) + gap // 2 + cap_h + gap // 2
    canvas = np.full((height + height % 2, width + width % 2, 3), 255, np.uint8)
    if head is not None:
        paste_tile(canvas, head, gap, gap)
    x = gap
    for im, ts in zip(images, tiles):
        canvas[top:top + im.shape[0], x:x + im.shape[1]] = im[..., :3]
        y = top + im.shape[0] + gap // 2
        for t in ts:
            paste_tile(canvas, t, x, y)
            y += t.shape[0] + 2
        x += im.shape[1] + gap
    return Image.fromarray(canvas)


def png_bytes(image, dpi: int = 200) -> bytes:
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG", dpi=(dpi, dpi))
    return buf.getvalue()


def pair_figure(data: D.StoreData, key: str, rows: tuple[int, int], steps: tuple[int, int], items: tuple,
                captions, *, title: str | None = None) -> bytes:
    """PNG of both episodes' frames at their steps (violations highlighted, red border on the
    violating frame), side by side with captions; rendered through the render queue."""
    svc = render_service()
    frames = [svc.frame(f"{key}#{i}", replay_record(data, i), int(s), violations(data, key, i, items))
              for i, s in zip(rows, steps)]
    return png_bytes(side_by_side(frames, captions, title=title))


def _pair_clip_job(svc, keys, recs, vss, labels, fps, out: str, progress) -> None:
    """Runs on the render thread: both episodes frame by frame, synced by step (an episode that
    has ended holds its last frame), each over its timeline bar (`replay.render.export.Timeline`),
    side by side, written as MP4 with imageio.

    Renders with the service's open replayers (the ones the page's frames came from) instead
    of opening and closing new ones: on EGL, freeing a renderer's context can spoil the
    frames of another renderer still open on the same thread."""
    import imageio.v2 as iio

    from dashboard.replay_bridge import FRAME_SIZE
    from replay.render.export import ClipTiming, Timeline
    from replay.render.highlight import paste_tile, text_tile

    rps = [svc._replayer(k, r, tuple(FRAME_SIZE)) for k, r in zip(keys, recs)]
    bars = [Timeline(rp.width, range(rp.n_steps), violations=vs, success_step=rp.success_step, window=rp.window,
                     dt=r.dt) for rp, r, vs in zip(rps, recs, vss)]
    heads = []
    for rp, label in zip(rps, labels):
        head = np.full((28, rp.width, 3), 32, np.uint8)  # the label strip above each clip
        heads.append(paste_tile(head, text_tile(label, 14, (255, 255, 255), (0, 0, 0, 0)), 6, 4))
    n = max(rp.n_steps for rp in rps)
    # either side's violating step is held 1 s and its neighbours slowed, as in `export_clip`
    repeats = ClipTiming().repeats(range(n), [v.step for vs in vss for v in vs], fps)
    writer = iio.get_writer(out, format="FFMPEG", mode="I", fps=fps, codec="libx264", pixelformat="yuv420p",
                            macro_block_size=1, ffmpeg_log_level="error",
                            output_params=["-preset", "veryfast", "-crf", "20"])
    try:
        for step in range(n):
            panels = []
            for rp, bar, head, vs in zip(rps, bars, heads, vss):
                s = min(step, rp.n_steps - 1)
                panels.append(np.concatenate([head, rp.frame(s, violation=vs), bar.render(s)], axis=0))
            h = max(p.shape[0] for p in panels)
            panels = [np.pad(p, ((0, h - p.shape[0]), (0, 0), (0, 0)), constant_values=255) for p in panels]
            gap = np.full((h, 8, 3), 255, np.uint8)
            frame = np.concatenate([panels[0], *[x for p in panels[1:] for x in (gap, p)]], axis=1)
            for _ in range(int(repeats[step])):
                writer.append_data(frame)
            if progress is not None:
                progress(step + 1, n)
    finally:
        writer.close()


def pair_clip(data: D.StoreData, key: str, rows: tuple[int, int], items: tuple, labels, *, fps: float = 20,
              progress=None) -> bytes:
    """MP4 bytes of both episodes side by side, synced by step (progress: (done, total))."""
    import tempfile

    recs = [replay_record(data, i) for i in rows]
    vss = [violations(data, key, i, items) for i in rows]
    svc = render_service()
    keys = [f"{key}#{i}" for i in rows]  # the keys of `frame_jpeg`, so its replayers are reused
    with tempfile.TemporaryDirectory(prefix="safevla-pair-") as tmp:
        out = str(Path(tmp) / "pair.mp4")
        svc._run_with_progress(lambda cb: _pair_clip_job(svc, keys, recs, vss, list(labels), fps, out, cb), progress)
        return Path(out).read_bytes()
