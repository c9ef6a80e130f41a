"""The dashboard on stores with bad trajectories, through `streamlit.testing.v1.AppTest`,
every page shows one readable line, never a traceback, for a trajectory it cannot load (a
truncated `.npz` raised load_record's RecordError on the detail page), the sidebar counts every
refused trajectory path (symbolic links out included), and a store a link may not open is not
announced as shown."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard_helpers import APP, app, build_store  # noqa: E402


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


def test_the_sidebar_counts_every_refused_trajectory(tmp_path, store):
    """Five refused paths, five counted: it counted three (a link to a file out was missed, and a
    trajectory under an absolute manifest source was not refused at all)."""
    crafted, eps = copy_of(store, tmp_path / "crafted")
    outside = tmp_path / "outside"
    outside.mkdir()
    for k in (2, 3, 4):
        shutil.copy(crafted / eps["trajectory"].iat[k], outside / f"ep{k}.npz")
    os.symlink(outside / "ep2.npz", crafted / "trajectories" / "link_out.npz")  # a file link out of the store
    os.symlink(outside, crafted / "linked_dir")  # a folder link out of the store
    manifest = json.loads((crafted / "manifest.json").read_text())
    manifest["sources"] = [*manifest["sources"], str(outside)]  # absolute: allows nothing
    (crafted / "manifest.json").write_text(json.dumps(manifest))
    eps.loc[0, "trajectory"] = "/etc/passwd"
    eps.loc[1, "trajectory"] = "../../../../../../../../etc/hostname"
    eps.loc[2, "trajectory"] = "trajectories/link_out.npz"
    eps.loc[3, "trajectory"] = "linked_dir/ep3.npz"
    eps.loc[4, "trajectory"] = str(outside / "ep4.npz")
    eps.to_parquet(crafted / "episodes.parquet")
    at = app(crafted)
    assert not at.exception
    warnings = [w.value for w in at.sidebar.warning]
    assert any(w.startswith("Refused trajectories: 5 trajectory path(s)") for w in warnings), warnings
    assert not any(w.startswith("Missing trajectories") for w in warnings), warnings  # refused, not missing
    assert any(w.startswith("Ignored archive sources: 1") and "is absolute" in w for w in warnings), warnings
    for k in range(5):  # and each one's detail page says why, in one line
        at = app(crafted, page="detail", ep=eps["episode_id"].iat[k])
        one_line_error(at, "outside the run store and its archive; refused")


def test_a_store_that_may_not_be_opened_is_not_announced_as_shown(store):
    os.environ["SAFEVLA_STORES"] = str(store)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["store"] = "/etc"
    at.run()
    assert not at.exception
    captions = [c.value for c in at.sidebar.caption]
    assert not any("Showing" in c and "/etc" in c for c in captions), captions
    assert any(c.startswith("No store is shown") for c in captions), captions
