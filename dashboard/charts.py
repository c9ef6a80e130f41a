"""Pure chart builders: tidy DataFrames in, Altair charts out (data embedded, no URLs).

Nothing here computes a metric: the numbers come from `scoring` (aggregates, per-spec
rates, SBU composition, what-if re-scores) through `dashboard.data`. The builders only
lay them out, so each is tested on its Vega-Lite dict (tests/test_dashboard_charts.py),
and every chart saves to PNG/SVG/PDF offline through vl-convert (`chart_bytes`).
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import altair as alt
import numpy as np
import pandas as pd

# Robustness traces of long episodes pass Altair's default 5,000-row guard.
alt.data_transformers.disable_max_rows()
# The timeline's panels share one click and one zoom selection on purpose (Altair merges them).
warnings.filterwarnings("ignore", message="Automatically deduplicated selection parameter", category=UserWarning)

OUTCOME_COLORS = {"SBU": "#d62728", "safe success": "#2ca02c", "unsafe failure": "#ff7f0e",
                  "safe failure": "#9e9e9e"}
VIOLATION_RED = "#d62728"
EXPORT_FORMATS = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}
# spec lines avoid red, which marks violations
# models: Okabe-Ito's colour-blind-safe qualitative palette, ordered so that neighbours differ in
# hue (Streamlit's default put light blue next to dark blue); no red, which marks violations
MODEL_PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#999999", "#F0E442"]
SPEC_PALETTE = ["#8c564b", "#e377c2", "#1f77b4", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#7f7f7f",
                "#aec7e8", "#c5b0d5"]


def pareto_front(points: pd.DataFrame, x: str, y: str) -> np.ndarray:
    """Boolean mask of the non-dominated rows when both `x` and `y` are maximised.

    A row is dominated when another row is >= on both and > on at least one. Geometry for
    the frontier line of Figure 2 (left); NaN rows are never on the front.
    """
    xs, ys = points[x].to_numpy(float), points[y].to_numpy(float)
    ok = ~(np.isnan(xs) | np.isnan(ys))
    front = np.zeros(len(points), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (xs >= xs[i]) & (ys >= ys[i]) & ((xs > xs[i]) | (ys > ys[i]))
        front[i] = not dominated.any()
    return front


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    """NaN and +-inf as None (JSON null): Vega-Lite draws gaps, and the spec stays valid JSON."""
    num = df.select_dtypes(include="floating").columns
    out = df.astype({c: object for c in num})
    for c in num:
        vals = df[c].to_numpy(dtype=float, na_value=np.nan)
        out[c] = [None if not np.isfinite(x) else x.item() for x in vals]
    return out


def cell_label(row: Mapping, by: Sequence[str]) -> str:
    return " · ".join(str(row[c]) for c in by)


# ----------------------------------------------------------------------------- Figure 2 left

def sr_safety_scatter(agg: pd.DataFrame, *, by: Sequence[str] = ("model", "suite"), width: int = 520,
                      height: int = 400) -> alt.LayerChart:
    """SR (x) against Safety (y) per cell with Wilson 95% error bars and the non-dominated frontier.

    `agg` is `scoring.stats.metrics.aggregate(...)` output: sr, sr_lo, sr_hi, safety, safety_lo,
    safety_hi, sbu, n and the `by` columns.
    """
    by = list(by)
    color = by[0] if by else None
    shape = by[1] if len(by) > 1 else None
    df = agg[[*by, "n", "sr", "sr_lo", "sr_hi", "safety", "safety_lo", "safety_hi", "sbu"]].copy()
    df["cell"] = [cell_label(r, by) for r in df.to_dict("records")] if by else "all"
    df["frontier"] = pareto_front(df, "sr", "safety")
    df = _clean(df)
    xs, ys = rate_axis_domain(agg, "sr"), rate_axis_domain(agg, "safety")
    base = alt.Chart(df)
    enc = {}
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=color, scale=alt.Scale(range=MODEL_PALETTE))
    x = alt.X("sr:Q", title="Success rate (SR)", scale=alt.Scale(domain=xs), axis=alt.Axis(format="%"))
    y = alt.Y("safety:Q", title="Safety (no spec violated)", scale=alt.Scale(domain=ys), axis=alt.Axis(format="%"))
    tooltip = [alt.Tooltip("cell:N", title="cell"), alt.Tooltip("n:Q"),
               alt.Tooltip("sr:Q", format=".1%", title="SR"), alt.Tooltip("safety:Q", format=".1%", title="Safety"),
               alt.Tooltip("sbu:Q", format=".1%", title="SBU")]
    xerr = base.mark_rule(strokeWidth=1.5, opacity=0.7, clip=True).encode(
        x=alt.X("sr_lo:Q", scale=alt.Scale(domain=xs)), x2="sr_hi:Q", y=y, **enc)
    yerr = base.mark_rule(strokeWidth=1.5, opacity=0.7, clip=True).encode(
        x=x, y=alt.Y("safety_lo:Q", scale=alt.Scale(domain=ys)), y2="safety_hi:Q", **enc)
    pt_enc = dict(enc)
    if shape:
        pt_enc["shape"] = alt.Shape(f"{shape}:N", title=shape)
    points = base.mark_point(size=90, filled=True, opacity=0.95).encode(x=x, y=y, tooltip=tooltip, **pt_enc)
    front = base.transform_filter(alt.datum.frontier).mark_line(
        strokeDash=[6, 4], color="#444", strokeWidth=1.5, point=False).encode(
        x="sr:Q", y="safety:Q", order="sr:Q")
    diag = alt.Chart(pd.DataFrame({"sr": [0.0, 1.0], "safety": [0.0, 1.0]})).mark_line(
        color="#bbb", strokeDash=[2, 3], strokeWidth=1, clip=True).encode(x="sr:Q", y="safety:Q")
    return alt.layer(diag, front, xerr, yerr, points).properties(
        width=width, height=height, usermeta={"display_height": height + 90},
        title=alt.Title("SR vs Safety per cell", subtitle="Wilson 95% bars; dashed: non-dominated frontier"))


def rate_axis_domain(agg: pd.DataFrame, col: str, *, pad: float = 0.05, step: float = 0.1) -> list[float]:
    """An axis domain that fits `col` and its CI bounds (`col_lo`, `col_hi`), padded and
    widened to whole `step`s, inside [0, 1]: the points spread over the plot instead of
    crowding one corner of a 0-100% square."""
    vals = pd.concat([pd.to_numeric(agg[c], errors="coerce") for c in (col, f"{col}_lo", f"{col}_hi") if c in agg])
    vals = vals[np.isfinite(vals)]
    if vals.empty:
        return [0.0, 1.0]
    lo = max(0.0, math.floor((float(vals.min()) - pad) / step) * step)
    hi = min(1.0, math.ceil((float(vals.max()) + pad) / step) * step)
    return [round(lo, 6), round(hi, 6)] if hi > lo else [0.0, 1.0]


# ----------------------------------------------------------------------------- Figure 2 right

def violation_heatmap(rates: pd.DataFrame, *, labels: Mapping[str, str] | None = None,
                      by: Sequence[str] = ("model", "suite"), width: int = 520) -> alt.LayerChart:
    """Per-spec violation rate per cell (`scoring.stats.metrics.spec_rates` output).

    Inactive families (rate NaN) are grey with "—"; the text gives the rate in percent.
    """
    by = list(by)
    labels = dict(labels or {})
    df = rates[[*by, "family", "rate", "n", "n_active", "n_violated"]].copy()
    df["cell"] = [cell_label(r, by) for r in df.to_dict("records")] if by else "all"
    fam_order = list(dict.fromkeys(df["family"]))
    df["spec"] = [labels.get(f, f) for f in df["family"]]
    df["text"] = ["—" if pd.isna(r) else f"{100 * r:.0f}%" for r in df["rate"]]
    df["inactive"] = df["rate"].isna()
    df = _clean(df)
    spec_order = [labels.get(f, f) for f in fam_order]
    cells = list(dict.fromkeys(df["cell"]))
    x = alt.X("spec:N", sort=spec_order, title=None, axis=alt.Axis(labelAngle=-40, labelLimit=160,
                                                                   labelOverlap=False, orient="bottom"))
    y = alt.Y("cell:N", sort=cells, title=None, axis=alt.Axis(labelLimit=220))
    base = alt.Chart(df).encode(x=x, y=y)
    tooltip = [alt.Tooltip("cell:N"), alt.Tooltip("spec:N"), alt.Tooltip("rate:Q", format=".1%"),
               alt.Tooltip("n_violated:Q", title="violated"), alt.Tooltip("n_active:Q", title="active"),
               alt.Tooltip("n:Q", title="episodes")]
    grey = base.transform_filter(alt.datum.inactive).mark_rect(color="#eeeeee")
    rect = base.transform_filter("!datum.inactive").mark_rect().encode(
        color=alt.Color("rate:Q", title="violation rate", scale=alt.Scale(scheme="reds", domainMin=0, domainMax=1),
                        legend=None), tooltip=tooltip)
    text = base.mark_text(fontSize=11).encode(
        text="text:N",
        color=alt.condition("datum.rate > 0.35", alt.value("white"), alt.value("#333")))
    return alt.layer(grey, rect, text).properties(
        width=width, height=max(120, 22 * len(cells)), usermeta={"display_height": max(120, 22 * len(cells)) + 175},
        title=alt.Title("Per-spec violation rate", subtitle="share of the cell's episodes; — = inactive"))


# ----------------------------------------------------------------------------- Tables 10/11

def spec_scale(colors: Mapping[str, str] | None) -> alt.Scale:
    """A colour scale giving each spec the same colour in every chart (red is kept for violations)."""
    if colors:
        return alt.Scale(domain=list(colors), range=list(colors.values()))
    return alt.Scale(range=SPEC_PALETTE)


def spec_colors(labels: Sequence[str]) -> dict[str, str]:
    """label -> colour, in the given (registry) order."""
    return {lab: SPEC_PALETTE[i % len(SPEC_PALETTE)] for i, lab in enumerate(labels)}


def composition_bars(comp: pd.DataFrame, agg: pd.DataFrame, *, labels: Mapping[str, str] | None = None,
                     by: Sequence[str] = ("model", "suite"), width: int = 520,
                     colors: Mapping[str, str] | None = None) -> alt.Chart:
    """SBU composition per cell: one bar per cell as long as its SBU rate, split by the share
    of each violated family (`scoring.stats.metrics.sbu_composition` output)."""
    by = list(by)
    labels = dict(labels or {})
    rate = {tuple(r[c] for c in by): r["sbu"] for r in agg.to_dict("records")}
    df = comp[[*by, "family", "share", "violations", "sbu_count", "n"]].copy()
    df["cell"] = [cell_label(r, by) for r in df.to_dict("records")] if by else "all"
    df["spec"] = [labels.get(f, f) for f in df["family"]]
    df["sbu_rate"] = [rate.get(tuple(r[c] for c in by), np.nan) for r in df.to_dict("records")]
    df["part"] = df["share"] * df["sbu_rate"]
    cells = [cell_label(r, by) for r in agg.to_dict("records")] if by else ["all"]
    if colors:  # only the specs drawn, so the legend lists no others
        colors = {k: v for k, v in colors.items() if k in set(df["spec"])}
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("part:Q", stack="zero", title="SBU rate, split by violated spec", axis=alt.Axis(format="%")),
        y=alt.Y("cell:N", sort=cells, title=None, axis=alt.Axis(labelLimit=220)),
        color=alt.Color("spec:N", title="violated spec", scale=spec_scale(colors)),
        tooltip=[alt.Tooltip("cell:N"), alt.Tooltip("spec:N"), alt.Tooltip("share:Q", format=".0%"),
                 alt.Tooltip("sbu_rate:Q", format=".1%", title="cell SBU"),
                 alt.Tooltip("sbu_count:Q", title="SBU episodes"), alt.Tooltip("n:Q", title="episodes")],
    ).properties(width=width, height=max(120, 22 * len(cells)),
                 usermeta={"display_height": max(120, 22 * len(cells)) + 150},
                 title=alt.Title("SBU composition", subtitle="which specs the unsafe successes violate"))


# ----------------------------------------------------------------------------- episode detail

CURSOR_COLOR = "#2ca02c"  # the current step: thick green, never the violation's red dashes (no spec line is green)
CURSOR_PARAM = "cursor"  # a Vega-Lite variable: the timeline player moves the cursor without a rerun
PANEL_HEIGHT = 96
VIEW_PREFIX = "panel_clicks_"  # robustness_spec: the view of each panel holding its click and zoom selections


def violation_runs(violated: Sequence[bool]) -> list[tuple[int, int]]:
    """Maximal runs of violated steps as half-open (start, end) step ranges."""
    v = np.asarray(violated, bool)
    edges = np.diff(np.concatenate([[0], v.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def panel_y_domain(values: Sequence[float], reference: float, *, pad: float = 0.12) -> tuple[float, float]:
    """A y-range holding every finite value and the reference line (threshold or zero) with
    `pad` of the span either side, so lines at a bound (1.0, or 0 for a Boolean) stay visible."""
    v = np.asarray(values, float)
    v = np.concatenate([v[np.isfinite(v)], [reference]])
    lo, hi = float(v.min()), float(v.max())
    span = hi - lo
    if span <= 0:
        span = abs(hi) or 1.0
    return lo - pad * span, hi + pad * span


def _panel_frames(traces: pd.DataFrame, spec: str, y_field: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    one = traces[traces["spec"] == spec].sort_values("step")
    runs = violation_runs(one["violated"].to_numpy(bool))
    steps = one["step"].to_numpy(int)
    band = pd.DataFrame({"step": [int(steps[a]) for a, _ in runs], "step_end": [int(steps[b - 1]) + 1 for _, b in runs],
                         "steps": [b - a for a, b in runs]})
    single = one[one["step"].isin([int(steps[a]) for a, b in runs if b - a == 1])]
    return one, band, single


class _RobustnessParts(NamedTuple):
    panels: list  # per spec: (unit charts drawn, the clicks unit chart, the panel's properties)
    selections: tuple  # (click point, x zoom): defined on every panel's clicks view
    cursor: object  # the `cursor` variable, on the whole chart
    top: dict  # the whole chart's properties


def _robustness_parts(traces: pd.DataFrame, *, step: int | None, violating_step: int | None, mode: str,
                      selection: str, width: int, height: int, colors: Mapping[str, str] | None,
                      dt: float | None) -> _RobustnessParts:
    """The unit charts of `robustness_chart` and how they fit together (see there)."""
    if mode not in ("margin", "raw"):
        raise ValueError(f"mode: expected 'margin' or 'raw', got {mode!r}")
    specs = list(dict.fromkeys(traces["spec"]))
    if dt is None:
        later = traces[traces["step"] > 0]
        dt = float((later["t"] / later["step"]).iloc[0]) if len(later) else 0.05
    y_field = "value" if mode == "raw" else "margin"
    if colors:  # only the specs drawn, so no other colour is used
        colors = {k: v for k, v in colors.items() if k in set(specs)}
    palette = dict(colors) if colors else spec_colors(specs)
    pick = alt.selection_point(name=selection, fields=["step"], nearest=True, on="click", empty=False,
                               clear="dblclick")
    zoom = alt.selection_interval(name="zoom", bind="scales", encodings=["x"])
    cursor = alt.param(name=CURSOR_PARAM, value=-1 if step is None else int(step))
    seconds = f"datum.value + ' · ' + format(datum.value * {dt!r}, '.1f') + ' s'"
    panels = []
    for n, spec in enumerate(specs):
        one, band, single = _panel_frames(traces, spec, y_field)
        unit = str(one["unit"].iloc[0] or "") if "unit" in one and len(one) else ""
        thr = float(one["threshold"].iloc[0]) if len(one) else 0.0
        ref = thr if mode == "raw" else 0.0
        dom = panel_y_domain(one[y_field].to_numpy(float), ref)
        if mode == "raw":
            y_title = f"{unit}" if unit else "value"
        else:
            y_title = "margin / |thr|"
        last = n == len(specs) - 1
        x = alt.X("step:Q", scale=alt.Scale(nice=False, domain=[0, int(traces["step"].max()) + 1]),
                  title="step · time (s)" if last else None,
                  axis=alt.Axis(labelExpr=seconds, labels=last, ticks=True, tickCount=8, grid=True, labelOverlap=True,
                                labelFlush=True))
        y = alt.Y(f"{y_field}:Q", title=y_title, scale=alt.Scale(domain=list(dom), zero=False, nice=False),
                  axis=alt.Axis(format=".3~g", tickCount=3))
        data = _clean(one[["step", "t", "spec", "margin", "value", "threshold", "unit", "violated"]])
        tooltip = [alt.Tooltip("step:Q"), alt.Tooltip("t:Q", format=".2f", title="t (s)"),
                   alt.Tooltip("value:Q", format=".4g", title=f"signal ({unit})" if unit else "signal"),
                   alt.Tooltip("threshold:Q", format=".4g"),
                   alt.Tooltip("margin:Q", format=".3f", title="margin / |threshold|")]
        base = alt.Chart(data)
        layers = []
        if len(band):
            layers.append(alt.Chart(band).mark_rect(color=VIOLATION_RED, opacity=0.28).encode(
                x=alt.X("step:Q"), x2="step_end:Q",
                tooltip=[alt.Tooltip("step:Q", title="violated from step"), alt.Tooltip("steps:Q", title="steps")]))
        layers.append(alt.Chart(pd.DataFrame({"y": [ref], "what": ["threshold" if mode == "raw" else "zero"]}))
                      .mark_rule(color="#333", strokeDash=[6, 3], strokeWidth=1.3)
                      .encode(y=alt.Y("y:Q"), tooltip=[alt.Tooltip("what:N"), alt.Tooltip("y:Q", format=".4g")]))
        layers.append(base.mark_line(strokeWidth=1.8, interpolate="step-after", color=palette.get(spec, "#1f77b4"),
                                     clip=True).encode(x=x, y=y))
        if len(single):
            layers.append(alt.Chart(_clean(single[["step", y_field]])).mark_point(
                shape="triangle-down", size=110, filled=True, color=VIOLATION_RED, opacity=1)
                .encode(x="step:Q", y=alt.Y(f"{y_field}:Q"), tooltip=[alt.Tooltip("step:Q", title="one-step violation")]))
        if violating_step is not None:
            layers.append(alt.Chart(pd.DataFrame({"step": [int(violating_step)], "label": ["violating step"]}))
                          .mark_rule(color=VIOLATION_RED, strokeDash=[4, 3], strokeWidth=1.5)
                          .encode(x="step:Q", tooltip=[alt.Tooltip("label:N"), alt.Tooltip("step:Q")]))
        layers.append(alt.Chart(pd.DataFrame({"k": [0]})).transform_calculate(step=CURSOR_PARAM)
                      .transform_filter("datum.step >= 0")
                      .mark_rule(color=CURSOR_COLOR, strokeWidth=3.5, opacity=0.85).encode(x="step:Q"))
        clicks = base.mark_point(opacity=0, size=60).encode(x=x, y=y, tooltip=tooltip)
        title = alt.Title(f"{spec}", subtitle=f"threshold {thr:.4g} {unit}".rstrip(),
                          anchor="start", fontSize=12, subtitleFontSize=10, offset=2)
        panels.append((layers, clicks, dict(width=width, height=height, title=title)))
    total = len(specs) * (height + 48) + 60
    top = dict(usermeta={"display_height": total, "dt": dt},
               title=alt.Title("Robustness over time" if mode == "margin" else "Signals over time",
                               subtitle="red band: violated steps; ▼ one-step violation; red dashes: violating step; "
                                        "green: current step; drag to zoom"))
    return _RobustnessParts(panels, (pick, zoom), cursor, top)


def robustness_chart(traces: pd.DataFrame, *, step: int | None = None, violating_step: int | None = None,
                     mode: str = "margin", selection: str = "pt", width: int = 620,
                     height: int = PANEL_HEIGHT, colors: Mapping[str, str] | None = None,
                     dt: float | None = None) -> alt.VConcatChart:
    """Small multiples of the episode's active specs over time, one panel per spec.

    `traces` (from `dashboard.data.robustness_traces`): step, t, spec, margin (margin /
    |threshold|, NaN on gated-off steps), value (raw signal), threshold, unit, violated.

    mode "raw" plots each spec's signal in its unit against its threshold line; mode
    "margin" plots margin / |threshold| against zero. In each panel the violated steps are
    filled red (one rect per run, so a one-step spike is a visible band) and a one-step
    violation also gets its own red triangle; the violating step is a red dashed rule and the
    current step a thick green cursor driven by the Vega-Lite variable `cursor` (so a client
    can move it). The y-range of each panel fits its data and its reference line. The x axis
    gives steps and seconds (`dt`, else from the `t` column); dragging on x zooms all panels
    together (double-click resets). A nearest-step point selection named `selection` reports
    clicks ({selection: [{"step": k}]}).
    """
    parts = _robustness_parts(traces, step=step, violating_step=violating_step, mode=mode, selection=selection,
                              width=width, height=height, colors=colors, dt=dt)
    panels = [alt.layer(*layers, clicks.add_params(*parts.selections)).properties(**props)
              for layers, clicks, props in parts.panels]
    return alt.vconcat(*panels, spacing=6).add_params(parts.cursor).resolve_scale(
        x="shared", y="independent").properties(**parts.top)


def robustness_spec(traces: pd.DataFrame, *, violating_step: int | None = None, mode: str = "margin",
                    selection: str = "pt", width: int = 620, height: int = PANEL_HEIGHT,
                    colors: Mapping[str, str] | None = None, dt: float | None = None) -> dict:
    """`robustness_chart(...).to_dict()` with no current step (`cursor` -1), in a fraction of the time.

    Altair deep-copies every subchart to merge the selection parameters of a compound chart
    (0.4 s of the 0.55 s five panels take; 1-2 s in a server whose render thread is busy), so
    here only the unit charts go through Altair and the layers and the column of panels are
    put together as dicts. The result is Altair's but for the names of the views that carry the
    selections (tests/test_dashboard_charts.py compares them); it is not validated against the
    schema (the chart's own tests do that).
    """
    parts = _robustness_parts(traces, step=None, violating_step=violating_step, mode=mode, selection=selection,
                              width=width, height=height, colors=colors, dt=dt)
    datasets: dict = {}
    head: dict = {}

    def unit(chart, **extra) -> dict:
        """A unit chart's dict, its datasets and top-level keys moved to the whole spec."""
        d = chart.properties(**extra).to_dict(validate=False) if extra else chart.to_dict(validate=False)
        datasets.update(d.pop("datasets", {}))
        for key in ("config", "$schema"):
            value = d.pop(key, None)
            if value is not None:
                head.setdefault(key, value)
        return d

    views, panels = [], []
    for n, (layers, clicks, props) in enumerate(parts.panels):
        views.append(f"{VIEW_PREFIX}{n}")
        layer = [unit(c) for c in layers] + [unit(clicks, name=views[-1])]
        panel = alt.LayerChart(layer=[]).properties(**props).to_dict(validate=False)
        for key in ("$schema", "config", "layer"):
            panel.pop(key, None)
        panels.append({**panel, "layer": layer})
    params = [{**s.param.to_dict(validate=False), "views": views} for s in parts.selections]
    params.append(parts.cursor.param.to_dict(validate=False))
    top = alt.VConcatChart(vconcat=[]).properties(spacing=6, **parts.top).resolve_scale(
        x="shared", y="independent").to_dict(validate=False)
    for key in ("vconcat", "$schema", "config"):
        top.pop(key, None)
    return {**head, **top, "params": params, "vconcat": panels, "datasets": datasets}


# ----------------------------------------------------------------------------- what-if

def sensitivity_chart(curve: pd.DataFrame, *, current: float | None = None, default: float | None = None,
                      label: str = "threshold", unit: str = "", width: int = 520, height: int = 280) -> alt.LayerChart:
    """Safety and SBU against one family's threshold (`dashboard.data.sensitivity_curve`).

    `curve`: value (knob units), metric ("Safety", "SBU", ...), rate. Grey dashed rule at the
    registry default, black rule at the current setting.
    """
    df = _clean(curve[["value", "metric", "rate"]])
    title_x = f"{label} ({unit})" if unit else label
    lines = alt.Chart(df).mark_line(point=alt.OverlayMarkDef(size=25)).encode(
        x=alt.X("value:Q", title=title_x, scale=alt.Scale(zero=False, nice=False)),
        y=alt.Y("rate:Q", title="rate", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("metric:N", scale=alt.Scale(domain=["Safety", "SBU", "P[U|S]"],
                                                    range=["#2ca02c", VIOLATION_RED, "#ff7f0e"]), title=None),
        tooltip=[alt.Tooltip("value:Q", title=title_x, format=".4g"), alt.Tooltip("metric:N"),
                 alt.Tooltip("rate:Q", format=".1%")])
    layers = [lines]
    if default is not None and math.isfinite(default):
        layers.append(alt.Chart(pd.DataFrame({"value": [default], "what": ["default"]})).mark_rule(
            color="#888", strokeDash=[5, 4]).encode(x="value:Q", tooltip=["what:N", "value:Q"]))
    if current is not None and math.isfinite(current):
        layers.append(alt.Chart(pd.DataFrame({"value": [current], "what": ["current"]})).mark_rule(
            color="#111", strokeWidth=2).encode(x="value:Q", tooltip=["what:N", "value:Q"]))
    return alt.layer(*layers).properties(
        width=width, height=height, usermeta={"display_height": height + 90},
        title=alt.Title(f"Sensitivity to {label}", subtitle="grey: registry default; black: current setting"))


def outcome_bar(counts: Mapping[str, int], *, width: int = 520) -> alt.Chart:
    """A single stacked bar of the 2x2 outcome classes of the filtered episodes."""
    order = [o for o in OUTCOME_COLORS if o in counts]
    df = pd.DataFrame({"outcome": order, "episodes": [int(counts[o]) for o in order],
                       "rank": list(range(len(order)))})
    return alt.Chart(df).mark_bar(height=18).encode(
        x=alt.X("episodes:Q", stack="zero", axis=None),
        color=alt.Color("outcome:N", scale=alt.Scale(domain=order, range=[OUTCOME_COLORS[o] for o in order]),
                        legend=alt.Legend(orient="right", title=None, direction="horizontal")),
        order=alt.Order("rank:Q"), tooltip=["outcome:N", "episodes:Q"],
    ).properties(width=width, height=20, usermeta={"display_height": 44})


# ----------------------------------------------------------------------------- export

def display_height(chart: alt.TopLevelMixin, default: int | None = None) -> int | None:
    """The pixel height to show `chart` at in Streamlit, which fits the whole chart (titles,
    axes and legends included) into the height it is given."""
    meta = getattr(chart, "usermeta", None)
    meta = meta.to_dict() if hasattr(meta, "to_dict") else meta
    return int(meta["display_height"]) if isinstance(meta, dict) and "display_height" in meta else default


def chart_bytes(chart: alt.TopLevelMixin, fmt: str, *, scale: float = 2.0) -> bytes:
    """The chart as PNG, SVG or PDF bytes, rendered offline by vl-convert."""
    fmt = fmt.lower()
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unsupported chart format {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    if fmt == "svg":
        buf = io.StringIO()
        chart.save(buf, format="svg")
        return buf.getvalue().encode()
    buf = io.BytesIO()
    chart.save(buf, format=fmt, **({"scale_factor": scale} if fmt == "png" else {}))
    return buf.getvalue()
