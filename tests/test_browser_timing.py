"""benchmarks/browser_timing.py: the "fully drawn" rule the dashboard benchmark times with,
against a real `streamlit run` server and headless chromium."""

import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api")
if not os.path.exists(os.environ.get("SAFEVLA_CHROMIUM", "/usr/bin/chromium")):
    pytest.skip("chromium is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from browser_timing import Browser, NotDrawn, Server, dashboard_entry, now_ms, received, wait_drawn  # noqa: E402

from dashboard_helpers import build_store  # noqa: E402

OVERVIEW = {'[data-testid="stMetric"]': 6, '[data-testid="stDataFrame"]': 2,
            '[data-testid="stVegaLiteChart"] canvas': 3}


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    store = build_store(tmp_path_factory.mktemp("timing") / "store", 48, renderable=False)
    with Browser() as browser, Server(dashboard_entry(ROOT), store=store, cwd=ROOT,
                                      env={"SAFEVLA_NO_PREWARM": "1"}) as srv:
        srv.wait_healthy()
        yield browser, srv


def test_a_page_load_is_drawn_after_its_script_run_with_its_charts_on_canvases(running):
    browser, srv = running
    pg = browser.page()
    pg.goto(srv.url)
    p = wait_drawn(pg, since_ms=0.0, expect=OVERVIEW, need_run=False)
    finished = [t for t, s in p["runs"] if s == "notRunning"]
    assert finished and p["drawn_ms"] >= finished[-1] > 0
    assert p["counts"][2] >= 3  # the Overview's charts are drawn on canvases, not as SVG
    assert pg.locator('[data-testid="stVegaLiteChart"] svg').count() == 0
    pg.context.close()


def test_an_interaction_counts_only_a_run_it_started(running):
    browser, srv = running
    pg = browser.page()
    pg.goto(f"{srv.url}/whatif")
    wait_drawn(pg, since_ms=0.0, expect={'[data-testid="stSlider"]': 5}, need_run=False)
    t0 = now_ms(pg)
    with pytest.raises(NotDrawn, match="run seen=False"):  # nothing was touched: no run to wait for
        wait_drawn(pg, since_ms=t0, expect={}, timeout=2.0)
    thumb = pg.get_by_test_id("stSlider").filter(has_text="Contact force").get_by_role("slider")
    was = thumb.get_attribute("aria-valuenow")
    n0 = len(received(pg))
    t0 = now_ms(pg)
    # the frontend moves the thumb at once; a key that found the thumb without focus (a redraw
    # of the page took it, once in CI under load) is pressed again, so what is timed is the run
    for _ in range(3):
        thumb.focus()
        thumb.press("ArrowRight")
        try:
            pg.wait_for_function("([el, was]) => el.getAttribute('aria-valuenow') !== was",
                                 arg=[thumb.element_handle(), was], timeout=5_000)
            break
        except sync_api.TimeoutError:
            continue
    p = wait_drawn(pg, since_ms=t0, expect={'[data-testid="stMetric"]': 5})
    assert p["drawn_ms"] > t0
    assert any(t >= t0 and s == "running" for t, s in p["runs"])
    assert "force=" in pg.url  # the run wrote the view into the address bar
    assert len(received(pg)) > n0 and min(received(pg)[n0:]) > 0  # the run's messages, counted
    pg.context.close()


def test_what_counts_as_drawn_a_canvas_paint_yes_its_fallback_content_no(running):
    """A canvas's children are never drawn (glide-data-grid keeps its accessible copy of the
    cells there): a change there is not a visible change. A draw call on a canvas is one,
    though it changes no DOM."""
    from browser_timing import probe

    browser, srv = running
    pg = browser.page()
    pg.goto(srv.url)
    wait_drawn(pg, since_ms=0.0, expect=OVERVIEW, need_run=False)
    before = probe(pg)
    pg.evaluate("""() => { const c = document.querySelector('[data-testid="stVegaLiteChart"] canvas');
        const cell = document.createElement('span'); cell.textContent = 'an accessible cell'; c.appendChild(cell); }""")
    pg.wait_for_timeout(100)
    hidden = probe(pg)
    assert hidden["last"] == before["last"] and hidden["dom"] == before["dom"], "fallback content counted as drawn"
    pg.evaluate("""() => { const c = document.createElement('canvas'); c.getContext('2d').fillRect(0, 0, 4, 4); }""")
    painted = probe(pg)
    assert painted["paint"] > hidden["last"] and painted["last"] == painted["paint"]
    pg.evaluate("() => { document.body.appendChild(document.createElement('div')); }")
    pg.wait_for_timeout(100)
    shown = probe(pg)
    assert shown["dom"] > painted["paint"] and shown["last"] == shown["dom"]
    pg.context.close()
