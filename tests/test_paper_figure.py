"""scoring.report.paper_figure: Figure 2 (`safevla figure --paper fig2`, the dashboard's
Overview and Export): the scatter and its frontier, the chart spec, the exported files, and
that scoring imports without Altair."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pandas as pd
import pytest

from chart_helpers import chart_marks, chart_rows, two_model_cells
from scoring.cli.main import main
from scoring.report.paper_figure import (MODEL_PALETTE, figure2_from_store, pareto_front, rate_axis_domain,
                                         sr_safety_scatter)

DEMO = Path(__file__).parent.parent / "assets" / "demo" / "store"


_data, _marks = chart_rows, chart_marks


@pytest.fixture
def agg():
    return two_model_cells()


@pytest.fixture(scope="module")
def spec():
    return figure2_from_store(DEMO).to_dict()


def test_scoring_imports_the_figure_without_altair_or_the_dashboard():
    # scoring imports numpy/pandas/pyarrow/scipy only at module level: Altair is the dashboard extra's
    code = ("import sys, scoring.report.paper_figure, replay.render.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('altair', 'dashboard', 'streamlit', 'vl_convert')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_pareto_front_keeps_only_non_dominated_points():
    pts = pd.DataFrame({"x": [0.9, 0.5, 0.8, 0.4, np.nan, 0.8], "y": [0.3, 0.9, 0.6, 0.5, 1.0, 0.6]})
    front = pareto_front(pts, "x", "y")
    # (0.4, 0.5) is dominated by (0.8, 0.6); NaN never on the front; equal points both stay
    assert front.tolist() == [True, True, True, False, False, True]


def test_sr_safety_scatter_layers_encodings_and_data(agg):
    spec = sr_safety_scatter(agg).to_dict()
    assert _marks(spec) == ["line", "line", "rule", "rule", "point"]
    diag, front, xerr, yerr, points = spec["layer"]
    assert points["encoding"]["x"]["field"] == "sr" and points["encoding"]["y"]["field"] == "safety"
    assert points["encoding"]["color"]["field"] == "model" and points["encoding"]["shape"]["field"] == "suite"
    assert points["encoding"]["x"]["scale"]["domain"] == [0, 1]
    assert (xerr["encoding"]["x"]["field"], xerr["encoding"]["x2"]["field"]) == ("sr_lo", "sr_hi")
    assert (yerr["encoding"]["y"]["field"], yerr["encoding"]["y2"]["field"]) == ("safety_lo", "safety_hi")
    assert front["transform"] == [{"filter": "datum.frontier"}]
    rows = _data(spec, points)
    assert [r["cell"] for r in rows] == ["a · s1", "a · s2", "b · s1", "b · s2"]
    assert [r["sr"] for r in rows] == agg["sr"].tolist()
    assert [r["frontier"] for r in rows] == [True, True, True, False]


def test_scatter_axes_fit_the_data_and_models_get_distinct_hues(agg):
    from dashboard.charts import VIOLATION_RED

    narrow = agg.assign(sr=[0.9, 0.85, 0.8, 0.95], sr_lo=[0.75, 0.7, 0.66, 0.8], sr_hi=[0.97, 0.93, 0.9, 0.99],
                        safety=[0.0, 0.05, 0.1, 0.02], safety_lo=[0.0, 0.01, 0.03, 0.0],
                        safety_hi=[0.07, 0.14, 0.2, 0.09])
    spec = sr_safety_scatter(narrow).to_dict()
    points = spec["layer"][-1]
    assert points["encoding"]["x"]["scale"]["domain"] == [0.6, 1.0]
    assert points["encoding"]["y"]["scale"]["domain"] == [0.0, 0.3]
    assert rate_axis_domain(narrow.assign(sr=np.nan, sr_lo=np.nan, sr_hi=np.nan), "sr") == [0.0, 1.0]
    rng = points["encoding"]["color"]["scale"]["range"]
    assert rng == MODEL_PALETTE and VIOLATION_RED not in rng  # red marks violations on every page

    def hue(c):
        import colorsys
        r, g, b = (int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))
        return colorsys.rgb_to_hls(r, g, b)[0] * 360
    # neighbouring model colours differ in hue, not only in lightness (no dark blue next to light blue)
    for a, b in zip(rng[:4], rng[1:5]):
        assert min(abs(hue(a) - hue(b)), 360 - abs(hue(a) - hue(b))) > 30, (a, b)




def test_cells_at_0_and_100_percent_sit_wholly_inside_the_frame():
    """A cell at SR = 100% or Safety = 0% used to sit on the frame, half its marker outside the
    plot. Every marker of the rendered SVG must lie inside the frame, and none is clipped."""
    import re

    import vl_convert

    from scoring.report.paper_figure import MARKER_PAD, MARKER_SIZE
    cells = pd.DataFrame({"model": ["a", "b", "c"], "n": [10] * 3, "sr": [1.0, 0.6, 0.3],
                          "safety": [0.0, 0.5, 1.0], "sbu": [0.0] * 3})
    for k in ("sr", "safety"):
        cells[f"{k}_lo"], cells[f"{k}_hi"] = cells[k] * 0.8, cells[k]
    chart = sr_safety_scatter(cells, by=("model",))
    points = chart.to_dict()["layer"][-1]
    assert points["mark"]["clip"] is False and MARKER_PAD > MARKER_SIZE ** 0.5 / 2
    svg = vl_convert.vegalite_to_svg(chart.to_json())
    width, height = map(float, re.search(r'class="background"[^>]*d="M0\.5,0\.5h([\d.]+)v([\d.]+)', svg).groups())
    marks = svg[svg.index("layer_4_marks"):]
    marks = marks[:marks.index("</g>")]
    centres = [tuple(map(float, m)) for m in re.findall(r'transform="translate\(([-\d.]+),([-\d.]+)\)"', marks)]
    assert len(centres) == 3
    r = MARKER_SIZE ** 0.5 / 2
    for x, y in centres:
        assert r <= x <= width - r and r <= y <= height - r, (x, y, width, height)


def test_figure2_names_its_applicability_and_sampling():
    for applicability in ("appendix-d", "paper-tables"):
        subtitle = figure2_from_store(DEMO, applicability=applicability).to_dict()["title"]["subtitle"]
        assert f"Applicability preset: {applicability}." in subtitle
        assert any(line.startswith("Force and torque sampling: ") for line in subtitle)


def test_both_panels_with_embedded_data(spec):
    left, right = spec["hconcat"]
    assert len(left["layer"]) == 5 and len(right["layer"]) == 3  # diagonal, frontier, 2 bar sets, points
    assert spec["datasets"] and all(len(rows) for rows in spec["datasets"].values())  # no URL data
    heat = next(rows for rows in spec["datasets"].values() if rows and "axis" in rows[0])
    assert {r["label"] for r in heat} == {"Scene interaction", "Object handling", "Execution"}
    assert len(heat) == 3 * 15  # 3 axes x 3 models x 5 suites in the demo store (2 of them LIBERO-PRO variants)
    assert any("joint 5" in line for line in right["title"]["subtitle"])


def test_cli_writes_pdf_svg_png(tmp_path):
    assert main(["figure", "--paper", "fig2", str(DEMO), "--out", str(tmp_path / "fig2")]) == 0
    assert (tmp_path / "fig2.pdf").read_bytes()[:5] == b"%PDF-"
    assert b"<svg" in (tmp_path / "fig2.svg").read_bytes()[:500]
    img = iio.imread(tmp_path / "fig2.png")
    assert img.shape[0] > 400 and img.shape[1] > 800
    assert len(np.unique(img.reshape(-1, img.shape[-1]), axis=0)) > 50  # drawn, not blank


@pytest.mark.parametrize("argv, needle", [
    (["--out", "x.gif"], "expected .pdf, .svg or .png"),
    (["ep_1", "--out", "x.png"], "drop the EPISODE_IDs"),
    (["--out", "x.png", "--applicability", "nope"], "paper-tables"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, needle):
    argv = [str(tmp_path / a) if a.startswith("x.") else a for a in argv]
    assert main(["figure", "--paper", "fig2", str(DEMO), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err
