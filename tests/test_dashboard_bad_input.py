"""The dashboard on stores with bad trajectories (issue 37): through `streamlit.testing.v1.AppTest`,
every page shows one readable line, never a traceback, for a trajectory it cannot load (a
truncated `.npz` raised load_record's RecordError on the detail page)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
from dashboard_helpers import app, build_store  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("dash_bad") / "store", 8, n_steps=40, renderable=False)


def copy_of(store: Path, where: Path) -> tuple[Path, pd.DataFrame]:
    shutil.copytree(store, where)
    return where, pd.read_parquet(where / "episodes.parquet")


def shown_text(at) -> list[str]:
    return [e.value for kind in ("error", "warning", "info", "markdown", "caption") for e in getattr(at, kind)]


def one_line_error(at, *needles: str) -> str:
    assert not at.exception, [e.value for e in at.exception]
    assert not any("Traceback" in t for t in shown_text(at))
    hits = [e.value for e in at.error if all(n in e.value for n in needles)]
    assert len(hits) == 1 and "\n" not in hits[0], [e.value for e in at.error]
    return hits[0]


def test_a_truncated_trajectory_is_one_line_on_the_detail_and_export_pages(tmp_path, store):
    broken, eps = copy_of(store, tmp_path / "broken")
    path = broken / eps["trajectory"].iat[0]
    path.write_bytes(path.read_bytes()[:1000])  # cut mid-file: no zip directory
    eid = eps["episode_id"].iat[0]
    at = app(broken, page="detail", ep=eid)
    line = one_line_error(at, "Unreadable trajectory.", path.name, "not a readable .npz archive")
    assert "still show" in line
    assert [d.value for d in at.dataframe], "the spec table still shows"
    # the Export page's robustness chart of that episode
    at = app(broken, page="export", ep=eid)
    chart = at.selectbox(key="x_chart")
    at = chart.select(next(o for o in chart.options if o.startswith("Robustness over time"))).run()
    one_line_error(at, "Unreadable trajectory.", path.name)
    # the other episodes still open
    at = app(broken, page="detail", ep=eps["episode_id"].iat[1])
    assert not at.exception and not at.error, [e.value for e in at.error]
