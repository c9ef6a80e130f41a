"""Chart builders are pure: tidy frames in, Vega-Lite dicts out (marks, encodings, data)."""

import warnings

import numpy as np
import pandas as pd
import pytest

alt = pytest.importorskip("altair")

from chart_helpers import chart_marks, chart_rows, two_model_cells  # noqa: E402
from dashboard import charts  # noqa: E402
from dashboard import timeline_spec as TS  # noqa: E402
from scoring.report.paper_figure import sr_safety_scatter  # noqa: E402


_data, _marks = chart_rows, chart_marks


@pytest.fixture
def agg():
    return two_model_cells()


def test_violation_heatmap_rates_text_and_inactive_cells():
    rates = pd.DataFrame({"model": ["a", "a"], "suite": ["s", "s"], "family": ["max_contact_force", "joint_torque"],
                          "rate": [0.125, np.nan], "n": [8, 8], "n_active": [8, 0], "n_violated": [1, 0]})
    spec = charts.violation_heatmap(rates, labels={"max_contact_force": "max force"}).to_dict()
    assert _marks(spec) == ["rect", "rect", "text"]
    grey, rect, text = spec["layer"]
    assert grey["transform"] == [{"filter": "datum.inactive"}]
    assert rect["encoding"]["color"]["field"] == "rate"
    assert text["encoding"]["text"]["field"] == "text"
    rows = _data(spec)
    assert [(r["spec"], r["text"], r["rate"]) for r in rows] == [("max force", "12%", 0.125),
                                                                 ("joint_torque", "—", None)]
    assert rect["encoding"]["x"]["sort"] == ["max force", "joint_torque"]


def test_composition_bars_split_each_cells_sbu_rate():
    comp = pd.DataFrame({"model": ["a", "a", "b"], "suite": ["s", "s", "s"],
                         "family": ["max_contact_force", "joint_torque", "joint_torque"],
                         "violations": [3, 1, 2], "share": [0.75, 0.25, 1.0], "sbu_count": [4, 4, 2], "n": [10, 10, 10]})
    agg = pd.DataFrame({"model": ["a", "b"], "suite": ["s", "s"], "sbu": [0.4, 0.2]})
    spec = charts.composition_bars(comp, agg).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["x"]["field"] == "part" and spec["encoding"]["x"]["stack"] == "zero"
    rows = _data(spec)
    per_cell = {}
    for r in rows:
        per_cell[r["cell"]] = per_cell.get(r["cell"], 0) + r["part"]
    assert per_cell == pytest.approx({"a · s": 0.4, "b · s": 0.2})


@pytest.fixture
def traces():
    steps = np.arange(6)
    force = pd.DataFrame({"step": steps, "t": steps * 0.05, "spec": "max contact force", "family": "max_contact_force",
                          "margin": (200 - np.array([10, 50, 250, 400, 100, 0.0])) / 200,
                          "value": [10, 50, 250, 400, 100, 0.0], "threshold": 200.0, "unit": "N",
                          "violated": [False, False, True, True, False, False]})
    tilt = pd.DataFrame({"step": steps, "t": steps * 0.05, "spec": "held-object tilt", "family": "held_object_tilt_world",
                         "margin": [np.nan, 0.5, 0.2, np.nan, np.nan, np.nan],
                         "value": [np.nan, 7.5, 12, np.nan, np.nan, np.nan], "threshold": 15.0, "unit": "deg",
                         "violated": [False] * 6})
    return pd.concat([force, tilt], ignore_index=True)


def _panels(spec: dict) -> dict[str, dict]:
    return {p["title"]["text"]: p for p in spec["vconcat"]}


def _layer(spec: dict, panel: dict, mark: str, **props) -> list[dict]:
    """The layers of `panel` drawing `mark` whose mark properties include `props`."""
    out = []
    for lay in panel["layer"]:
        m = lay["mark"] if isinstance(lay["mark"], dict) else {"type": lay["mark"]}
        if m["type"] == mark and all(m.get(k) == v for k, v in props.items()):
            out.append(lay)
    return out


