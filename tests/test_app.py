"""The Streamlit app through `streamlit.testing.v1.AppTest`: every page, filters, deep links,
what-if numbers against `scoring`, export. The Episode detail page
(tests/test_app_detail.py) and which stores the app opens (tests/test_app_stores.py) have
modules of their own."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from scoring.evaluate.score import score_episode  # noqa: E402
from scoring.evaluate.whatif import WhatIf  # noqa: E402
from scoring.records.io import load_record  # noqa: E402
from scoring.registry.lookup import load_registry  # noqa: E402
from dashboard_helpers import APP, app, build_store, metric, ok, qp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["overview", "episodes", "detail", "whatif", "export"]
FORCE = ("arm_furniture_force", "target_furniture_force", "max_contact_force")


def make_store(out: Path, n: int = 64, renderable: bool = True) -> Path:
    return build_store(out, n, renderable=renderable)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("app") / "store")


@pytest.fixture(scope="module")
def tables(store):
    return pd.read_parquet(store / "episodes.parquet"), pd.read_parquet(store / "spec_results.parquet")


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# ----------------------------------------------------------------------------- pages

@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs(store, page):
    at = ok(app(store, page=page))
    assert at.title[0].value == {"overview": "Overview", "episodes": "Episodes", "detail": "Episode detail",
                                 "whatif": "What-if thresholds", "export": "Export"}[page]


def test_the_app_skips_streamlits_full_collection_after_each_run_unless_the_user_set_it(store):
    # a full gc pass over a big store's objects added ~100 ms to every click (docs/benchmarks.md)
    from streamlit import config
    from streamlit.config_option import ConfigOption

    key = "runner.postScriptGC"
    try:
        config._set_option(key, True, ConfigOption.DEFAULT_DEFINITION)  # as a fresh server starts
        ok(app(store))
        assert config.get_option(key) is False
        config.set_option(key, True)  # the user's own setting (config.toml, --runner.postScriptGC)
        ok(app(store))
        assert config.get_option(key) is True
    finally:
        config._set_option(key, True, ConfigOption.DEFAULT_DEFINITION)


def test_switching_through_every_page(store):
    at = ok(app(store))
    for page in PAGES[1:]:
        ok(at.switch_page(f"views/{page}.py").run())
        assert qp(at, "page") == [page]


def test_overview_numbers_come_from_the_store(store, tables):
    eps, _ = tables
    at = ok(app(store))
    assert metric(at, "Episodes") == f"{len(eps):,}"
    assert metric(at, "Success rate") == pct(eps["success"].mean())
    assert metric(at, "Safety") == pct(eps["safe"].mean())
    assert metric(at, "SBU") == pct(eps["sbu"].mean())
    top = at.dataframe(key="ov_top").value
    # worst first by VSI, ties to the deepest |threshold|-normalised margin, at most two rows
    # per model x suite x task before any cell gives a third
    _, specs = tables
    scored = specs[~specs["report_only"].astype(bool) & specs["active"].astype(bool)]
    depth = (scored["rho"] / scored["threshold"].abs().replace(0, 1.0)).groupby(scored["episode_id"]).min()
    sbu = eps[eps["sbu"]].assign(depth=lambda d: d["episode_id"].map(depth))
    sbu = sbu.sort_values(["vsi", "depth", "episode_id"], ascending=[False, True, True])
    sbu["round"] = sbu.groupby(["model", "suite", "task_id"]).cumcount() // 2
    want = sbu.sort_values("round", kind="stable")["episode_id"].head(10)
    assert list(top["episode_id"]) == list(want)


def test_a_big_stores_vsi_cis_come_with_the_button_and_equal_the_papers_table(tmp_path):
    """Over cached.BOOTSTRAP_AUTO_MAX episodes the main table shows VSI without its bootstrap CI until
    the button is clicked (a fragment: the table alone reruns); then every CI equals
    `scoring.report.tables.main_table`'s."""
    from scoring.report.tables import main_table
    from scoring.stats.metrics import unsettled_mask

    store = build_store(tmp_path / "big", 5_200, n_steps=20, contacts_per_step=2, renderable=False)
    eps = pd.read_parquet(store / "episodes.parquet")
    at = ok(app(store))
    before = at.dataframe[1].value  # [0] is the worst-SBU list
    assert set(before["VSI CI"]) == {"—"}, "a big store bootstrapped before the click"
    at.button(key="ov_ci_btn").click().run()
    ok(at)
    after = at.dataframe[1].value
    want = main_table(eps[~unsettled_mask(eps)], ci=True)
    assert list(after["VSI CI"]) == list(want["VSI CI"]) and "—" not in set(after["VSI CI"])
    assert list(after["VSI"]) == list(before["VSI"])  # the same table, with its intervals
    ok(at.run())  # asked once: the next run keeps the intervals and has no button
    assert list(at.dataframe[1].value["VSI CI"]) == list(want["VSI CI"])
    assert not [b for b in at.button if b.key == "ov_ci_btn"]


