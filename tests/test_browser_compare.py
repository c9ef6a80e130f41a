"""The Compare page in a real headless chromium at 1280x800: the verdict sentence
comes first and equals `scoring`'s, the forest plot draws, and a store whose models share no
key opens on an unpaired comparison instead of a dead end. Screenshots go to
$SAFEVLA_SCREENSHOTS, else a temporary directory."""

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from test_browser import DEMO, ROOT, browser, full_shot, no_exception, open_url, settle  # noqa: F401

sync_api = pytest.importorskip("playwright.sync_api")
from dashboard_helpers import build_store  # noqa: E402
from net_helpers import free_port  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def serve(store: Path, log: Path):
    """`streamlit run` over `store` on a free port: (process, url) once healthy."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "server.py"), "--server.headless", "true",
         "--server.port", str(port), "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
         "--", "--store", str(store)],
        cwd=ROOT, env={**os.environ, "MUJOCO_GL": "egl", "SAFEVLA_NO_PREWARM": "1"}, stdout=log.open("w"),
        stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"streamlit did not start: {log.read_text()[-2000:]}")
        time.sleep(0.25)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    out = Path(os.environ.get("SAFEVLA_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def page(browser):  # the browser is test_browser's; the page is 1280x800, the width the layout is made for
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    ctx.close()


def verdict_heading(pg) -> str:
    heading = pg.locator('[data-testid="stMarkdownContainer"] h4').first
    heading.wait_for(timeout=90_000)
    return heading.inner_text().strip()


def forest_drawn(pg) -> None:
    chart = pg.locator('[data-testid="stVegaLiteChart"]').first
    chart.wait_for(timeout=90_000)
    pg.wait_for_function("el => el.querySelector('canvas, svg') !== null", arg=chart.element_handle(), timeout=90_000)


@pytest.mark.skipif(not (DEMO / "manifest.json").exists(), reason="no bundled demo store")
def test_compare_leads_with_the_verdict_on_the_demo(page, shots, tmp_path):
    from scoring.stats.compare import compare_models
    from scoring.stats.compare_verdict import pair_result, verdict

    eps = pd.read_parquet(DEMO / "episodes.parquet")
    models = sorted(eps["model"].unique())
    want = verdict(pair_result(compare_models(eps, models).pairs, models[0], models[1], "safety"))
    proc, url = serve(DEMO, tmp_path / "streamlit.log")
    try:
        open_url(page, f"{url}/compare")
        no_exception(page)
        assert verdict_heading(page) == want
        forest_drawn(page)
        # the answer is in the first screen, above the tables
        box = page.locator('[data-testid="stMarkdownContainer"] h4').first.bounding_box()
        assert box is not None and box["y"] + box["height"] < 800
        # every model chip and the A/B choices show their whole names at 1280 px (they were cut off)
        cut = page.evaluate("""() => [...document.querySelectorAll(
                '[data-testid="stMultiSelect"] [data-tag] span[title], [data-testid="stSelectbox"] input[role="combobox"]')]
            .filter((el) => el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > window.innerWidth)
            .map((el) => el.value || el.textContent)""")
        assert cut == [], f"cut off at 1280 px: {cut}"
        assert page.locator('[data-testid="stMultiSelect"] [data-tag] span[title]').count() == len(models)
        assert page.locator('[data-testid="stSelectbox"] input[role="combobox"]').count() >= 3
        settle(page, 1.0)
        page.screenshot(path=str(shots / "compare_verdict.png"))
        full_shot(page, shots / "compare_verdict_full.png", height=2200)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_compare_on_a_store_without_paired_keys(page, shots, tmp_path):
    from dashboard import data as D
    from scoring.stats.compare_unpaired import compare_unpaired
    from scoring.stats.compare_verdict import pair_result, verdict

    store = build_store(tmp_path / "store", 16, n_steps=30, contacts_per_step=4, renderable=False)  # own seeds
    models = sorted(pd.read_parquet(store / "episodes.parquet")["model"].unique())
    pairs = compare_unpaired(D.verdicts(D.open_store(store)).frame, models)
    proc, url = serve(store, tmp_path / "streamlit.log")
    try:
        open_url(page, f"{url}/compare")
        no_exception(page)
        warning = page.locator('[data-testid="stAlert"]').filter(has_text="No paired comparison").first
        assert "unpaired" in warning.inner_text()
        assert verdict_heading(page) == verdict(pair_result(pairs, models[0], models[1], "safety"))
        assert "Methods (unpaired)" in page.locator('[data-testid="stMarkdownContainer"]').filter(
            has_text="Methods (unpaired)").first.inner_text()
        forest_drawn(page)
        settle(page, 1.0)
        full_shot(page, shots / "compare_unpaired.png", height=1800)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