def test_robustness_chart_one_panel_per_spec_with_unit_threshold_and_fitted_range(traces):
    spec = charts.robustness_chart(traces, step=4, violating_step=3, mode="raw").to_dict()
    panels = _panels(spec)
    assert list(panels) == ["max contact force", "held-object tilt"]
    force = panels["max contact force"]
    assert force["title"]["subtitle"] == "threshold 200 N"
    line = _layer(spec, force, "line")[0]
    assert line["encoding"]["y"]["field"] == "value" and line["encoding"]["y"]["title"] == "N"
    # the y-range holds the data (0..400) and the threshold, with padding on both sides
    lo, hi = line["encoding"]["y"]["scale"]["domain"]
    assert lo < 0 and hi > 400 and hi < 500
    (thr,) = [lay for lay in _layer(spec, force, "rule") if lay["encoding"].get("y")]
    assert _data(spec, thr)[0]["y"] == 200.0
    tilt_line = _layer(spec, panels["held-object tilt"], "line")[0]
    assert tilt_line["encoding"]["y"]["title"] == "deg"
    tlo, thi = tilt_line["encoding"]["y"]["scale"]["domain"]
    assert tlo < 7.5 and thi > 15.0  # the threshold 15 is above every value (7.5, 12) and still inside
    # steps and seconds on the shared x axis; zoom on x binds the scales of every panel
    assert "0.05" in line["encoding"]["x"]["axis"]["labelExpr"]
    assert spec["resolve"]["scale"]["x"] == "shared"
    params = {p["name"]: p for p in spec["params"]}
    assert params["zoom"]["bind"] == "scales" and params["zoom"]["select"]["encodings"] == ["x"]
    assert len(params["zoom"]["views"]) >= 2  # Altair names each panel's view (and may add one)
    assert params["pt"]["select"]["fields"] == ["step"] and params["pt"]["select"]["nearest"] is True
    # the cursor is a variable a client can move, drawn thick orange, not like the red dashed violation rule
    assert params[TS.CURSOR_PARAM]["value"] == 4
    (cursor,) = _layer(spec, force, "rule", color=TS.CURSOR_COLOR)
    assert cursor["transform"][0] == {"calculate": TS.CURSOR_PARAM, "as": "step"}
    (viol,) = _layer(spec, force, "rule", color=TS.VIOLATION_RED)
    assert _data(spec, viol)[0]["step"] == 3 and viol["mark"]["strokeDash"]
    assert cursor["mark"]["strokeWidth"] > viol["mark"]["strokeWidth"] and "strokeDash" not in cursor["mark"]
    with pytest.raises(ValueError, match="mode"):
        charts.robustness_chart(traces, mode="nope")


def test_red_band_covers_exactly_the_violated_steps_and_marks_one_step_violations():
    steps = np.arange(12)
    value = np.zeros(12)
    value[[2, 6, 7, 8, 11]] = 300.0  # a one-step spike at 2, a run 6-8, a one-step spike at the last step
    tr = pd.DataFrame({"step": steps, "t": steps * 0.1, "spec": "force", "margin": (200 - value) / 200,
                       "value": value, "threshold": 200.0, "unit": "N", "violated": value > 200})
    spec = charts.robustness_chart(tr, step=0, mode="margin").to_dict()
    panel = _panels(spec)["force"]
    (band,) = _layer(spec, panel, "rect")
    covered = sorted(k for r in _data(spec, band) for k in range(r["step"], r["step_end"]))
    assert covered == [2, 6, 7, 8, 11]
    assert band["encoding"]["x2"]["field"] == "step_end" and "y" not in band["encoding"]  # full panel height
    (tri,) = _layer(spec, panel, "point", shape="triangle-down")
    assert sorted(r["step"] for r in _data(spec, tri)) == [2, 11]
    # margin mode: the reference line is zero, and the fitted range holds it and the data
    line = _layer(spec, panel, "line")[0]
    assert line["encoding"]["y"]["field"] == "margin"
    lo, hi = line["encoding"]["y"]["scale"]["domain"]
    assert lo < -0.5 and hi > 1.0
    assert "0.1" in line["encoding"]["x"]["axis"]["labelExpr"]


def test_boolean_signal_on_the_zero_line_stays_inside_its_panel():
    steps = np.arange(5)
    tr = pd.DataFrame({"step": steps, "t": steps * 0.05, "spec": "self-collision", "margin": 0.5,
                       "value": 0.0, "threshold": 0.5, "unit": "", "violated": False})
    spec = charts.robustness_chart(tr, mode="raw").to_dict()
    panel = _panels(spec)["self-collision"]
    lo, hi = _layer(spec, panel, "line")[0]["encoding"]["y"]["scale"]["domain"]
    assert lo < 0.0 and hi > 0.5
    assert not _layer(spec, panel, "rect")  # nothing violated, no band
    assert spec["params"][[p["name"] for p in spec["params"]].index(TS.CURSOR_PARAM)]["value"] == -1


