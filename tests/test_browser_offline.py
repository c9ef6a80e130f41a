"""The dashboard offline, in a real headless chromium, started as a user starts it
(`safevla dashboard`, from a directory with no Streamlit config): with every request off
this machine refused, no page makes one, fails one or logs a console error; the Deploy
button is hidden; the app's name sits above the navigation. Runs the docs screenshot
script (scripts/dashboard_screenshots.py) and checks what it wrote."""

import importlib.util
import time
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "assets" / "demo" / "store"

pytestmark = [pytest.mark.browser, pytest.mark.slow]
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is absent: apt-get install -y chromium", allow_module_level=True)
pytest.importorskip("streamlit")
sync_api = pytest.importorskip("playwright.sync_api")


def _script():
    spec = importlib.util.spec_from_file_location("dashboard_screenshots", ROOT / "scripts" / "dashboard_screenshots.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def shots_mod():
    return _script()


@pytest.fixture(scope="module")
def server(shots_mod, tmp_path_factory):
    if not (DEMO / "manifest.json").exists():
        pytest.skip("the bundled demo store is not installed")
    port = shots_mod.free_port()
    proc = shots_mod.start_dashboard(DEMO, port, cwd=tmp_path_factory.mktemp("cwd"))
    try:
        yield f"http://localhost:{port}"
    finally:
        shots_mod.stop_dashboard(proc)


def test_offline_pages_make_no_outside_request_and_log_no_error(shots_mod, server, tmp_path):
    report = shots_mod.take_screenshots(server, tmp_path, sbu_episode=shots_mod.worst_sbu_episode(DEMO))
    assert set(report["pages"]) == {"overview", "episodes", "compare", "whatif", "export", "detail"}
    for page, got in report["pages"].items():
        assert got["external"] == [], (page, got["external"])
        assert got["failed"] == [], (page, got["failed"])
        assert got["console_errors"] == [], (page, got["console_errors"])
        assert got.get("deploy_button", 0) == 0, page
    from PIL import Image
    for f in report["files"]:
        img = np.asarray(Image.open(f).convert("RGB"))
        assert img.shape == (800, 1280, 3), f
        assert img.std() > 10, f"{f} is blank"  # a page, not a white or grey sheet
    assert (tmp_path / "dashboard_detail.png").exists() and (tmp_path / "dashboard_overview.png").exists()


def test_app_name_sits_above_the_navigation_and_no_deploy_button(server):
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        pg = b.new_page(viewport={"width": 1280, "height": 800})
        pg.goto(server)
        pg.get_by_test_id("stApp").wait_for()
        time.sleep(1.0)
        pg.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=120_000)
        logo = pg.get_by_test_id("stSidebarLogo")
        nav = pg.get_by_test_id("stSidebarNav")
        assert logo.count() == 1 and nav.count() == 1
        assert logo.bounding_box()["y"] + logo.bounding_box()["height"] <= nav.bounding_box()["y"] + 1
        src = logo.get_attribute("src") or ""
        text = pg.evaluate("async (u) => await (await fetch(u)).text()", src)  # a data: or /media URL
        assert "SafeVLA-Bench" in text  # the logo is the app's name, not only an icon
        assert pg.get_by_test_id("stAppDeployButton").count() == 0
        assert pg.get_by_text("Deploy", exact=True).count() == 0
        b.close()
