"""One vocabulary (docs/dashboard.md) through `streamlit.testing.v1.AppTest`: every table
of every page has readable headers and no "None" cells; the red line names the object in
display units; What-if disables a slider that can do nothing and says why."""

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from scoring.report.display import is_raw_column_name  # noqa: E402
from dashboard_helpers import build_store, ok, player_drew  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
DEMO = ROOT / "assets" / "demo" / "store"
MISSING = {"None", "none", "nan", "NaN", "<NA>", "NaT"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    out = build_store(tmp_path_factory.mktemp("vocab") / "store", 48, n_steps=40, contacts_per_step=4,
                      renderable=True)
    eps = pd.read_parquet(out / "episodes.parquet")
    eps["seed"] = eps["init_state"]  # paired keys, so Compare draws its tables
    eps.to_parquet(out / "episodes.parquet", index=False)
    return out


@pytest.fixture(autouse=True)
def _no_prewarm(monkeypatch):
    monkeypatch.setenv("SAFEVLA_NO_PREWARM", "1")


def app(store, **params) -> AppTest:
    os.environ["SAFEVLA_STORES"] = str(store)
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["store"] = str(store)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def headers(df_el) -> list[str]:
    """What the grid shows above each column: its configured label, else the column name."""
    cfg = json.loads(df_el.proto.columns or "{}")
    return [(cfg.get(str(c)) or {}).get("label") or str(c) for c in df_el.value.columns]


def check_tables(at, where: str) -> int:
    """Asserts readable headers and no missing-value cells in every dataframe; returns how many."""
    for el in at.dataframe:
        shown = headers(el)
        raw = [h for h in shown if is_raw_column_name(h)]
        assert not raw, f"{where}: table {el.key or '?'} has raw column names {raw}"
        df = el.value
        assert not df.isna().any().any(), f"{where}: table {el.key or '?'} has missing cells in " \
                                          f"{list(df.columns[df.isna().any()])}"
        text = df.astype(str)
        bad = [c for c in df.columns if text[c].isin(MISSING).any()]
        assert not bad, f"{where}: table {el.key or '?'} shows None/nan in {bad}"
    return len(at.dataframe)


def test_every_page_has_readable_headers_and_empty_cells(store):
    eps = pd.read_parquet(store / "episodes.parquet")
    sbu = eps.loc[eps["sbu"].astype(bool), "episode_id"].iloc[0]
    safe = eps.loc[eps["safe"].astype(bool), "episode_id"].iloc[0]
    seen = 0
    for where, params in [("overview", {}), ("episodes", {"page": "episodes"}),
                          ("detail SBU", {"page": "detail", "ep": sbu}), ("detail safe", {"page": "detail", "ep": safe}),
                          ("whatif", {"page": "whatif", "disp": "2", "force": "60"}),
                          ("export", {"page": "export"}), ("compare", {"page": "compare"})]:
        at = ok(app(store, **params))
        if where.startswith("detail"):  # its tables follow the player's first picture
            player_drew(at)
        if where == "overview":
            at.toggle(key="ov_comp_table").set_value(True).run()
            ok(at)
        if where == "export":  # every paper table the page offers
            from dashboard.views.export import TABLES
            for name in list(TABLES)[1:]:
                seen += check_tables(at, where)
                at.selectbox(key="x_table").set_value(name).run()
                ok(at)
                assert at.selectbox(key="x_table").value == name
        seen += check_tables(at, where)
    assert seen >= 16  # the check looked at the pages' tables (every export table too), not at none


def test_safe_rows_have_empty_worst_violation_not_none(store):
    at = ok(app(store, page="episodes"))
    el = at.dataframe(key="ep_table")
    df = el.value
    # "safe" is one click away in the column picker; the outcome class says it too
    safe = df["outcome"].astype(str).str.startswith("safe").to_numpy()
    assert safe.any() and (~safe).any()
    assert (df.loc[safe, "worst_spec"] == "").all() and (df.loc[safe, "violating_step"] == "").all()
    assert (df.loc[~safe, "worst_spec"] != "").all()
    # the key columns lead and stay in view when the table scrolls sideways
    assert list(df.columns[:3]) == ["model", "suite", "task_id"]
    cfg = json.loads(el.proto.columns)
    assert all(cfg[c].get("pinned") for c in ("model", "suite", "task_id"))


def _demo():
    if not (DEMO / "manifest.json").exists():
        pytest.skip("the bundled demo store is not installed")
    return DEMO


def test_whatif_disables_a_slider_inactive_in_every_episode():
    at = ok(app(_demo(), page="whatif"))
    tilt = at.slider(key="w.knob.tilt")
    assert tilt.disabled
    assert any("Inactive in all 600 episodes" in c.value for c in at.caption)
    assert not at.slider(key="w.knob.disp").disabled and not at.slider(key="w.knob.force").disabled


def test_red_line_names_the_displaced_object_in_mm():
    from scoring.records.io import load_record

    demo = _demo()
    eps = pd.read_parquet(demo / "episodes.parquet")
    row = eps[(eps["worst_spec"] == "non_target_max_disp") & eps["sbu"]].iloc[0]
    at = ok(app(demo, page="detail", ep=row["episode_id"]))
    red = [m.value for m in at.markdown if "Violated:" in m.value]
    assert red, [m.value for m in at.markdown]
    line = red[0]
    rec = load_record(demo / row["trajectory"])
    bystanders = [b[:-5] if b.endswith("_main") else b for b, r in zip(rec.bodies, rec.roles) if r == "bystander"]
    named = [b for b in bystanders if f"{b} moved " in line]
    assert len(named) == 1, line
    # the displacement the line states is the stored extreme, in millimetres
    specs = pd.read_parquet(demo / "spec_results.parquet")
    ext = specs[(specs["episode_id"] == row["episode_id"]) & (specs["family"] == "non_target_max_disp")]["extreme"]
    mm = float(ext.iloc[0]) * 1000
    assert f"moved {mm:.0f} mm" in line or f"moved {mm:.3g} mm" in line, (line, mm)
    assert "(threshold 5 mm)" in line
    # the spec table shows the same quantity in the same unit (drawn once the player's first picture
    # is out: its value "drawn")
    table = player_drew(at).dataframe[0].value
    disp = table[table["spec"] == "bystander displacement"].iloc[0]
    assert disp["unit"] == "mm" and float(disp["worst value"]) == pytest.approx(mm, rel=1e-3)  # shown to 4 digits
    assert float(disp["threshold"]) == pytest.approx(5.0)
    assert np.isfinite(float(disp["robustness"]))