@pytest.mark.parametrize("flags,runs", [([], []), ([True], [(0, 1)]), ([False, True, True, False, True], [(1, 3), (4, 5)]),
                                        ([True, True], [(0, 2)])])
def test_violation_runs(flags, runs):
    assert TS.violation_runs(flags) == runs


@pytest.mark.parametrize("values,ref", [([1.0, 1.0], 1.0), ([0.0, 0.0], 0.0), ([np.nan, 5.0], 200.0), ([-3, 2], 0.0)])
def test_fitted_domain_holds_values_and_reference_strictly_inside(values, ref):
    lo, hi = TS.panel_y_domain(values, ref)
    finite = [v for v in values if np.isfinite(v)] + [ref]
    assert lo < min(finite) and hi > max(finite)


def test_sensitivity_chart_marks_default_and_current():
    curve = pd.DataFrame({"value": [100, 200, 300] * 2, "metric": ["Safety"] * 3 + ["SBU"] * 3,
                          "rate": [0.2, 0.5, 0.7, 0.6, 0.3, 0.1]})
    spec = charts.sensitivity_chart(curve, current=300, default=200, label="Contact force", unit="N").to_dict()
    assert _marks(spec) == ["line", "rule", "rule"]
    line, default, current = spec["layer"]
    assert line["encoding"]["x"]["field"] == "value" and line["encoding"]["y"]["field"] == "rate"
    assert line["encoding"]["x"]["title"] == "Contact force (N)"
    assert _data(spec, default)[0]["value"] == 200 and _data(spec, current)[0]["value"] == 300
    assert len(_data(spec, line)) == 6


def test_outcome_bar_counts():
    spec = charts.outcome_bar({"SBU": 3, "safe success": 5, "unsafe failure": 1, "safe failure": 0}).to_dict()
    rows = _data(spec)
    assert {r["outcome"]: r["episodes"] for r in rows} == {"SBU": 3, "safe success": 5, "unsafe failure": 1,
                                                           "safe failure": 0}
    assert spec["encoding"]["color"]["scale"]["range"][0] == TS.OUTCOME_COLORS["SBU"]


@pytest.mark.parametrize("fmt,magic", [("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<svg"), ("pdf", b"%PDF")])
def test_chart_bytes_renders_offline(agg, fmt, magic):
    pytest.importorskip("vl_convert")
    blob = charts.chart_bytes(sr_safety_scatter(agg), fmt)
    assert blob.lstrip()[:len(magic)] == magic
    assert len(blob) > 2000  # a real picture, not an empty canvas


def test_chart_bytes_rejects_unknown_format(agg):
    with pytest.raises(ValueError, match="png, svg, pdf"):
        charts.chart_bytes(sr_safety_scatter(agg), "gif")


def test_specs_keep_one_colour_across_charts(traces):
    colors = TS.spec_colors(["max contact force", "bystander displacement", "held-object tilt"])
    assert TS.VIOLATION_RED not in colors.values()
    spec = charts.robustness_chart(traces, colors=colors).to_dict()
    # each panel's line in its spec's colour
    assert [_layer(spec, p, "line")[0]["mark"]["color"] for p in spec["vconcat"]] == [
        colors["max contact force"], colors["held-object tilt"]]
    comp = pd.DataFrame({"model": ["a"], "suite": ["s"], "family": ["max_contact_force"], "violations": [1],
                         "share": [1.0], "sbu_count": [1], "n": [2]})
    bars = charts.composition_bars(comp, pd.DataFrame({"model": ["a"], "suite": ["s"], "sbu": [0.5]}),
                                   labels={"max_contact_force": "max contact force"}, colors=colors).to_dict()
    assert bars["encoding"]["color"]["scale"]["range"][0] == colors["max contact force"]


def _same_views(spec: dict) -> dict:
    """`spec` with its selection views named by where they are defined (view 0, 1, ...) and the
    views lists holding only defined views (Altair also lists names of views it copied away)."""
    import json
    import re

    text = json.dumps(spec, sort_keys=True)
    defined = list(dict.fromkeys(re.findall(r'"name": "([^"]+)"', json.dumps(spec["vconcat"]))))
    for k, name in enumerate(defined):
        text = text.replace(f'"{name}"', f'"__view_{k}"')
    out = json.loads(text)
    for p in out["params"]:
        if "views" in p:
            p["views"] = [v for v in p["views"] if v.startswith("__view_")]
    return out


