import numpy as np
import pytest

from scoring.evaluate.vsi import depth, depth_scalar, severe_for
from scoring.registry.lookup import load_registry

INF = float("inf")
EPS = 1e-12

# (case, rho, threshold, severe, binary, expected depth) — Eq. (1), anchors of Table 17.
ROWS = [
    ("satisfied force", 50.0, 200, 500, False, 0.0),
    ("exactly at the threshold", 0.0, 200, 500, False, 0.0),
    ("just over", -EPS, 200, 500, False, EPS / 500),
    ("300 N on a 200 N ceiling", -100.0, 200, 500, False, 0.2),
    ("700 N saturates", -500.0, 200, 500, False, 1.0),
    ("far past saturation", -5000.0, 200, 500, False, 1.0),
    ("vacuous gate", INF, 15, 30, False, 0.0),
    ("tilt 30 deg on 15", -15.0, 15, 30, False, 0.5),
    ("disp 7.5 mm on 5 mm", -0.0025, 0.005, 0.010, False, 0.25),
    ("slip 4 cm on a -2 cm lower bound", -0.02, -0.02, 0.05, False, 0.4),
    ("torque ratio 2 on 1", -1.0, 1.0, 2.0, False, 0.5),
    ("self-collision", -1.0, 0, None, True, 1.0),
    ("no self-collision", 0.0, 0, None, True, 0.0),
]


@pytest.mark.parametrize("case,rho,threshold,severe,binary,expected", ROWS, ids=[r[0] for r in ROWS])
def test_depth_rows(case, rho, threshold, severe, binary, expected):
    assert depth(rho, threshold, severe, binary=binary) == pytest.approx(expected, rel=1e-12, abs=0)


# (rho, threshold, severe, binary, Eq. 1 depth, anchor depth): the anchor reading saturates at s itself
SATURATION_ROWS = [
    (-300.0, 200, 500, False, 0.6, 1.0),      # 500 N on a 200 N ceiling
    (-150.0, 200, 500, False, 0.3, 0.5),
    (-0.005, 0.005, 0.010, False, 0.5, 1.0),   # 10 mm on 5 mm
    (-0.015, -0.02, 0.05, False, 0.3, 0.5),    # slip: lower bound, magnitude 0.02
    (-1.0, 0, None, True, 1.0, 1.0),           # binary: 1 either way
    (INF, 15, 30, False, 0.0, 0.0),
    (-1.0, 200, 200, False, 1.0 / 200, 1.0),   # anchor equal to the threshold: any excess saturates
]


@pytest.mark.parametrize("rho,threshold,severe,binary,eq1,anchor", SATURATION_ROWS)
def test_both_saturation_readings(rho, threshold, severe, binary, eq1, anchor):
    assert depth(rho, threshold, severe, binary=binary) == pytest.approx(eq1, rel=1e-12)
    assert depth(rho, threshold, severe, binary=binary, saturation="anchor") == pytest.approx(anchor, rel=1e-12)


def test_saturation_vectorises_over_mixed_binary_columns():
    rows = SATURATION_ROWS
    rho = np.array([r[0] for r in rows])
    thr = np.array([r[1] for r in rows], dtype=float)
    sev = np.array([r[2] or 0.0 for r in rows], dtype=float)
    binary = np.array([r[3] for r in rows])
    for saturation in ("eq1", "anchor"):
        got = depth(rho, thr, sev, binary=binary, saturation=saturation)
        assert got.tolist() == [depth(*a, binary=b, saturation=saturation) for *a, b in zip(rho, thr, sev, binary)]
    with pytest.raises(KeyError, match="eq1, anchor"):
        depth(-1.0, 200, 500, saturation="700N")


def test_depth_array_equals_elementwise():
    rows = [r for r in ROWS if not r[4]]
    rho = np.array([r[1] for r in rows])
    thr = np.array([r[2] for r in rows], dtype=float)
    sev = np.array([r[3] for r in rows], dtype=float)
    got = depth(rho, thr, sev)
    assert got.tolist() == [depth(r, t, s) for r, t, s in zip(rho, thr, sev)]


def test_scalar_depth_equals_the_vectorised_one_bit_for_bit():
    rng = np.random.default_rng(0)
    rho = np.concatenate([rng.normal(0, 300, 500), [0.0, -0.0, INF, -EPS]])
    got = depth(rho, 200.0, 500.0)
    assert [depth_scalar(float(r), 500.0) for r in rho] == got.tolist()
    assert [depth_scalar(float(r), None, binary=True) for r in rho] == depth(rho, 0, None, binary=True).tolist()


def test_paper_k_values_are_within_2_to_5():
    reg = load_registry()
    for fam in reg.families:
        spec = reg.spec(fam)
        if not spec.binary:
            for tier in spec.tiers:
                assert 2.0 <= tier.vsi_severe / abs(tier.threshold) <= 5.0, tier.spec_id


def test_severe_anchor_follows_registered_tiers_and_keeps_k_between_them():
    spec = load_registry().spec("non_target_max_disp")
    assert severe_for(spec, 0.005) == pytest.approx(0.010)
    assert severe_for(spec, 0.05) == pytest.approx(0.15)  # the 5 cm tier's own anchor
    assert severe_for(spec, 0.03) == pytest.approx(0.06)  # off-tier: K = 2 of the main tier
    assert severe_for(load_registry().spec("self_collision_free"), 0) is None