# ----------------------------------------------------------------------------- episodes

def expected(eps, specs, *, models=(), outcome=(), spec=None):
    keep = pd.Series(True, index=eps.index)
    if models:
        keep &= eps["model"].isin(models)
    if outcome:
        cls = np.where(eps["success"], np.where(eps["safe"], "safe success", "SBU"),
                       np.where(eps["safe"], "safe failure", "unsafe failure"))
        keep &= pd.Series(cls, index=eps.index).isin(outcome)
    if spec:
        bad = specs[(specs["family"] == spec) & specs["active"] & (specs["rho"] < 0)]
        keep &= eps["episode_id"].isin(bad["episode_id"])
    return eps[keep]


def test_filters_change_the_counts(store, tables):
    eps, specs = tables
    at = ok(app(store, page="episodes"))
    assert metric(at, "Matching episodes") == f"{len(eps)}"
    at.multiselect(key="w.models").set_value(["policy-b", "policy-c"]).run()
    want = expected(eps, specs, models=("policy-b", "policy-c"))
    assert metric(ok(at), "Matching episodes") == f"{len(want)}"
    at.multiselect(key="w.outcomes").set_value(["SBU"]).run()
    want = expected(eps, specs, models=("policy-b", "policy-c"), outcome=("SBU",))
    assert metric(ok(at), "Matching episodes") == f"{len(want)}"
    assert metric(at, "SBU") == f"{len(want)}" and metric(at, "safe success") == "0"
    assert set(at.dataframe(key="ep_table").value["episode_id"]) == set(want["episode_id"])
    at.multiselect(key="w.specs").set_value(["max_contact_force"]).run()
    want = expected(eps, specs, models=("policy-b", "policy-c"), outcome=("SBU",), spec="max_contact_force")
    assert metric(ok(at), "Matching episodes") == f"{len(want)}"
    at.slider(key="w.vsi").set_value((0.5, 1.0)).run()
    want = want[want["vsi"] >= 0.5]
    assert metric(ok(at), "Matching episodes") == f"{len(want)}"
    # the URL now carries the filters ...
    link = {k: qp(at, k) for k in at.query_params}
    assert link["model"] == ["policy-b", "policy-c"] and link["outcome"] == ["SBU"] and link["vsi"] == ["0.5-1"]
    assert link["spec"] == ["max_contact_force"] and link["page"] == ["episodes"]
    # ... and a fresh session opened on that link shows the same view
    fresh = AppTest.from_file(APP, default_timeout=120)
    for k, v in link.items():
        fresh.query_params[k] = v
    ok(fresh.run())
    assert fresh.title[0].value == "Episodes"
    assert metric(fresh, "Matching episodes") == f"{len(want)}"
    assert fresh.multiselect(key="w.models").value == ["policy-b", "policy-c"]
    assert fresh.slider(key="w.vsi").value == (0.5, 1.0)
    assert set(fresh.dataframe(key="ep_table").value["episode_id"]) == set(want["episode_id"])
    # clearing
    at.button(key="clear_filters").click().run()
    assert metric(ok(at), "Matching episodes") == f"{len(eps)}"


def test_selecting_a_row_opens_its_detail(store):
    at = ok(app(store, page="episodes", outcome="SBU"))
    table = at.dataframe(key="ep_table").value
    at.session_state["ep_table"] = {"selection": {"rows": [2], "columns": []}}
    ok(at.run())
    assert at.title[0].value == "Episode detail"
    assert qp(at, "ep") == [table["episode_id"].iloc[2]]
    assert at.slider(key="w.step").value == int(table["violating_step"].iloc[2])
    assert metric(at, "Violating step") == str(int(table["violating_step"].iloc[2]))


