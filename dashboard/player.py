"""The playable episode timeline: a Streamlit custom component (`dashboard/player_static/`,
plain HTML/JS) that draws the robustness chart with vega-embed and plays the replay in the
browser, cursor and picture in sync, keys on the parent page.

The replay is drawn by the browser with WebGL (three.js, vendored under
`player_static/vendor/`): the scene converted once (`replay.render.web_scene`) and the
episode's poses are files in the component's own folder (`web/`), which Streamlit serves
with the component; the player fetches each once and steps without a request. Where the
browser has no WebGL, the player says so and the page sends frames rendered by MuJoCo on
the server instead (`RenderService.frames`, the violating step's neighbourhood first, into a
`FrameBatch` the page polls). The vega/vega-lite/vega-embed JavaScript comes from
vl-convert's bundle (no CDN): made once per environment by `scripts/install.sh` and copied
next to the component's files (made there if the install did not).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

STATIC = Path(__file__).with_name("player_static")
FRAME_QUALITY = 80
IDLE_STOP_S = 30.0  # frames nobody polled for this long stop rendering (their page was left)
MAX_ERRORS = 3  # an episode with more failed frames than this stops (the page shows the first error)


def frames(service, key: str, record, violations, n_steps: int, violating_step: int | None, *,
           size: tuple[int, int], camera: str | None = None):
    """The episode's frames as `data:` URLs, pre-rendered in the background by `service`
    (`RenderService.frames`), every step once, nearest to the violating step first (ties:
    the later step first, so playback from the violation can start), else from step 0."""
    return service.frames(key, record, range(int(n_steps)), violations, camera=camera, size=tuple(size),
                          order="in-order" if violating_step is None else "violation-first",
                          focus=violating_step, window=None, encode="data-url", jpeg_quality=FRAME_QUALITY,
                          idle_stop_s=IDLE_STOP_S, max_errors=MAX_ERRORS)


def component_dir(cache: Path | None = None, *, vega: bool = True) -> Path:
    """A folder holding the component's files and, with `vega`, vl-convert's vega bundle
    (`vega_bundle`). The replay's web files live in it too (`dashboard.web_files.web_dir`,
    which needs no bundle: a page's first link converts its scene without waiting for one)."""
    import vl_convert

    base = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "safevla" / "player"
    out = base / f"vl-convert-{vl_convert.__version__}"
    out.mkdir(parents=True, exist_ok=True)
    for f in (*STATIC.iterdir(), *(STATIC / "vendor").iterdir()):  # refreshed every start: edits show up at once
        if f.is_file():
            dest = out / f.relative_to(STATIC)
            dest.parent.mkdir(exist_ok=True)
            if not dest.exists() or dest.stat().st_size != f.stat().st_size or f.parent == STATIC:
                shutil.copyfile(f, dest)
    if vega:
        vega_bundle(out / "vega-bundle.js")
    return out


def installed_vega_bundle() -> Path:
    """Where `scripts/install.sh` leaves the vega bundle: in the environment, one per vl-convert
    version, so that a first detail page under a new $HOME (or $XDG_CACHE_HOME) copies it."""
    import vl_convert

    return Path(sys.prefix) / "share" / "safevla" / f"vl-convert-{vl_convert.__version__}" / "vega-bundle.js"


def vega_bundle(dest: Path) -> Path:
    """vl-convert's vega/vega-lite/vega-embed bundle (~0.9 MB of JavaScript) at `dest`: copied
    from `installed_vega_bundle()` where there is one, else made (1.3-2 s of CPU on a 2-core
    machine, which a first detail page under a new $HOME would spend beside its scene's conversion)."""
    if dest.exists():
        return dest
    import vl_convert

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    installed = installed_vega_bundle()
    try:
        shutil.copyfile(installed, tmp)
    except OSError:
        tmp.write_text(vl_convert.javascript_bundle(), encoding="utf-8")
    tmp.replace(dest)
    return dest


_COMPONENT = None
_COMPONENT_LOCK = threading.Lock()


def _component():
    global _COMPONENT
    with _COMPONENT_LOCK:
        if _COMPONENT is None:
            import streamlit.components.v1 as components

            _COMPONENT = components.declare_component("safevla_timeline", path=str(component_dir()))
        return _COMPONENT


def violated_by_step(traces) -> dict[str, str]:
    """{step: "spec, spec"} for the steps where an active spec is violated."""
    if traces is None or traces.empty:
        return {}
    bad = traces.loc[traces["violated"].astype(bool), ["step", "spec"]].drop_duplicates().sort_values(["step", "spec"])
    out: dict[str, list[str]] = {}
    for step, spec in zip(bad["step"].to_numpy(), bad["spec"].to_numpy()):  # not a groupby: 0.05 s for 500 steps
        out.setdefault(str(int(step)), []).append(str(spec))
    return {k: ", ".join(v) for k, v in out.items()}


def timeline(*, episode: str, spec: Mapping, n_steps: int, dt: float, step: int, violating_step: int | None,
             frames: Mapping[int, str], total: int, violated: Mapping[str, str], key: str,
             answers: str | None = None, prerendering: bool = False, height: int | None = None,
             web: Mapping | None = None):
    """Draws the timeline; returns its last value ({step, seq, event, episode}) or None.

    `answers` is the seq of the player's last value this run handled (None: none yet). The
    player moves to `step` only when this run had seen its newest value: a run that had not
    seen it started before that value arrived, and its step is older than the player's.
    `prerendering`: frames are still being rendered and polled for; a player drawn without any
    frame then asks for the first one (the value's event "frames").
    `web`: {"scene": url, "poses": url} of the episode's web scene and poses, relative to the
    component (`web_files`): the player draws them with WebGL, or, without WebGL, sends the
    event "nowebgl" and shows `frames`."""
    return _component()(episode=episode, spec=dict(spec), n_steps=int(n_steps), dt=float(dt), step=int(step),
                        answers=None if answers is None else str(answers),
                        vstep=None if violating_step is None else int(violating_step),
                        frames={str(k): v for k, v in frames.items()}, total=int(total), violated=dict(violated),
                        prerendering=bool(prerendering), web=None if web is None else dict(web), key=key,
                        default=None, height=height)
