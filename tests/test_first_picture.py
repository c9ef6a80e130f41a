"""A link's first picture, in a real headless chromium with WebGL (SwiftShader) against
`streamlit run dashboard/server.py` on the demo store (what `safevla dashboard` runs).

The first run of a browser session on the detail page sends the title and the player alone;
the picker, the header, the controls and the sidebar's store chooser follow the first picture
(dashboard/views/detail.py, `first_picture_alone`), in the space kept for them, the player's
frame left as it is. A player that never draws leaves the page whole after
`FIRST_PICTURE_WAIT_S`.
"""

from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.render]
sync_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: apt-get install -y chromium", allow_module_level=True)

from dashboard.views.detail import FIRST_PICTURE_WAIT_S  # noqa: E402
from dashboard_helpers import TIMELINE_IFRAME, WEBGL_ARGS, streamlit_server, wait_timeline  # noqa: E402

# each element kind's first entry into the page, in ms since navigation
_FIRSTS = """window.__firsts = {};
new MutationObserver(() => {
  for (const id of ['stCustomComponentV1', 'stSelectbox', 'stSlider', 'stMetric', 'stTextInput', 'stMultiSelect'])
    if (!(id in window.__firsts) && document.querySelector(`[data-testid="${id}"]`))
      window.__firsts[id] = performance.now();
}).observe(document, {childList: true, subtree: true});"""
WIDGETS = ("stSelectbox", "stSlider", "stMetric", "stTextInput", "stMultiSelect")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    log = tmp_path_factory.mktemp("first_picture") / "streamlit.log"
    with streamlit_server(ROOT / "assets" / "demo" / "store", log, env={"SAFEVLA_NO_PREWARM": "1"}) as url:
        yield url


@pytest.fixture
def page():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=WEBGL_ARGS)
        try:
            pg = browser.new_page(viewport={"width": 1440, "height": 1000})
            pg.add_init_script(_FIRSTS)
            yield pg
        finally:
            browser.close()


def _player_top(pg) -> float:
    return pg.evaluate("(s) => document.querySelector(s).getBoundingClientRect().top", TIMELINE_IFRAME)


def test_a_link_draws_the_player_first_and_the_rest_around_it(dashboard, page):
    pg = page
    pg.goto(f"{dashboard}/detail")
    wait_timeline(pg, "r.dataset.renderer === 'webgl' && r.dataset.firstDraw !== undefined", timeout=90)
    top = _player_top(pg)
    pg.evaluate("(s) => { document.querySelector(s).contentWindow.__kept = true; }", TIMELINE_IFRAME)
    pg.get_by_text("Why each spec is active or inactive").wait_for(timeout=60_000)  # the run "drawn" started
    for name in WIDGETS:
        pg.get_by_test_id(name).first.wait_for(state="attached", timeout=30_000)
    firsts = pg.evaluate("window.__firsts")
    assert all(firsts[name] > firsts["stCustomComponentV1"] for name in WIDGETS), firsts
    # the same frame, where it was: the space kept above it held what came (1440 px wide)
    assert pg.locator(TIMELINE_IFRAME).count() == 1
    assert pg.evaluate("(s) => document.querySelector(s).contentWindow.__kept === true", TIMELINE_IFRAME)
    assert abs(_player_top(pg) - top) < 60, (top, _player_top(pg))
    assert pg.get_by_test_id("stException").count() == 0


def test_a_player_that_never_draws_leaves_the_page_whole(dashboard, page):
    pg = page
    pg.route("**/component/**", lambda route: route.abort())  # the player's frame never loads
    pg.goto(f"{dashboard}/detail")
    pg.get_by_test_id("stCustomComponentV1").wait_for(state="attached", timeout=60_000)
    # the picker, the controls and the sidebar's store chooser all the same, after the wait
    for name in ("stSelectbox", "stSlider", "stTextInput"):
        pg.get_by_test_id(name).first.wait_for(state="attached", timeout=1000 * (FIRST_PICTURE_WAIT_S + 60))
    firsts = pg.evaluate("window.__firsts")
    assert firsts["stSelectbox"] - firsts["stCustomComponentV1"] > 1000 * FIRST_PICTURE_WAIT_S * 0.8, firsts
    assert pg.get_by_test_id("stException").count() == 0
