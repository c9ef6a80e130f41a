"""A base suite with its perturbed variants in the dashboard: the table of changes on Overview and
Compare (scoring.report.perturbation's numbers), and the perturbation-family filter of Episodes."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dashboard.data.episodes import BASE_FAMILY, perturbation_mask, suite_families
from dashboard_helpers import metric, ok
from scoring.records.io import save_record
from scoring.records.synthetic import make_record
from scoring.registry.perturbations import suite_perturbation
from scoring.report.perturbation import base_vs_variant
from scoring.store.write import load_store, score_archive

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
BASE, MUG, SWAP = "libero_spatial", "libero_spatial_with_mug", "libero_spatial_swap"
MODELS = ("policy-a", "policy-b")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """2 models x (the base suite and two of its variants) x 2 tasks x 3 init states, 40 steps."""
    root = tmp_path_factory.mktemp("pert_app")
    rng = np.random.default_rng(7)
    for m_index, model in enumerate(MODELS):
        for suite in (BASE, MUG, SWAP):
            for task in (0, 1):
                for init in range(3):
                    eid = f"{suite}/task_{task}/{model}/ep_{init:03d}"
                    rec = make_record(rng, episode_id=eid, benchmark="libero-spatial", task_id=f"task_{task}",
                                      model=model, n_steps=40, contacts_per_step=4,
                                      severity=0.5 + m_index + (2.0 if suite == MUG else 0.0))
                    meta = {**rec.meta, "suite": suite, "seed": 7, "init_state": init}
                    save_record(dataclasses.replace(rec, meta=meta), root / "archive" / f"{eid.replace('/', '__')}.npz")
    score_archive([root / "archive"], root / "store", progress=False)
    return root / "store"


@pytest.fixture(autouse=True)
def _no_prewarm(monkeypatch):
    monkeypatch.setenv("SAFEVLA_NO_PREWARM", "1")


def app(store, page=None, **params):
    from streamlit.testing.v1 import AppTest

    os.environ["SAFEVLA_STORES"] = str(store)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["store"] = str(store)
    if page:
        at.query_params["page"] = page
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def deltas(at) -> pd.DataFrame:
    hits = [d.value for d in at.dataframe if "perturbation" in d.value.columns]
    assert hits, "no perturbation table on the page"
    return hits[0]


def test_overview_shows_each_models_change_from_the_base_suite(store):
    at = ok(app(store))
    table = deltas(at)
    assert set(zip(table["model"], table["perturbation"])) == {(m, s) for m in MODELS for s in (MUG, SWAP)}
    _, episodes, spec_results = load_store(store)
    for r in table.itertuples():
        want = base_vs_variant(episodes, spec_results, r.model, suite_perturbation(r.perturbation),
                               n_resamples=200)
        got = table[(table.model == r.model) & (table.perturbation == r.perturbation)].iloc[0]
        assert got["Δ Safety pp"] == f"{100 * want.change('safety'):+.1f}"
        assert got["comparison"] == want.how


def test_a_link_restores_the_perturbation_filter(store):
    family = suite_perturbation(SWAP).family
    at = ok(app(store, perturbation=family))
    assert set(deltas(at)["perturbation"]) == {SWAP}
    assert at.query_params.get("perturbation") in (family, [family])


def test_compare_shows_the_changes_of_the_chosen_pair(store):
    at = ok(app(store, page="compare"))
    table = deltas(at)
    assert set(table["model"]) == set(MODELS) and set(table["perturbation"]) == {MUG, SWAP}


def test_episodes_filter_picks_perturbation_families(store):
    at = ok(app(store, page="episodes"))
    box = [m for m in at.multiselect if m.label == "Perturbation"]
    assert box and set(box[0].options) == {BASE_FAMILY, suite_perturbation(MUG).family,
                                           suite_perturbation(SWAP).family}
    box[0].set_value([suite_perturbation(MUG).family]).run()
    ok(at)
    assert metric(at, "Matching episodes") == f"{2 * 2 * 3:,}"
    # the overview's table of changes follows the same choice
    ok(at.switch_page("views/overview.py").run())
    assert set(deltas(at)["perturbation"]) == {MUG}


def test_family_mask_and_labels():
    frame = pd.DataFrame({"suite": [BASE, MUG, SWAP, None], "benchmark": ["libero-spatial"] * 3 + ["libero-90"]})
    fams = suite_families([BASE, MUG, "libero_90", "robocasa-365"], suite_perturbation)
    assert fams[BASE] == fams["libero_90"] == fams["robocasa-365"] == BASE_FAMILY
    assert fams[MUG] == suite_perturbation(MUG).family
    assert perturbation_mask(frame, [], suite_perturbation).all()
    assert perturbation_mask(frame, [BASE_FAMILY], suite_perturbation).tolist() == [True, False, False, True]
    assert perturbation_mask(frame, [fams[MUG]], suite_perturbation).tolist() == [False, True, False, False]


def test_export_offers_the_reports_perturbation_tables(store):
    """The Export page adds `safevla report`'s two perturbation tables for a store with variants,
    built from the same shifts (the report's own table functions), with their downloads."""
    from dashboard.views.export import PERTURBATION_TABLES
    from scoring.report.perturbation import family_table, perturbation_shifts

    at = ok(app(store, page="export"))
    assert set(PERTURBATION_TABLES.values()) <= set(at.selectbox(key="x_table").options)
    _, episodes, spec_results = load_store(store)
    variants = [suite_perturbation(MUG), suite_perturbation(SWAP)]
    want = family_table(perturbation_shifts(episodes, spec_results, variants, n_resamples=200))
    at.selectbox(key="x_table").set_value("perturbation_families").run()
    ok(at)
    shown = [d.value for d in at.dataframe if "perturbed %" in d.value.columns]
    assert shown, "no per-family perturbation table on the Export page"
    keys = ["model", "perturbation", "spec"]
    pd.testing.assert_frame_equal(shown[0].sort_values(keys).reset_index(drop=True),
                                  want.sort_values(keys).reset_index(drop=True))
    at.selectbox(key="x_table").set_value("perturbation").run()
    ok(at)
    assert set(deltas(at)["perturbation"]) == {MUG, SWAP}
    assert {"CSV", "LaTeX", "Markdown"} <= {b.proto.label for b in at.get("download_button")}