def test_choosing_an_episode_starts_converting_its_web_scene_before_its_page(store, tables, monkeypatch):
    """A row click, and the picker's next button, queue the chosen episode's web-scene
    conversion (the scene the browser draws) the moment the choice is known, so it converts
    while the page switches and its script runs; a rerun of the same episode queues nothing."""
    from dashboard import cached

    queued = []

    class Logged:
        def submit(self, fn, record):
            queued.append((fn.__name__, record.episode_id))

    monkeypatch.setattr(cached, "_SCENE_PREP", Logged())
    at = ok(app(store, page="episodes", outcome="SBU"))
    table = at.dataframe(key="ep_table").value
    queued.clear()
    at.session_state["ep_table"] = {"selection": {"rows": [1], "columns": []}}
    ok(at.run())
    assert qp(at, "ep") == [table["episode_id"].iloc[1]]
    assert queued[:1] == [("prepare_scene", table["episode_id"].iloc[1])], queued
    queued.clear()
    ok(at.button(key="ep_next").click().run())
    assert queued[:1] == [("prepare_scene", qp(at, "ep")[0])], queued
    queued.clear()
    ok(at.run())  # a rerun of the same episode queues nothing again
    assert queued == []


# ----------------------------------------------------------------------------- what-if

def _full_rescore(store, eps, thresholds):
    reg = load_registry()
    res = [score_episode(load_record(store / t), registry=reg, thresholds=thresholds) for t in eps["trajectory"]]
    return np.array([r.safe for r in res]), np.array([r.sbu for r in res]), np.array([r.vsi for r in res])


def test_whatif_numbers_equal_scorings_rescore(store, tables):
    eps, specs = tables
    at = ok(app(store, page="whatif"))
    assert metric(at, "Safety") == pct(eps["safe"].mean())
    at.slider(key="w.knob.force").set_value(100.0).run()
    at.slider(key="w.knob.tilt").set_value(9.0).run()
    ok(at)
    over = {**{f: 100.0 for f in FORCE}, "held_object_tilt_world": 9.0}
    r = WhatIf(eps, specs).rescore(over)
    safe, sbu, vsi = _full_rescore(store, eps, over)
    assert np.array_equal(r.safe, safe) and np.array_equal(r.sbu, sbu)
    assert metric(at, "Safety") == pct(safe.mean())
    assert metric(at, "SBU") == pct(sbu.mean())
    assert metric(at, "VSI") == f"{vsi.mean():.3f}"
    flips = at.dataframe(key="flip_table").value
    assert set(flips["episode_id"]) == set(eps["episode_id"][safe != eps["safe"].to_numpy()])
    cells = at.dataframe[0].value  # the per-cell table
    overall = cells.iloc[-1]
    assert overall["Safety"] == pct(safe.mean())
    assert overall["Δ Safety pp"] == f"{100 * (safe.mean() - eps['safe'].mean()):+.1f}"
    assert qp(at, "force") == ["100"] and qp(at, "tilt") == ["9"]


def test_whatif_presets_set_the_paper_tiers(store, tables):
    eps, specs = tables
    at = ok(app(store, page="whatif"))
    at.selectbox(key="w.preset").set_value("all_relaxed").run()
    ok(at)
    assert at.slider(key="w.knob.force").value == 500.0 and at.slider(key="w.knob.disp").value == 50.0
    assert at.slider(key="w.knob.torque").value == 2.0
    reg = load_registry()
    r = WhatIf(eps, specs).rescore(reg.preset("all_relaxed").overrides)
    assert metric(at, "Safety") == pct(r.safe.mean())
    at.button(key="whatif_reset").click().run()
    assert metric(ok(at), "Safety") == pct(eps["safe"].mean())
    assert "force" not in at.query_params


def test_thresholds_in_the_link_rescore_every_page(store, tables):
    eps, specs = tables
    r = WhatIf(eps, specs).rescore({"non_target_max_disp": 0.02})
    at = ok(app(store, disp="20"))
    assert metric(at, "Safety") == pct(r.safe.mean())
    assert any("What-if thresholds in effect" in i.value for i in at.info)
    at = ok(app(store, page="episodes", disp="20", outcome="SBU"))
    assert metric(at, "Matching episodes") == f"{int(r.sbu.sum())}"
    at = ok(app(store, page="whatif", disp="20"))
    assert at.slider(key="w.knob.disp").value == 20.0


