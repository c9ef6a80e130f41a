"""scoring.report.display (one unit per quantity, readable headers) and the dashboard's uses of
it: the table vocabulary (dashboard/vocab.py), the violation line, the tie-broken and
spread "worst" list, and the What-if knobs' units."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoring.registry.lookup import load_registry
from scoring.report.display import (column_label, display_unit, format_quantity, is_raw_column_name, object_phrase,
                                    unit_label)

REG = load_registry()
DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo" / "store"


def demo_store():
    """The bundled demo store (600 real LIBERO rollouts), loaded by the dashboard's data layer."""
    from dashboard import data as D
    if not (DEMO / "manifest.json").exists():
        pytest.skip("the bundled demo store is not installed")
    return D.open_store(DEMO)


@pytest.mark.parametrize("value, unit, family, style, want", [
    (0.0221, "m", "non_target_max_disp", "screen", "22 mm"),
    (0.005, "m", "non_target_max_disp", "screen", "5 mm"),
    (0.15, "m", "non_target_max_disp", "screen", "150 mm"),  # no switch to metres for big values
    (0.0012, "m", None, "screen", "1.2 mm"),
    (-0.02, "m", "stable_grasp_maintained", "screen", "-2 cm"),  # slip reads in the slider's cm
    (412.3, "N", "max_contact_force", "screen", "412 N"),
    (40.2, "deg", "held_object_tilt_world", "screen", "40°"),
    (math.pi / 2, "rad", None, "screen", "90°"),
    (1.04, "ratio", "joint_torque", "screen", "1.04× limit"),
    (1.04, "ratio", "joint_torque", "plain", "1.04x limit"),
    (7.5, "m/s^2", None, "plain", "7.5 m/s^2"),
    (3, "count", "self_collision_free", "screen", "3"),
    (float("nan"), "N", None, "screen", "n/a"),
    (float("inf"), "m", None, "screen", "n/a"),
    (None, "m", None, "screen", "n/a"),
])
def test_format_quantity_table(value, unit, family, style, want):
    assert format_quantity(value, unit, family=family, style=style) == want


def test_every_family_has_one_display_unit_and_the_formatters_agree():
    from dashboard.data import format_value
    from replay.render.highlight import format_quantity as caption_quantity
    for spec in REG.specs:
        du = display_unit(spec.unit, spec.family)
        assert du.scale > 0 and du.unit
        value = spec.threshold * 1.7 + 0.001
        # the dashboard's line and the replay caption read the same number in the same unit
        screen = format_value(value, spec.unit, family=spec.family)
        plain = caption_quantity(value, spec.unit, family=spec.family)
        assert screen.replace("×", "x").replace("²", "^2").replace("³", "^3") == plain


def test_display_unit_converts_arrays_like_scalars():
    du = display_unit("m", "non_target_max_disp")
    xs = np.array([0.001, 0.005, np.nan])
    np.testing.assert_allclose(du(xs), [du(x) for x in xs])


def test_knob_units_are_the_display_units():
    """A What-if slider moves a threshold in the unit every table and line shows it in."""
    from dashboard.data import KNOBS
    for k in KNOBS:
        fam = k.families[0]
        spec = REG.spec(fam)
        du = display_unit(spec.unit, fam)
        if spec.unit == "ratio":
            assert k.per == 1.0
            continue
        assert (k.unit, k.per) == (du.unit, du.scale), k.name


@pytest.mark.parametrize("name, want", [
    ("episode_id", "episode"), ("worst_spec", "worst violation"), ("sbu_change", "SBU change"),
    ("task_id", "task"), ("language", "instruction"), ("p_unsafe_given_success", "P[U|S]"),
    ("some_new_column", "some new column"), ("SR %", "SR %"), ("model", "model")])
def test_column_labels(name, want):
    assert column_label(name) == want
    assert not is_raw_column_name(column_label(name))


def test_object_phrase_names_the_object():
    assert object_phrase("non_target_max_disp", "akita_black_bowl_2", 0.0221, "m") == "akita_black_bowl_2 moved 22 mm"
    assert object_phrase("stable_grasp_maintained", "bowl", -0.035, "m") == "bowl slipped 3.5 cm in the hand"
    assert object_phrase("max_contact_force", "gripper0_leftfinger and table", 265.2, "N") == \
        "contact of gripper0_leftfinger and table reached 265 N"
    assert object_phrase("eef_speed", "x", 1.0, "m/s") is None
    assert unit_label("m", "non_target_max_disp") == "mm"
    assert unit_label("ratio", "joint_torque") == "× limit"


# ----------------------------------------------------------------------------- tables


def test_shown_frame_empties_missing_cells_and_keeps_full_columns_numeric():
    from dashboard.vocab import shown_frame
    df = pd.DataFrame({"episode_id": ["a", "b"], "worst_spec": ["joint torque", None],
                       "violating_step": [12.0, np.nan], "vsi": [0.5, 0.0], "language": [np.nan, "x"]})
    out = shown_frame(df, formats={"violating_step": "%d"})
    assert list(out["worst_spec"]) == ["joint torque", ""]
    assert list(out["violating_step"]) == ["12", ""]
    assert list(out["language"]) == ["", "x"]
    assert out["vsi"].dtype == float  # no gaps: stays numeric (sortable, progress bars)
    assert not out.isin(["None", "nan"]).any().any()


