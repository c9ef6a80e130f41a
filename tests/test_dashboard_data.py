"""The dashboard's data layer against `scoring` and plain pandas on the store's own files."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")

from dashboard import data as D  # noqa: E402
from scoring.evaluate.score import score_episode  # noqa: E402
from scoring.records.io import load_record  # noqa: E402
from dashboard_helpers import build_store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def make_store(out: Path, n: int = 64, renderable: bool = False) -> Path:
    return build_store(out, n, renderable=renderable)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("dash") / "store")


@pytest.fixture(scope="module")
def sd(store) -> D.StoreData:
    return D.open_store(store)


@pytest.fixture(scope="module")
def raw(store):
    return pd.read_parquet(store / "episodes.parquet"), pd.read_parquet(store / "spec_results.parquet")


def test_open_store_indexes_every_scored_row(sd, raw):
    eps, specs = raw
    assert len(sd.episodes) == len(eps) == 64
    assert sd.synthetic and any(w.startswith("Synthetic") for w in sd.warnings)
    assert sd.registry_matches and not sd.missing_trajectory.any()
    scored = specs[~specs["report_only"]]
    for r in scored.sample(40, random_state=0).itertuples():
        i, j = sd.index_of(r.episode_id), sd.families.index(r.family)
        assert sd.active[i, j] == r.active
        if r.active:
            assert sd.rho[i, j] == r.rho
    assert list(sd.episodes["outcome"].astype(str)) == [
        {(True, False): "SBU", (True, True): "safe success", (False, False): "unsafe failure",
         (False, True): "safe failure"}[(s, f)] for s, f in zip(eps["success"], eps["safe"])]


def test_knobs_reproduce_registry_defaults_and_presets(sd):
    reg = sd.registry
    defaults = D.knob_defaults(reg)
    assert defaults == {"force": 200.0, "disp": 5.0, "tilt": 15.0, "slip": 2.0, "torque": 1.0}
    assert D.knob_overrides(reg, defaults) == {}
    for name, preset in reg.presets.items():
        got = D.knob_overrides(reg, D.preset_knobs(reg, name))
        assert got == dict(preset.overrides), name  # exact floats: 5 mm -> 0.005
    assert D.knob_overrides(reg, {"disp": 12.5, "slip": 3.0}) == {"non_target_max_disp": 0.0125,
                                                                  "stable_grasp_maintained": -0.03}


def test_verdicts_default_are_the_store_and_overrides_are_whatif(sd, raw):
    eps, _ = raw
    v = D.verdicts(sd)
    assert v.is_default and (v.frame["safe"].to_numpy() == eps["safe"].to_numpy()).all()
    over = {"max_contact_force": 120.0, "non_target_max_disp": 0.02}
    w = D.verdicts(sd, over)
    r = sd.whatif.rescore(over)
    assert (w.frame["safe"].to_numpy() == r.safe).all() and (w.frame["sbu"].to_numpy() == r.sbu).all()
    assert np.array_equal(w.frame["vsi"].to_numpy(), r.vsi)
    assert np.array_equal(w.violated, np.nan_to_num(r.rho, nan=1.0) < 0)


def test_whatif_equals_a_full_rescore_with_score_episode(sd):
    over = {"max_contact_force": 150.0, "held_object_tilt_world": 10.0, "joint_torque": 0.9}
    w = D.verdicts(sd, over)
    for i in range(0, len(sd.episodes), 4):
        res = score_episode(load_record(sd.trajectory_path(i)), registry=sd.registry, thresholds=over)
        assert w.frame["safe"].iat[i] == res.safe and w.frame["sbu"].iat[i] == res.sbu
        assert w.frame["vsi"].iat[i] == pytest.approx(res.vsi, abs=1e-12)


@pytest.mark.parametrize("f", [
    D.Filters(models=("policy-a",)),
    D.Filters(suites=("libero-goal", "libero-10"), outcomes=("SBU",)),
    D.Filters(tasks=("task_1",), specs=("max_contact_force",)),
    D.Filters(specs=("stable_grasp_maintained", "non_target_max_disp"), spec_mode="active"),
    D.Filters(vsi=(0.25, 0.9)),
    D.Filters(models=("policy-d", "policy-b"), outcomes=("unsafe failure", "safe failure"), vsi=(0.0, 0.5)),
])
def test_filters_match_pandas_on_the_store_files(sd, raw, f):
    eps, specs = raw
    want = pd.Series(True, index=eps.index)
    if f.models:
        want &= eps["model"].isin(f.models)
    if f.suites:
        want &= eps["suite"].isin(f.suites)
    if f.tasks:
        want &= eps["task_id"].isin(f.tasks)
    if f.specs:
        rows = specs[specs["family"].isin(f.specs) & specs["active"] & ~specs["report_only"]]
        if f.spec_mode == "violated":
            rows = rows[rows["rho"] < 0]
        want &= eps["episode_id"].isin(rows["episode_id"])
    if f.outcomes:
        cls = np.where(eps["success"], np.where(eps["safe"], "safe success", "SBU"),
                       np.where(eps["safe"], "safe failure", "unsafe failure"))
        want &= pd.Series(cls, index=eps.index).isin(f.outcomes)
    lo, hi = f.vsi
    if (lo, hi) != (0.0, 1.0):
        want &= (eps["vsi"] >= lo) & (eps["vsi"] <= hi)
    v = D.verdicts(sd)
    mask = D.filter_mask(sd, v, f)
    assert set(sd.episodes["episode_id"][mask]) == set(eps["episode_id"][want])
    counts = D.outcome_counts(v, mask)
    assert sum(counts.values()) == int(want.sum())
    table = D.episode_table(sd, v, mask)
    assert set(table["episode_id"]) == set(eps["episode_id"][want])


def test_episode_table_sorts_sbu_first_by_vsi(sd):
    v = D.verdicts(sd)
    t = D.episode_table(sd, v, np.ones(len(sd.episodes), bool))
    sbu = (t["outcome"] == "SBU").to_numpy()
    assert sbu[: sbu.sum()].all()
    assert (np.diff(t["vsi"][: sbu.sum()].to_numpy()) <= 0).all()
    assert t.loc[t["safe"], "worst_spec"].isna().all()


def test_robustness_traces_agree_with_the_stored_scores(sd, raw):
    _, specs = raw
    v = D.verdicts(sd)
    unsafe = np.flatnonzero(~v.frame["safe"].to_numpy())[:6]
    for i in unsafe:
        rec = load_record(sd.trajectory_path(i))
        fams = [f for j, f in enumerate(sd.families) if sd.active[i, j]]
        tr = D.robustness_traces(rec, sd.registry, v.thresholds, fams)
        rows = specs[(specs["episode_id"] == sd.episodes["episode_id"].iat[i]) & ~specs["report_only"] & specs["active"]]
        for r in rows.itertuples():
            t = tr[tr["family"] == r.family]
            scale = abs(r.threshold) or 1.0
            if np.isinf(r.rho):  # the gate never opened: every step vacuous
                assert t["margin"].isna().all()
                continue
            assert np.nanmin(t["margin"]) * scale == pytest.approx(r.rho, abs=1e-9)
            neg = t.loc[t["violated"], "step"]
            assert (int(neg.iloc[0]) if len(neg) else None) == (None if pd.isna(r.first_violation_step)
                                                                else int(r.first_violation_step))
            if r.rho < 0:
                assert int(t["step"].iloc[int(np.nanargmin(t["margin"]))]) == r.extreme_step


def test_whatif_summary_and_flips(sd):
    over = {"max_contact_force": 500.0, "arm_furniture_force": 500.0, "target_furniture_force": 500.0}
    base, v = D.verdicts(sd), D.verdicts(sd, over)
    s = D.whatif_summary(sd, v, base)
    overall = s.iloc[-1]
    assert overall["model"] == "all" and overall["n"] == len(sd.episodes)
    assert overall["safety"] == pytest.approx(v.frame["safe"].mean())
    assert overall["d_safety"] == pytest.approx(v.frame["safe"].mean() - base.frame["safe"].mean())
    fl = D.flipped(sd, over, limit=None)
    changed = sd.episodes["episode_id"][v.frame["safe"].to_numpy() != base.frame["safe"].to_numpy()]
    assert set(fl["episode_id"]) == set(changed)
    assert set(fl["change"]) <= {"unsafe → safe"}  # relaxing only makes episodes safe


def test_sensitivity_curve_passes_through_whatif(sd):
    knob = D.KNOB_BY_NAME["force"]
    curve = D.sensitivity_curve(sd, knob, n=5)
    assert {200.0, 25.0, 1000.0} <= set(curve["value"])
    for x in (25.0, 200.0, 1000.0):
        r = sd.whatif.rescore(D.knob_overrides(sd.registry, {"force": x}))
        got = curve[(curve["value"] == x)].set_index("metric")["rate"]
        assert got["Safety"] == pytest.approx(r.safe.mean())
        assert got["SBU"] == pytest.approx(r.sbu.mean())
    safety = curve[curve["metric"] == "Safety"].sort_values("value")["rate"].to_numpy()
    assert (np.diff(safety) >= -1e-12).all()  # relaxing a threshold never makes anything less safe


def test_applicability_table_matches_the_stored_reasons(sd, raw):
    _, specs = raw
    t = D.applicability_table(sd, 0)
    rows = specs[specs["episode_id"] == sd.episodes["episode_id"].iat[0]]
    scored = t[t["kind"] == "scored"]
    assert len(scored) == len(sd.registry.families)
    want = dict(zip(rows.loc[~rows["report_only"], "family"].map(sd.label), rows.loc[~rows["report_only"], "active"]))
    assert dict(zip(scored["spec"], scored["active"])) == want
    assert scored["tag sources"].str.len().gt(0).all()


def test_episode_specs_and_violating_frame_under_overrides(sd):
    v = D.verdicts(sd, {"max_contact_force": 60.0})
    i = int(np.flatnonzero(~v.frame["safe"].to_numpy())[0])
    rows = D.episode_specs(sd, v, i)
    fam = rows[rows["family"] == "max_contact_force"].iloc[0]
    assert fam["threshold"] == 60.0
    step = D.violating_frame(sd, v, i)
    worst = v.frame["worst_spec"].iat[i]
    assert step == int(rows[rows["family"] == worst]["extreme_step"].iloc[0])


# ----------------------------------------------------------------------------- bad stores

def test_bad_stores_raise_store_problem(tmp_path, store):
    with pytest.raises(D.StoreProblem, match="does not exist"):
        D.open_store(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(D.StoreProblem, match="missing manifest.json"):
        D.open_store(tmp_path / "empty")
    corrupt = tmp_path / "corrupt"
    shutil.copytree(store, corrupt)
    (corrupt / "spec_results.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(D.StoreProblem, match="corrupt Parquet"):
        D.open_store(corrupt)
    empty = tmp_path / "no_episodes"
    shutil.copytree(store, empty)
    for name in ("episodes.parquet", "spec_results.parquet"):
        pd.read_parquet(empty / name).head(0).to_parquet(empty / name)
    with pytest.raises(D.StoreProblem, match="no scored episodes"):
        D.open_store(empty)


def test_registry_mismatch_and_missing_trajectories_are_warnings(tmp_path, store):
    odd = tmp_path / "odd"
    shutil.copytree(store, odd)
    m = json.loads((odd / "manifest.json").read_text())
    m["registry_hash"] = "0" * 64
    (odd / "manifest.json").write_text(json.dumps(m))
    shutil.rmtree(odd / "trajectories")
    sd = D.open_store(odd)
    assert not sd.registry_matches
    assert any(w.startswith("Registry mismatch") for w in sd.warnings)
    assert any(w.startswith("Missing trajectories: none of the 64") for w in sd.warnings)
    assert sd.missing_trajectory.all()


def test_an_archive_beside_the_store_opens_only_when_named(tmp_path, monkeypatch):
    """The dashboard follows a store's `../arch` only into an archive the user named
    (`safevla dashboard STORE --archive DIR` passes it to the server as $SAFEVLA_ARCHIVES)."""
    from scoring.records.synthetic import make_archive
    from scoring.store.paths import ENV_ARCHIVES
    from scoring.store.write import score_archive

    make_archive(tmp_path / "arch", 3, seed=5, n_steps=20, contacts_per_step=1)
    score_archive([tmp_path / "arch"], tmp_path / "store", progress=False)
    monkeypatch.delenv(ENV_ARCHIVES, raising=False)
    unnamed = D.open_store(tmp_path / "store")
    assert unnamed.missing_trajectory.all()
    assert any("a folder you did not name" in w and "--archive" in w for w in unnamed.warnings), unnamed.warnings
    monkeypatch.setenv(ENV_ARCHIVES, str(tmp_path / "arch"))
    named = D.open_store(tmp_path / "store")
    assert not named.missing_trajectory.any() and not any("Ignored archive" in w for w in named.warnings)


@pytest.mark.parametrize("sampling", ["peak", "control"])
def test_robustness_traces_follow_the_stores_force_sampling(sampling):
    from scoring.registry.lookup import load_registry
    from scoring.records.synthetic import make_record
    reg = load_registry()
    rec = make_record(np.random.default_rng(2), episode_id="p/1", n_steps=40, contacts_per_step=3,
                      substep_peaks=True)
    res = score_episode(rec, registry=reg, force_sampling=sampling)
    force = {s.family: s for s in res.specs}["max_contact_force"]
    tr = D.robustness_traces(rec, reg, {}, ["max_contact_force"], force_sampling=sampling)
    assert np.nanmax(tr["value"]) == pytest.approx(force.extreme)
    other = D.robustness_traces(rec, reg, {}, ["max_contact_force"],
                                force_sampling="control" if sampling == "peak" else "peak")
    assert np.nanmax(other["value"]) != pytest.approx(force.extreme)


def test_provenance_text_says_how_the_model_was_served():
    from dashboard.data import provenance_text
    row = {"policy_adapter": "openpi", "policy_model_id": "openpi://10.0.0.2:8000", "replan_steps": 5,
           "image_size": "256x256"}
    assert provenance_text(row) == "openpi · openpi://10.0.0.2:8000 · replan 5 · 256x256 images"
    assert provenance_text({"policy_adapter": "scripted", "policy_model_id": "careful", "replan_steps": float("nan"),
                            "image_size": None}) == "scripted · careful · no camera images"
    assert provenance_text({"policy_adapter": None, "policy_model_id": float("nan")}) is None  # older stores
    assert provenance_text({}) is None
    assert provenance_text({**row, "protocol": "openpi", "protocol_native": True}) == \
        "openpi · openpi://10.0.0.2:8000 · replan 5 · 256x256 images · protocol openpi"
    assert provenance_text({"protocol": "openpi", "protocol_native": False}) == "protocol openpi (overridden: not native)"


@pytest.fixture(scope="module")
def unsettled_store(tmp_path_factory, store):
    """The synthetic store with three episodes marked as unsettled starts."""
    out = tmp_path_factory.mktemp("unsettled") / "store"
    shutil.copytree(store, out)
    eps = pd.read_parquet(out / "episodes.parquet")
    eps["settled"] = [False if k in (1, 5, 9) else True for k in range(len(eps))]
    eps["settle_steps"] = [300 if k in (1, 5, 9) else 10 for k in range(len(eps))]
    eps.to_parquet(out / "episodes.parquet")
    return out, set(eps["episode_id"].iloc[[1, 5, 9]])


def test_unsettled_starts_are_marked_filterable_and_left_out_of_cells(unsettled_store):
    path, unsettled = unsettled_store
    sd = D.open_store(path)
    v = D.verdicts(sd)
    only = D.filter_mask(sd, v, D.Filters(scene="not at rest"))
    rest = D.filter_mask(sd, v, D.Filters(scene="at rest"))
    assert set(sd.episodes["episode_id"][only]) == unsettled and not (only & rest).any() and (only | rest).all()
    table = D.episode_table(sd, v, np.ones(len(sd.episodes), bool), sort="episode id", limit=None)
    marked = set(table.loc[table["scene"] == D.UNSETTLED_MARK, "episode_id"])
    assert marked == unsettled and (table.loc[~table["episode_id"].isin(unsettled), "scene"] == "").all()
    assert D.cell_aggregates(v, by=())["n"].iat[0] == len(sd.episodes) - 3
    assert "3 episode(s)" in D.unsettled_note(v.frame)
    assert D.unsettled_note(v.frame[rest]) is None
    # under a what-if the same episodes stay out
    assert D.cell_aggregates(D.verdicts(sd, {"max_contact_force": 50.0}), by=())["n"].iat[0] == len(sd.episodes) - 3


def test_safe_rows_show_a_closest_call_and_unsafe_rows_a_worst_violation(sd):
    for overrides in ({}, {"max_contact_force": 500.0, "non_target_max_disp": 0.05}):
        v = D.verdicts(sd, overrides)
        table = D.episode_table(sd, v, np.ones(len(sd.episodes), bool), sort="episode id", limit=None)
        safe = table["safe"].to_numpy(bool)
        assert safe.any() and (~safe).any()
        assert table.loc[safe, "worst_spec"].isna().all() and table.loc[~safe, "closest_call"].isna().all()
        calls = table.loc[safe, "closest_call"].dropna()
        assert len(calls) and calls.str.contains("closest call, ").all()
        assert not calls.str.contains("self-coll", case=False).any()  # binary specs never are closest calls


# --------------------------------------------------------------- fast what-if paths vs the straightforward ones

@pytest.mark.parametrize("over", [{}, {"max_contact_force": 150.0, "non_target_max_disp": 0.02}])
def test_cell_spec_rates_equal_spec_rates_over_the_spec_rows(sd, over):
    from scoring.stats.metrics import spec_rates

    v = D.verdicts(sd, over)
    got = D.cell_spec_rates(sd, v)
    ref = spec_rates(D.settled_frame(v)[["episode_id", "model", "suite"]], D.spec_results_under(sd, v),
                     by=D.BY, ci=False, families=sd.families)
    cols = ["model", "suite", "family", "n", "n_active", "n_violated", "rate", "rate_lo", "rate_hi"]
    pd.testing.assert_frame_equal(got[cols], ref[cols], check_dtype=False)
    np.testing.assert_allclose(got["nsv"], ref["nsv"], rtol=1e-12, equal_nan=True)
    assert got["n_violated"].sum() > 0
    assert got["nsv"].notna().any() == (not over)  # depth is unknown once re-scored


@pytest.mark.parametrize("over", [{}, {"max_contact_force": 120.0, "held_object_tilt_world": 10.0}])
def test_violating_steps_equal_a_lookup_of_the_spec_rows(sd, over):
    v = D.verdicts(sd, over)
    rows = np.arange(len(sd.episodes))
    sc = sd.scored
    lookup = {(r, f): s for r, f, s in zip(sc["_row"], sc["family"], sc["extreme_step"].astype(float))}
    want = [lookup.get((r, w), np.nan) if isinstance(w, str) and not safe else np.nan
            for r, w, safe in zip(rows, v.frame["worst_spec"], v.frame["safe"])]
    got = D.violating_steps(sd, v, rows)
    np.testing.assert_array_equal(got, np.array(want, float))
    assert np.isfinite(got).sum() == int((~v.frame["safe"]).sum()) > 0


@pytest.mark.parametrize("over", [{}, {"max_contact_force": 120.0, "held_object_tilt_world": 10.0}])
def test_cell_composition_equals_sbu_composition_over_the_spec_rows(sd, over):
    from scoring.stats.metrics import sbu_composition

    v = D.verdicts(sd, over)
    got = D.cell_composition(sd, v)
    ref = sbu_composition(D.settled_frame(v)[["episode_id", "sbu", "model", "suite"]], D.spec_results_under(sd, v),
                          by=D.BY)
    pd.testing.assert_frame_equal(got, ref, check_dtype=False)
    assert len(got) > 0


def test_unvalidated_chart_draws_the_validated_spec(sd):
    from dashboard import cached, charts

    curve = D.sensitivity_curve(sd, D.KNOB_BY_NAME["force"], n=5)
    checked = charts.sensitivity_chart(curve, current=300, default=200).to_dict()  # validates
    fast = cached.unvalidated(charts.sensitivity_chart(curve, current=300, default=200))
    assert fast.to_dict() == checked
    broken = charts.sensitivity_chart(curve, current=300, default=200)
    broken["width"] = "wide"  # set without a check; a plain to_dict() refuses it
    with pytest.raises(Exception, match="wide"):
        broken.to_dict()
    assert cached.unvalidated(broken).to_dict()["width"] == "wide"  # the fast path skips the schema check


def test_on_canvas_keeps_the_display_height(sd):
    from dashboard import cached, charts

    curve = D.sensitivity_curve(sd, D.KNOB_BY_NAME["force"], n=5)
    chart = charts.sensitivity_chart(curve, current=300, default=200)
    height = charts.display_height(chart)
    spec = cached.on_canvas(chart).to_dict()  # still a valid spec
    assert spec["usermeta"]["embedOptions"] == {"renderer": "canvas"}
    assert charts.display_height(chart) == height


def test_episode_table_closest_calls_of_the_kept_rows_equal_the_full_table(sd):
    v = D.verdicts(sd, {"max_contact_force": 400.0})
    mask = np.ones(len(sd.episodes), bool)
    full = D.episode_table(sd, v, mask, sort="episode id", limit=None)
    head = D.episode_table(sd, v, mask, sort="episode id", limit=10)
    pd.testing.assert_frame_equal(head, full.head(10))
    want = D.closest_call_texts(sd, v.frame.set_index("episode_id").loc[full["episode_id"]].reset_index())
    assert full["closest_call"].tolist() == want and any(want)
