"""Shared by the dashboard test modules: the synthetic-store script and AppTest checks."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")


@functools.cache
def synthetic_store_script():
    """scripts/make_synthetic_store.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_synthetic_store", ROOT / "scripts" / "make_synthetic_store.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_store(out: Path, n: int, *, n_steps: int = 60, contacts_per_step: int = 6, renderable: bool) -> Path:
    return synthetic_store_script().build_store(out, n, n_steps=n_steps, contacts_per_step=contacts_per_step,
                                                renderable=renderable)


def app(store, **params):
    """`dashboard/app.py` run once in an AppTest on `store`, with `params` as the link's query."""
    from streamlit.testing.v1 import AppTest

    os.environ["SAFEVLA_STORES"] = str(store)  # the dashboard opens a linked store only if allowed
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["store"] = str(store)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def qp(at, key: str) -> list[str]:
    """A query parameter's values as a list (AppTest keeps single values as strings)."""
    v = at.query_params.get(key)
    return [] if v is None else [v] if isinstance(v, str) else list(v)


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def player_drew(at):
    """Runs the detail page as after its player's first picture: the browser's player sends the
    value "drawn" (the WebGL player) and the page's next run draws the tables that follow it (the
    server-frame player draws them on that run too)."""
    from dashboard.detail_timeline import MODE_SEP, TIMELINE_KEY

    tag = at.session_state["_timeline_tag"]
    at.session_state[TIMELINE_KEY] = {"step": 0, "seq": f"drawn:{tag}", "event": "drawn", "episode": f"{tag}{MODE_SEP}margin"}
    return ok(at.run())


def metric(at, label: str) -> str:
    hits = [m.value for m in at.metric if m.label == label]
    assert hits, f"no metric {label!r}; have {[m.label for m in at.metric]}"
    return hits[0]


# ----------------------------------------------------------------------------- timeline player (browser)

@contextlib.contextmanager
def streamlit_server(store: Path, log: Path, *, env: dict | None = None):
    """`streamlit run dashboard/server.py --store STORE` (what `safevla dashboard` runs) on a free
    port; yields its URL once it answers its health check, fails the test with the log's tail if
    it does not within 60 s, and stops it on exit."""
    import subprocess
    import sys
    import time
    import urllib.request

    import pytest
    from net_helpers import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "server.py"), "--server.headless", "true",
         "--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
         "--", "--store", str(store)],
        cwd=ROOT, env={**os.environ, "MUJOCO_GL": "egl", **(env or {})}, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"streamlit did not start: {log.read_text()[-2000:]}")
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


WEBGL_ARGS = ["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"]  # chromium draws WebGL
TIMELINE_IFRAME = 'iframe[title*="safevla_timeline"]'


def timeline_attr(pg, name: str) -> str | None:
    """A data attribute of the timeline player's root (#timeline) in the page's component iframe."""
    return pg.evaluate("""([sel, name]) => { const f = document.querySelector(sel);
        const r = f && f.contentDocument && f.contentDocument.querySelector('#timeline');
        return r ? r.getAttribute(name) : null; }""", [TIMELINE_IFRAME, name])


def wait_timeline(pg, expr: str, timeout: float = 120.0) -> None:
    """Waits until `expr` (JS, over `r` = the player's root, `img` = its frame) holds; if it
    never does, fails with what the player and the page showed (`player_state`)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        pg.wait_for_function(f"""(sel) => {{ const f = document.querySelector(sel);
            const d = f && f.contentDocument; const r = d && d.querySelector('#timeline');
            const img = d && d.querySelector('#frame'); if (!r || !img) return false; return ({expr}); }}""",
                             arg=TIMELINE_IFRAME, timeout=timeout * 1000)
    except PlaywrightTimeout as e:
        raise AssertionError(f"the player never reached {expr} in {timeout} s: {player_state(pg)}") from e


def player_state(pg) -> dict:
    """The player's data attributes and lines (renderer, status) and the page's exceptions."""
    return pg.evaluate("""(sel) => { const f = document.querySelector(sel);
        const d = f && f.contentDocument; const r = d && d.querySelector('#timeline');
        const text = (id) => { const e = d && d.getElementById(id); return e ? e.textContent : null; };
        return { frames: document.querySelectorAll(sel).length, data: r ? { ...r.dataset } : null,
                 renderer: text('renderer'), status: text('status'),
                 exceptions: [...document.querySelectorAll('[data-testid="stException"]')].map((e) => e.innerText) }; }""",
                       TIMELINE_IFRAME)


def timeline_frame(pg, step: int, timeout: float = 120.0):
    """The RGB pixels (numpy) the player shows once its frame is `step`'s."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    wait_timeline(pg, f"img.dataset.step === '{int(step)}' && img.complete && img.naturalWidth > 0", timeout)
    src = pg.evaluate("(sel) => document.querySelector(sel).contentDocument.querySelector('#frame').src",
                      TIMELINE_IFRAME)
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB"))