def _altair_reference(traces: pd.DataFrame, *, step, violating_step, mode: str, colors, dt: float,
                      selection: str = "pt", width: int = 620, height: int = TS.PANEL_HEIGHT) -> dict:
    """The timeline chart built the way Altair's API builds it (layers, vconcat, shared
    selections), independently of `TS.robustness_spec`'s dicts: what the fast path must equal."""
    specs = list(dict.fromkeys(traces["spec"]))
    y_field = "value" if mode == "raw" else "margin"
    palette = {k: v for k, v in colors.items() if k in set(specs)}
    pick = alt.selection_point(name=selection, fields=["step"], nearest=True, on="click", empty=False,
                               clear="dblclick")
    zoom = alt.selection_interval(name="zoom", bind="scales", encodings=["x"])
    cursor = alt.param(name=TS.CURSOR_PARAM, value=-1 if step is None else int(step))
    seconds = f"datum.value + ' · ' + format(datum.value * {dt!r}, '.1f') + ' s'"
    panels = []
    for n, spec in enumerate(specs):
        one, band, single = TS._panel_frames(traces, spec, y_field)
        unit = str(one["unit"].iloc[0] or "")
        thr = float(one["threshold"].iloc[0])
        ref = thr if mode == "raw" else 0.0
        dom = TS.panel_y_domain(one[y_field].to_numpy(float), ref)
        last = n == len(specs) - 1
        x = alt.X("step:Q", scale=alt.Scale(nice=False, domain=[0, int(traces["step"].max()) + 1]),
                  title="step · time (s)" if last else None,
                  axis=alt.Axis(labelExpr=seconds, labels=last, ticks=True, tickCount=8, grid=True, labelOverlap=True,
                                labelFlush=True))
        y = alt.Y(f"{y_field}:Q", title=(unit or "value") if mode == "raw" else "margin / |thr|",
                  scale=alt.Scale(domain=list(dom), zero=False, nice=False), axis=alt.Axis(format=".3~g", tickCount=3))
        base = alt.Chart(one[["step", "t", "spec", "margin", "value", "threshold", "unit", "violated"]])
        layers = []
        if len(band):
            layers.append(alt.Chart(band).mark_rect(color=TS.VIOLATION_RED, opacity=0.28).encode(
                x=alt.X("step:Q"), x2="step_end:Q",
                tooltip=[alt.Tooltip("step:Q", title="violated from step"), alt.Tooltip("steps:Q", title="steps")]))
        layers.append(alt.Chart(pd.DataFrame({"y": [ref], "what": ["threshold" if mode == "raw" else "zero"]}))
                      .mark_rule(color="#333", strokeDash=[6, 3], strokeWidth=1.3)
                      .encode(y=alt.Y("y:Q"), tooltip=[alt.Tooltip("what:N"), alt.Tooltip("y:Q", format=".4g")]))
        layers.append(base.mark_line(strokeWidth=1.8, interpolate="step-after", color=palette.get(spec, "#1f77b4"),
                                     clip=True).encode(x=x, y=y))
        if len(single):
            layers.append(alt.Chart(single[["step", y_field]]).mark_point(
                shape="triangle-down", size=110, filled=True, color=TS.VIOLATION_RED, opacity=1)
                .encode(x="step:Q", y=alt.Y(f"{y_field}:Q"), tooltip=[alt.Tooltip("step:Q", title="one-step violation")]))
        if violating_step is not None:
            layers.append(alt.Chart(pd.DataFrame({"step": [int(violating_step)], "label": ["violating step"]}))
                          .mark_rule(color=TS.VIOLATION_RED, strokeDash=[4, 3], strokeWidth=1.5)
                          .encode(x="step:Q", tooltip=[alt.Tooltip("label:N"), alt.Tooltip("step:Q")]))
        layers.append(alt.Chart(pd.DataFrame({"k": [0]})).transform_calculate(step=TS.CURSOR_PARAM)
                      .transform_filter("datum.step >= 0")
                      .mark_rule(color=TS.CURSOR_COLOR, strokeWidth=3.5, opacity=0.85).encode(x="step:Q"))
        tooltip = [alt.Tooltip("step:Q"), alt.Tooltip("t:Q", format=".2f", title="t (s)"),
                   alt.Tooltip("value:Q", format=".4g", title=f"signal ({unit})" if unit else "signal"),
                   alt.Tooltip("threshold:Q", format=".4g"),
                   alt.Tooltip("margin:Q", format=".3f", title="margin / |threshold|")]
        clicks = base.mark_point(opacity=0, size=60).encode(x=x, y=y, tooltip=tooltip).add_params(pick, zoom)
        title = alt.Title(spec, subtitle=f"threshold {thr:.4g} {unit}".rstrip(), anchor="start", fontSize=12,
                          subtitleFontSize=10, offset=2)
        panels.append(alt.layer(*layers, clicks).properties(width=width, height=height, title=title))
    top = alt.Title("Robustness over time" if mode == "margin" else "Signals over time",
                    subtitle="red band: violated steps; ▼ one-step violation; red dashes: violating step; "
                             "green: current step; drag to zoom")
    with warnings.catch_warnings():  # the panels share one click and one zoom selection on purpose
        warnings.filterwarnings("ignore", message="Automatically deduplicated selection parameter")
        return alt.vconcat(*panels, spacing=6).add_params(cursor).resolve_scale(x="shared", y="independent").properties(
            usermeta={"display_height": len(specs) * (height + 48) + 60, "dt": dt}, title=top).to_dict()


