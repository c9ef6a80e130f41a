"""Timing a Streamlit app in a real headless chromium: servers, pages and "fully drawn".

Used by `benchmarks/bench_dashboard.py`. "Fully drawn" is defined once, here:

  the app's status is idle (`stApp` has `data-test-script-state="notRunning"`), every
  element the page promises is in the DOM (e.g. its tables and chart canvases), and
  nothing visible then changes for `QUIET_S`; the time drawn is the LAST visible change
  before that quiet spell (so late chart and table paints count, the quiet wait does not).

A visible change is a DOM mutation outside a canvas, or a draw call on a canvas (the data
grid and the charts paint on canvases, which change no DOM). A mutation inside a canvas
is not one: a canvas's children are fallback content, never drawn (glide-data-grid updates
its accessible copy of the cells there about 0.2 s after painting them). An observer and
wrapped `CanvasRenderingContext2D` draw methods, installed before the page's first script,
stamp these with `performance.now()`, so the timestamps come from the browser itself, not
from polling.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM = os.environ.get("SAFEVLA_CHROMIUM", "/usr/bin/chromium")
QUIET_S = 0.6

_OBSERVER = """
(() => {
  const sv = window.__sv = {last: 0, runs: [], mutations: 0, unseen: 0, paint: 0};
  // A canvas's children are its fallback content, never drawn (glide-data-grid keeps its
  // accessible copy of the table's cells there, updated ~0.2 s after the canvas is painted).
  const inCanvas = (node) => {
    const el = node.nodeType === 1 ? node : node.parentElement;
    return !!(el && el.closest('canvas'));
  };
  const watch = () => new MutationObserver((records) => {
    const now = performance.now();
    let seen = 0;
    for (const r of records) {
      if (r.type === 'attributes' && r.attributeName === 'data-test-script-state') {
        // the value before this change too: a run that started and ended within one batch of
        // records reads "notRunning" twice from the element, but its end's old value is "running"
        if (r.oldValue === 'running') sv.runs.push([now, 'running']);
        sv.runs.push([now, r.target.getAttribute('data-test-script-state')]);
      }
      if (inCanvas(r.target)) sv.unseen += 1; else seen += 1;
    }
    if (seen) { sv.last = now; sv.mutations += seen; }
  }).observe(document, {subtree: true, childList: true, attributes: true, attributeOldValue: true,
                        characterData: true});
  watch();
  // What is painted on a canvas changes no DOM: every 2D draw call stamps its time (the data
  // grid and the charts draw on canvases).
  const proto = window.CanvasRenderingContext2D && CanvasRenderingContext2D.prototype;
  for (const name of ['fillText', 'strokeText', 'fillRect', 'strokeRect', 'clearRect', 'drawImage',
                      'putImageData', 'fill', 'stroke']) {
    const draw = proto && proto[name];
    if (typeof draw !== 'function') continue;
    proto[name] = function (...args) { sv.paint = performance.now(); return draw.apply(this, args); };
  }
})();
"""

_PROBE = """(selectors) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const counts = selectors.map((s) => document.querySelectorAll(s).length);
  return {state: app ? app.getAttribute('data-test-script-state') : null,
          last: Math.max(window.__sv.last, window.__sv.paint), dom: window.__sv.last, paint: window.__sv.paint,
          runs: window.__sv.runs, now: performance.now(), origin: performance.timeOrigin, counts,
          exception: document.querySelectorAll('[data-testid="stException"]').length};
}"""


class NotDrawn(RuntimeError):
    """The page did not reach "fully drawn" in time; the message says what was missing."""


def dashboard_entry(code: Path) -> Path:
    """What `streamlit run` starts for the checkout `code`: dashboard/server.py (the ASGI app
    `safevla dashboard` runs), or dashboard/app.py in a checkout from before it existed (a
    `--baseline` revision)."""
    server = Path(code) / "dashboard" / "server.py"
    return server if server.is_file() else Path(code) / "dashboard" / "app.py"


class Server:
    """`streamlit run APP` on a free port, as a context manager; `launched` is the epoch
    time just before the process was started (the cold-start origin)."""

    def __init__(self, app: Path, *, store: Path, cwd: Path, env: dict | None = None, log: Path | None = None):
        self.app, self.store, self.cwd = Path(app), Path(store), Path(cwd)
        self.env = {**os.environ, "MUJOCO_GL": "egl", **(env or {})}
        self._own_log = log is None  # a log we made is removed unless something failed
        self.log = log or Path(tempfile.mkstemp(prefix="safevla-bench-server-", suffix=".log")[1])
        self.proc = None
        self.url = ""
        self.launched = 0.0

    def __enter__(self) -> "Server":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from net_helpers import free_port

        port = free_port()
        self.launched = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(self.app), "--server.headless", "true",
             "--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
             "--", "--store", str(self.store)],
            cwd=self.cwd, env=self.env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        self.url = f"http://localhost:{port}"
        return self

    def wait_healthy(self, timeout: float = 120.0) -> float:
        """Epoch time the server first answered its health check."""
        deadline = time.time() + timeout
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2).read() == b"ok":
                    return time.time()
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise NotDrawn(f"streamlit did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._own_log and exc[0] is None:
            self.log.unlink(missing_ok=True)


class Browser:
    """One headless chromium; `page()` opens a fresh context (a new Streamlit session)
    with the observer installed."""

    def __enter__(self) -> "Browser":
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        return self

    def page(self, *, width: int = 1440, height: int = 1000):
        """A page in a new context; `received(pg)` lists the websocket messages it got."""
        ctx = self.browser.new_context(viewport={"width": width, "height": height})
        ctx.add_init_script(_OBSERVER)
        pg = ctx.new_page()
        pg.set_default_timeout(120_000)
        got: list[int] = []
        _RECEIVED[id(pg)] = got
        pg.on("websocket", lambda ws: ws.on("framereceived", lambda payload: got.append(len(payload))))
        return pg

    def __exit__(self, *exc) -> None:
        self.browser.close()
        self._pw.stop()


_RECEIVED: dict[int, list[int]] = {}  # id(page) -> byte size of each websocket message it received


def received(pg) -> list[int]:
    """Byte sizes of the websocket messages (Streamlit's deltas, one per element drawn or
    changed) `pg` has received so far: what a rerun sends, counted independently of the
    machine's load."""
    return _RECEIVED.get(id(pg), [])


