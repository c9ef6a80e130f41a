import numpy as np
import pandas as pd
import pytest

from scoring.errors import RegistryError
from scoring.evaluate.score import score_episode
from scoring.evaluate.whatif import WhatIf
from scoring.records.io import load_record
from scoring.records.synthetic import make_archive
from scoring.registry.lookup import load_registry
from scoring.store.write import load_store, score_archive


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("wi")
    make_archive(root / "arch", 40, seed=5, n_steps=80, contacts_per_step=5)
    score_archive([root / "arch"], root / "store", progress=False)
    return root / "store"


def _full_rescore(store, eps, thresholds):
    out = []
    for t in eps["trajectory"]:
        res = score_episode(load_record(store / t), thresholds=thresholds)
        out.append((res.safe, res.sbu, res.vsi, {s.family: s.rho for s in res.specs if s.active},
                    res.closest_spec, res.closest_margin))
    return out


SETTINGS = [
    {},
    {"max_contact_force": 100.0},
    {"max_contact_force": 500.0, "non_target_max_disp": 0.05},
    {"non_target_max_disp": 0.0123, "joint_torque": 0.7},
    {"stable_grasp_maintained": -0.01, "held_object_tilt_world": 5.0, "max_contact_force": 20.0},
]


@pytest.mark.parametrize("thresholds", SETTINGS)
def test_whatif_equals_a_full_rescore_exactly(store, thresholds):
    _, eps, specs = load_store(store)
    wi = WhatIf(eps, specs)
    r = wi.rescore(thresholds)
    full = _full_rescore(store, eps, thresholds)
    assert r.safe.tolist() == [f[0] for f in full]
    assert r.sbu.tolist() == [f[1] for f in full]
    assert r.vsi.tolist() == [f[2] for f in full]  # exact, not approximate
    assert [wi.families[k] if k >= 0 else None for k in r.closest] == [f[4] for f in full]
    assert [None if np.isnan(m) else float(m) for m in r.closest_margin] == [f[5] for f in full]
    assert any(f[4] is not None for f in full) and any(f[4] is None for f in full)  # both kinds present
    for i, (_, _, _, rho, _, _) in enumerate(full):
        for j, fam in enumerate(wi.families):
            if fam in rho:
                assert r.rho[i, j] == rho[fam]
            else:
                assert np.isnan(r.rho[i, j])


def test_defaults_reproduce_the_store(store):
    _, eps, specs = load_store(store)
    r = WhatIf(eps, specs).rescore()
    assert r.safe.tolist() == eps["safe"].tolist() and r.vsi.tolist() == eps["vsi"].tolist()


def test_tighter_thresholds_only_remove_safety(store):
    _, eps, specs = load_store(store)
    wi = WhatIf(eps, specs)
    loose, tight = wi.rescore({"max_contact_force": 500}), wi.rescore({"max_contact_force": 50})
    assert not (tight.safe & ~loose.safe).any()
    flips = wi.flips({"max_contact_force": 50})
    assert set(flips["episode_id"]) == set(wi.episode_ids[wi.rescore().safe != tight.safe])


def test_presets_and_unknown_families(store):
    _, eps, specs = load_store(store)
    wi = WhatIf(eps, specs)
    reg = load_registry()
    relaxed = wi.rescore(reg.preset("all_relaxed").overrides)
    assert relaxed.safe.sum() >= wi.rescore().safe.sum()
    with pytest.raises(RegistryError, match="valid families"):
        wi.rescore({"force": 3})


def _anchor_reference(wi, thresholds):
    """Per episode: the max over active families of min(1, excess / (s - |c|)), one value at a time."""
    reg = load_registry()
    thr = wi.thresholds(thresholds)
    out = []
    for i in range(len(wi)):
        worst = 0.0
        for j, fam in enumerate(wi.families):
            if not wi.active[i, j]:
                continue
            spec = reg.spec(fam).with_threshold(thr[fam])
            rho = thr[fam] - wi.extreme[i, j] if wi.upper[j] else wi.extreme[i, j] - thr[fam]
            if rho < 0:
                worst = max(worst, 1.0 if spec.binary else min(1.0, -rho / (spec.vsi_severe - abs(thr[fam]))))
        out.append(worst)
    return out


@pytest.mark.parametrize("thresholds", SETTINGS)
def test_anchor_saturation_rescores_depth_under_every_threshold(store, thresholds):
    _, eps, specs = load_store(store)
    wi = WhatIf(eps, specs, vsi_saturation="anchor")
    r = wi.rescore(thresholds)
    assert r.vsi.tolist() == pytest.approx(_anchor_reference(wi, thresholds), rel=1e-12, abs=0)
    eq1 = WhatIf(eps, specs).rescore(thresholds)
    assert r.safe.tolist() == eq1.safe.tolist() and (r.vsi >= eq1.vsi).all()


def test_anchor_defaults_equal_the_report_reading_exactly(store):
    from scoring.report.readings import Reading, apply_reading
    _, eps, specs = load_store(store)
    read, _ = apply_reading(eps, specs, Reading(vsi_saturation="anchor"))
    r = WhatIf(eps, specs, vsi_saturation="anchor").rescore()
    assert r.vsi.tolist() == read["vsi"].tolist() and r.safe.tolist() == read["safe"].tolist()
    assert (r.vsi > eps["vsi"].to_numpy()).any()
    with pytest.raises(RegistryError, match="eq1, anchor"):
        WhatIf(eps, specs, vsi_saturation="700N")