def test_bad_link_values_are_ignored_with_a_notice(store, tables):
    eps, _ = tables
    at = app(store, page="episodes", model="nobody", vsi="2-3", step="x", force="99999")
    assert not at.exception
    assert metric(at, "Matching episodes") == f"{len(eps)}"
    assert len(at.toast) >= 3


# ----------------------------------------------------------------------------- export

def test_export_page_offers_every_chart_and_table(store, tables):
    eps, _ = tables
    at = ok(app(store, page="export", ep=eps[eps["sbu"]]["episode_id"].iloc[0]))
    names = ["sr_vs_safety", "violation_heatmap", "figure2", "sbu_composition", *(f"sensitivity_{k}" for k in
             ("force", "disp", "tilt", "slip", "torque")), "compare_forest", "robustness_margin", "robustness_raw"]
    box = at.selectbox(key="x_chart")
    assert len(box.options) == len(names) and box.options[0].startswith("SR vs Safety")
    for name in names:
        at.selectbox(key="x_chart").set_value(name).run()
        ok(at)
    tables = ["table4_main", "table7_spec_rates", "table9_sensitivity", "table10_sbu_composition", "table12_per_task"]
    assert len(at.selectbox(key="x_table").options) == len(tables)
    for name in tables:
        at.selectbox(key="x_table").set_value(name).run()
        ok(at)
    labels = [b.proto.label for b in at.get("download_button")]
    assert {"CSV", "LaTeX", "Markdown"} <= set(labels) and any(lbl.startswith("Download") for lbl in labels)


@pytest.mark.render
@pytest.mark.slow
def test_clip_playback_and_triptych_export_render(store, tables):
    from dashboard.replay_bridge import available
    good, why = available()
    if not good:
        pytest.skip(why)
    eps, _ = tables
    eid = eps[eps["sbu"]]["episode_id"].iloc[0]
    at = ok(app(store, page="detail", ep=eid))
    at.radio(key="clip_range").set_value(at.radio(key="clip_range").options[-1]).run()
    at.button(key="clip_go").click().run()
    ok(at)
    assert len(at.get("video")) == 1
    assert any(b.proto.label == "Download MP4" for b in at.get("download_button"))
    at.switch_page("views/export.py").run()
    at.button(key="x_tri").click().run()
    ok(at)
    assert at.get("image"), "no triptych preview"
    assert any(b.proto.label == "Download triptych (PNG)" for b in at.get("download_button"))


# ----------------------------------------------------------------------------- settled starts

def test_unsettled_starts_are_marked_filtered_and_left_out(tmp_path, store, tables):
    eps, _ = tables
    path = tmp_path / "store"
    shutil.copytree(store, path)
    marked = eps.copy()
    marked["settled"] = [k not in (0, 3) for k in range(len(marked))]
    marked["settle_steps"] = [300 if k in (0, 3) else 10 for k in range(len(marked))]
    marked.to_parquet(path / "episodes.parquet")
    unsettled = set(marked["episode_id"].iloc[[0, 3]])
    # the overview counts only settled starts, and says why
    at = ok(app(path))
    assert metric(at, "Episodes") == f"{len(eps) - 2:,}"
    assert any("2 episode(s) started from a scene that never came to rest" in c.value for c in at.caption)
    # the episodes page marks them, warns, and filters on them (also from the link)
    at = ok(app(path, page="episodes"))
    table = at.dataframe(key="ep_table").value
    assert set(table.loc[table["scene"] == "⚠ not at rest", "episode_id"]) == unsettled
    assert any("never came to rest" in w.value for w in at.warning)
    at.radio(key="w.scene").set_value("not at rest").run()
    assert metric(ok(at), "Matching episodes") == "2" and qp(at, "scene") == ["not at rest"]
    at = ok(app(path, page="episodes", scene="at rest"))
    assert metric(at, "Matching episodes") == f"{len(eps) - 2}" and not at.warning
    # the detail page of one says what it means
    at = ok(app(path, page="detail", ep=sorted(unsettled)[0]))
    assert any("not at rest at step 0 (still moving after 300 no-op steps)" in w.value for w in at.warning)
