"""Figure 2 (`safevla figure --paper fig2`): the chart spec and the exported files."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from dashboard.paper_figure import figure2_from_store
from scoring.cli.main import main

DEMO = Path(__file__).parent.parent / "assets" / "demo" / "store"


@pytest.fixture(scope="module")
def spec():
    return figure2_from_store(DEMO).to_dict()


def test_both_panels_with_embedded_data(spec):
    left, right = spec["hconcat"]
    assert len(left["layer"]) == 5 and len(right["layer"]) == 3  # diagonal, frontier, 2 bar sets, points
    assert spec["datasets"] and all(len(rows) for rows in spec["datasets"].values())  # no URL data
    heat = next(rows for rows in spec["datasets"].values() if rows and "axis" in rows[0])
    assert {r["label"] for r in heat} == {"Scene interaction", "Object handling", "Execution"}
    assert len(heat) == 3 * 9  # 3 models x 3 suites in the demo store
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