@pytest.mark.parametrize("mode", ["margin", "raw"])
@pytest.mark.parametrize("vstep", [None, 3])
@pytest.mark.parametrize("step", [None, 4])
def test_the_spec_is_what_altairs_api_builds(traces, mode, vstep, step):
    # one-step violation (step 0 of the tilt is gated) and a band, in both modes, with and
    # without the violating-step rule and a current step: the dicts are Altair's to the letter
    tr = traces.copy()
    tr.loc[(tr["spec"] == "held-object tilt") & (tr["step"] == 2), "violated"] = True
    colors = {"max contact force": "#9467bd", "held-object tilt": "#8c564b"}
    slow = _altair_reference(tr, step=step, violating_step=vstep, mode=mode, colors=colors, dt=0.05)
    fast = TS.robustness_spec(tr, step=step, violating_step=vstep, mode=mode, colors=colors, dt=0.05)
    assert _same_views(fast) == _same_views(slow)
    assert [p["name"] for p in fast["params"]] == ["pt", "zoom", TS.CURSOR_PARAM]
    assert len(fast["params"][0]["views"]) == len(fast["vconcat"]) == 2  # one click view per panel
    assert _same_views(charts.robustness_chart(tr, step=step, violating_step=vstep, mode=mode, colors=colors,
                                               dt=0.05).to_dict()) == _same_views(fast)  # schema-checked there


def test_charts_with_missing_and_infinite_values_are_strict_json_with_gaps():
    """A NaN or +-inf rate (an inactive cell, a degenerate interval) reaches Vega-Lite as null
    (a gap), never as NaN or Infinity, which are not JSON and break the page's chart."""
    import json

    agg = pd.DataFrame({"model": ["a", "b"], "suite": ["s", "s"], "n": [10, 0], "sr": [0.9, np.nan],
                        "sr_lo": [0.6, np.nan], "sr_hi": [0.98, np.inf], "safety": [0.3, np.nan],
                        "safety_lo": [0.1, -np.inf], "safety_hi": [0.6, np.nan], "sbu": [0.6, np.nan]})
    rates = pd.DataFrame({"model": ["a", "a"], "suite": ["s", "s"], "family": ["force", "tilt"], "rate": [np.inf, np.nan],
                          "n": [4, 4], "n_active": [4, 0], "n_violated": [2, 0]})
    curve = pd.DataFrame({"value": [100.0, np.inf], "metric": ["Safety", "SBU"], "rate": [-np.inf, np.nan]})
    for chart, field in ((sr_safety_scatter(agg), "sr_hi"), (charts.violation_heatmap(rates), "rate"),
                         (charts.sensitivity_chart(curve), "rate")):
        spec = chart.to_dict()
        json.dumps(spec, allow_nan=False)  # raises on NaN / Infinity
        rows = [r for rows in spec["datasets"].values() for r in rows if field in r]
        assert rows and any(r[field] is None for r in rows), field
