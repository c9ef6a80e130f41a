"""Writes the dashboard screenshots of docs/dashboard.md: every page at 1280x800, plus the
detail page of the worst successful-but-unsafe episode.

    python scripts/dashboard_screenshots.py [--store STORE] [--out docs/figures/dashboard]

Starts `safevla dashboard STORE` (the demo store by default) on a free loopback port,
drives Debian's chromium through Playwright with every request off this machine refused
(as a reader offline would see it), waits for each page's script run and its images, and
saves `dashboard_<page>.png`. Prints one JSON line: files written, and per page the
console errors and failed requests (both should be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "assets" / "demo" / "store"
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}
# file stem -> (sidebar link, page title); "detail" is opened on an SBU episode by link
PAGES = {"overview": ("Overview", "Overview"), "episodes": ("Episodes", "Episodes"),
         "compare": ("Compare", "Compare models"), "whatif": ("What-if", "What-if thresholds"),
         "export": ("Export", "Export")}
LOCAL = ("http://localhost", "http://127.0.0.1", "ws://localhost", "ws://127.0.0.1", "data:", "blob:")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dashboard(store: Path, port: int, *, cwd: Path | None = None) -> subprocess.Popen:
    """`safevla dashboard STORE` on `port`; returns once it answers its health check.

    `cwd` defaults to a scratch directory, so the options come from the command (not from a
    `.streamlit/config.toml` in the working directory)."""
    cwd = cwd or Path(tempfile.mkdtemp(prefix="safevla-shots-"))
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "scoring.cli", "dashboard", str(store), "--port", str(port),
                             "--headless"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the dashboard exited: {proc.stdout.read()[-2000:]}") from None
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the dashboard did not answer within 120 s")


def stop_dashboard(proc: subprocess.Popen, timeout: float = 15) -> None:
    """Stops a `start_dashboard` server: SIGTERM (the server's own shutdown), then a kill if it
    is still running after `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()


def settle(pg, extra: float = 0.8, timeout_ms: int = 120_000) -> None:
    time.sleep(extra)
    pg.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout_ms)
    time.sleep(0.5)


def wait_title(pg, want: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h1 = pg.locator("h1")
        if h1.count() and h1.first.inner_text().strip() == want:
            return
        time.sleep(0.25)
    raise RuntimeError(f"page {want!r} did not open")


class OfflineWatch:
    """Refuses every request that leaves this machine and records what failed."""

    def __init__(self, ctx, pg):
        self.external: list[str] = []
        self.failed: list[str] = []
        self.console: list[str] = []
        ctx.route("**/*", self._route)
        pg.on("console", lambda m: self.console.append(m.text[:200]) if m.type == "error" else None)
        pg.on("requestfailed", lambda r: self.failed.append(r.url[:200]))
        pg.on("response", lambda r: self.failed.append(f"{r.status} {r.url[:200]}") if r.status >= 400 else None)

    def _route(self, route):
        url = route.request.url
        if url.startswith(LOCAL):
            return route.continue_()
        self.external.append(url[:200])
        return route.abort()

    def take(self) -> dict:
        out = {"external": sorted(set(self.external)), "failed": sorted(set(self.failed)),
               "console_errors": list(self.console)}
        self.external.clear(), self.failed.clear(), self.console.clear()
        return out


def worst_sbu_episode(store: Path) -> str | None:
    sys.path.insert(0, str(ROOT))
    from dashboard import data as D
    data = D.open_store(store)
    top = D.top_sbu(data, D.verdicts(data), 1)
    return None if top.empty else str(top["episode_id"].iat[0])


def take_screenshots(url: str, out: Path, *, sbu_episode: str | None) -> dict:
    """Every page by its sidebar link, then the detail page of `sbu_episode`; returns the report."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"files": [], "pages": {}}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        ctx = browser.new_context(viewport=VIEWPORT)
        pg = ctx.new_page()
        pg.set_default_timeout(120_000)
        watch = OfflineWatch(ctx, pg)
        pg.goto(url)
        pg.get_by_test_id("stApp").wait_for()
        settle(pg, 2.0)
        for stem, (link, title) in PAGES.items():
            if stem != "overview":
                pg.locator('[data-testid="stSidebarNav"] a', has_text=link).first.click()
                settle(pg)
            wait_title(pg, title)
            settle(pg, 1.5)  # charts draw after the script run ends
            path = out / f"dashboard_{stem}.png"
            pg.screenshot(path=str(path))
            report["files"].append(str(path))
            if stem == "episodes":  # the table sits below the filters: show its key columns at 1280 px
                pg.get_by_test_id("stDataFrame").first.scroll_into_view_if_needed()
                time.sleep(1.0)
                path = out / "dashboard_episodes_table.png"
                pg.screenshot(path=str(path))
                report["files"].append(str(path))
            report["pages"][stem] = {**watch.take(), "deploy_button": pg.get_by_test_id("stAppDeployButton").count()}
        if sbu_episode:
            pg.goto(f"{url}/?page=detail&ep={quote(sbu_episode, safe='')}")
            pg.get_by_test_id("stApp").wait_for()
            settle(pg, 2.0)
            wait_title(pg, "Episode detail")
            player = 'iframe[title*="safevla_timeline"]'  # the chart and the replay frames (dashboard/player.py)
            try:  # the player's first picture: drawn by WebGL in the browser, or a MuJoCo frame from the server
                pg.wait_for_function("""(s) => { const f = document.querySelector(s); const d = f && f.contentDocument;
                    const r = d && d.querySelector('#timeline');
                    return !!r && r.dataset.firstDraw !== undefined; }""", arg=player, timeout=180_000)
            except Exception:  # noqa: BLE001 - no replay stack here: the page is still worth a picture
                pass
            try:  # server frames: every frame pre-rendered (the page reruns once then); WebGL needs none
                pg.wait_for_function("""(s) => { const f = document.querySelector(s); const d = f && f.contentDocument;
                    const r = d && d.querySelector('#timeline'); const status = d && d.querySelector('#status');
                    return !!r && !!status && (r.dataset.renderer === 'webgl'
                        || !/frames ready|not rendered/.test(status.textContent || '')); }""", arg=player, timeout=300_000)
            except Exception:  # noqa: BLE001 - a picture of the page as it is
                pass
            settle(pg, 3.0)
            path = out / "dashboard_detail.png"
            pg.screenshot(path=str(path))
            report["files"].append(str(path))
            if pg.locator(player).count():  # the timeline: chart panels beside the replay frame
                pg.locator(player).first.scroll_into_view_if_needed()
                time.sleep(2.0)
                path = out / "dashboard_detail_replay.png"
                pg.screenshot(path=str(path))
                report["files"].append(str(path))
            report["pages"]["detail"] = {**watch.take(), "episode": sbu_episode}
        browser.close()
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=DEMO, help="run store to show (default: the bundled demo store)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "dashboard", help="output directory")
    ap.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"error: {CHROMIUM} is absent: apt-get install -y chromium", file=sys.stderr)
        return 2
    if not (args.store / "manifest.json").exists():
        print(f"error: {args.store} is not a run store (no manifest.json)", file=sys.stderr)
        return 2
    port = args.port or free_port()
    t0 = time.monotonic()
    proc = start_dashboard(args.store, port)
    try:
        report = take_screenshots(f"http://localhost:{port}", args.out, sbu_episode=worst_sbu_episode(args.store))
    finally:
        stop_dashboard(proc)
    report["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