def probe(pg, selectors=()) -> dict:
    return pg.evaluate(_PROBE, list(selectors))


def now_ms(pg) -> float:
    return pg.evaluate("performance.now()")


def wait_drawn(pg, *, since_ms: float, expect: dict[str, int] | None = None, timeout: float = 180.0,
               need_run: bool = True, need_change: bool = False) -> dict:
    """Waits for "fully drawn" after `since_ms` (page time); returns the probe with `drawn_ms`.

    `expect`: CSS selector -> least count that must be present. `need_run`: a script run
    must have started after `since_ms` (an interaction), else the first idle state counts
    (a page load). `need_change`: instead of a run seen, the page changed after `since_ms`
    (a page switch whose run was too quick for the frontend to show it running: the
    element's script state then never leaves "notRunning").
    """
    expect = expect or {}
    sels = list(expect)
    deadline = time.monotonic() + timeout
    while True:
        p = probe(pg, sels)
        ran = (any(t >= since_ms and s == "running" for t, s in p["runs"]) or not need_run
               or (need_change and p["last"] >= since_ms))
        present = all(c >= expect[s] for s, c in zip(sels, p["counts"]))
        if p["exception"]:
            raise NotDrawn(f"the page shows an exception: {pg.locator('[data-testid=stException]').first.inner_text()[:300]}")
        if p["state"] == "notRunning" and ran and present and p["now"] - p["last"] >= 1000 * QUIET_S:
            p["drawn_ms"] = p["last"]
            return p
        if time.monotonic() > deadline:
            missing = [s for s, c in zip(sels, p["counts"]) if c < expect[s]]
            raise NotDrawn(f"not drawn after {timeout:.0f} s: state={p['state']}, run seen={ran}, missing={missing}")
        time.sleep(0.05)


def archive_of(rev: str, repo: Path) -> Path:
    """The tree of git revision `rev` unpacked in a temp folder (the baseline code), its modules
    compiled as scripts/install.sh compiles a checkout's: where PYTHONDONTWRITEBYTECODE is set,
    a baseline left uncompiled would compile them from source at every server start."""
    out = Path(tempfile.mkdtemp(prefix=f"safevla-baseline-{rev[:10]}-"))
    tar = subprocess.run(["git", "-C", str(repo), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=tar, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "scoring", "replay", "dashboard"], cwd=out,
                   check=True, stdout=subprocess.DEVNULL)
    return out


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