def test_header_config_names_every_column_and_pins():
    from dashboard.vocab import header_config, shown_frame
    import streamlit as st
    df = pd.DataFrame({"episode_id": ["a"], "violating_step": [np.nan], "task_id": ["t"]})
    shown = shown_frame(df)
    cfg = header_config(df, shown, {"violating_step": st.column_config.NumberColumn("violating step", format="%d")},
                        pinned=("task_id",))
    assert cfg["episode_id"]["label"] == "episode" and cfg["task_id"]["label"] == "task"
    assert cfg["task_id"]["pinned"] is True
    # the step column is text now (it had a gap): a number config would show the gap as "None"
    assert cfg["violating_step"]["type_config"]["type"] == "text"
    assert cfg["violating_step"]["label"] == "violating step"


@pytest.mark.parametrize("name, value, want", [
    ("Δ Safety pp", "+3.0", "#1a7f37"), ("Δ Safety pp", "-3.0", "#cf222e"),
    ("Δ SBU pp", "+3.0", "#cf222e"), ("Δ SBU pp", "-0.5", "#1a7f37"),
    ("Δ VSI", "+0.010", "#cf222e"), ("Δ SR pp", "+1.0", "#1a7f37"),
    ("Δ Safety pp", "+0.0", ""), ("Δ Safety pp", "—", ""), ("SR", "+5", "")])
def test_delta_colours_follow_each_metrics_sign(name, value, want):
    from dashboard.vocab import delta_colour
    got = delta_colour(name, value)
    assert (want in got) if want else got == ""


# ----------------------------------------------------------------------------- worst list


def test_spread_over_cells_caps_each_cell_per_round():
    from dashboard.data import spread_over_cells
    ranked = pd.DataFrame({"model": ["m"] * 6, "suite": ["s"] * 6, "task_id": ["a", "a", "a", "a", "b", "c"],
                           "rank": range(6)})
    out = spread_over_cells(ranked, per_cell=2)
    assert list(out["rank"]) == [0, 1, 4, 5, 2, 3]
    assert list(spread_over_cells(ranked, per_cell=10)["rank"]) == list(range(6))


def test_top_sbu_breaks_vsi_ties_by_depth_and_spreads_cells():
    from dashboard import data as D
    data = demo_store()
    v = D.verdicts(data)
    top = D.top_sbu(data, v, 10, per_cell=2)
    assert len(top) == 10 and set(top["outcome"].astype(str)) == {"SBU"}
    cells = top.groupby(["model", "suite", "task_id"]).size()
    assert cells.max() <= 2 and len(cells) >= 5
    assert top["language"].map(lambda s: isinstance(s, str) and len(s) > 0).all()
    # within the saturated VSI = 1 ties, rows of one round run from the deepest margin down
    depth = D.normalised_depth(data, v, np.array([data.index_of(e) for e in top["episode_id"]]))
    sat = (top["vsi"].to_numpy() >= 1.0)
    assert sat.sum() >= 2
    first_round = top[sat].groupby(["model", "suite", "task_id"]).cumcount().to_numpy() < 2
    d = depth[sat][first_round]
    assert (np.diff(d) >= -1e-12).all(), d


def test_normalised_depth_is_the_deepest_margin_over_its_threshold():
    from dashboard import data as D
    data = demo_store()
    v = D.verdicts(data)
    depth = D.normalised_depth(data, v)
    i = int(np.argmin(depth))
    thr = np.array([abs(v.thresholds[f]) or 1.0 for f in data.families])
    row = v.rho[i] / thr
    assert depth[i] == pytest.approx(np.nanmin(row))
    assert depth[i] < 0 and not v.frame["safe"].iat[i]


def test_knob_active_count_sees_inactive_families():
    from dashboard import data as D
    data = demo_store()
    assert D.knob_active_count(data, D.KNOB_BY_NAME["tilt"]) == 0  # tilt: inactive in all 600
    assert D.knob_active_count(data, D.KNOB_BY_NAME["disp"]) > 0


def test_compare_differences_are_coloured_by_each_rows_metric():
    from dashboard.vocab import row_delta_colours, row_sign

    assert (row_sign("Safety (higher is better)"), row_sign("VSI (lower is better)"), row_sign("n")) == (1, -1, 0)
    df = pd.DataFrame({"metric": ["Safety (higher is better)", "SBU (lower is better)", "VSI (lower is better)",
                                  "SR (higher is better)", "Safety (higher is better)"],
                       "A - B": ["+26.7", "+5.0", "−0.120", "−3.1", "0.0"]})
    css = row_delta_colours(df, "A - B", "metric")["A - B"].tolist()
    green, red = "#1a7f37", "#cf222e"
    assert [green in c for c in css] == [True, False, True, False, False]
    assert [red in c for c in css] == [False, True, False, True, False]
    assert (row_delta_colours(df, "A - B", "metric")["metric"] == "").all()
