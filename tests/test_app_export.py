"""The Export page's replay section through AppTest on real MuJoCo renders of a
synthetic store: the triptych's format choice replaces a stale download, the PDF is vector
text, and rendered clips are previewed (held violating step) with their downloads."""

import io
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard_helpers import build_store, ok  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
pytestmark = [pytest.mark.render, pytest.mark.slow]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from dashboard.replay_bridge import available
    good, why = available()
    if not good:
        pytest.skip(why)
    return build_store(tmp_path_factory.mktemp("export") / "store", 16, n_steps=40, contacts_per_step=4,
                       renderable=True)


@pytest.fixture(autouse=True)
def _no_prewarm(monkeypatch):
    monkeypatch.setenv("SAFEVLA_NO_PREWARM", "1")


def export_page(store: Path) -> tuple[AppTest, str]:
    """The Export page with one unsafe episode chosen for the replay section."""
    eps = pd.read_parquet(store / "episodes.parquet")
    eid = str(eps[~eps["safe"].astype(bool)]["episode_id"].iloc[0])
    os.environ["SAFEVLA_STORES"] = str(store)
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["store"] = str(store)
    at.query_params["page"] = "export"
    at.query_params["ep"] = eid
    at.run()
    at.multiselect(key="x_eps").set_value([eid]).run()
    return ok(at), eid


def triptych_downloads(at) -> list[str]:
    return [b.proto.label for b in at.get("download_button") if "triptych" in b.proto.label]


def test_changing_the_format_replaces_the_stale_download(store):
    at, eid = export_page(store)
    assert triptych_downloads(at) == []
    at.button(key="x_tri").click().run()
    ok(at)
    assert triptych_downloads(at) == ["Download triptych (PNG)"]
    assert at.get("image"), "no PNG preview"
    at.radio(key="x_tri_fmt").set_value("pdf").run()
    ok(at)
    # the PNG download is gone, and the page says why there is none for PDF yet
    assert triptych_downloads(at) == []
    assert any("render it again for PDF" in c.value for c in at.caption)
    at.button(key="x_tri").click().run()
    ok(at)
    assert triptych_downloads(at) == ["Download triptych (PDF)"]
    fmt, blob = at.session_state["_x_tri"][1]
    assert fmt == "pdf" and blob.startswith(b"%PDF")
    pdftotext = shutil.which("pdftotext")
    if pdftotext is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    text = subprocess.run([pdftotext, "-", "-"], input=blob, capture_output=True, check=True).stdout.decode()
    assert "Safety violation" in text and f"episode {eid}" in text and "(step " in text


def test_rendered_clips_are_previewed_and_hold_the_violation(store):
    import imageio.v3 as iio

    at, eid = export_page(store)
    assert not at.get("video")
    at.button(key="x_clips").click().run()
    ok(at)
    assert len(at.get("video")) == 1
    assert any(b.proto.label == f"{eid}.mp4" for b in at.get("download_button"))
    clips = at.session_state["_x_clips"][1]
    n_steps = int(pd.read_parquet(store / "episodes.parquet").set_index("episode_id").loc[eid, "n_steps"])
    frames = iio.imread(io.BytesIO(clips[eid]), extension=".mp4", index=None)
    # one frame per step, plus 19 for the 1 s hold at 20 fps, plus 3 per slowed neighbour (4x)
    assert frames.shape[0] >= n_steps + 19
    assert frames.shape[0] <= n_steps + 19 + 3 * 10 * 3  # at most three violated specs' neighbourhoods
    # the held frames are one image repeated: a run of >= 20 equal consecutive frames (codec noise aside)
    diffs = np.abs(np.diff(frames.astype(np.int16), axis=0)).mean(axis=(1, 2, 3))
    run = longest = 0
    for d in diffs:
        run = run + 1 if d < 0.5 else 0
        longest = max(longest, run)
    assert longest >= 19


def test_forest_plot_is_among_the_exported_charts(store):
    from dashboard import charts
    from dashboard.forest import forest_chart, forest_frame
    from scoring.stats.compare_unpaired import compare_unpaired

    at, _ = export_page(store)
    box = at.selectbox(key="x_chart")
    models = sorted(pd.read_parquet(store / "episodes.parquet")["model"].unique())
    label = f"Compare: {models[0]} vs {models[1]}, every difference with its 95% CI (forest plot)"
    assert label in box.options  # options show their labels
    box.set_value("compare_forest").run()
    ok(at)
    assert at.selectbox(key="x_chart").value == "compare_forest"
    assert any(b.proto.label.startswith("Download ") for b in at.get("download_button") if "triptych" not in b.proto.label)
    # this synthetic store's models drew their own seeds: the forest is the unpaired one, and it exports
    eps = pd.read_parquet(store / "episodes.parquet")
    chart = forest_chart(forest_frame(compare_unpaired(eps, models, n_resamples=200), models[0], models[1]),
                         models[0], models[1])
    assert charts.chart_bytes(chart, "pdf").startswith(b"%PDF")
