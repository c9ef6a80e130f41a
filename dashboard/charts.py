"""Pure chart builders: tidy DataFrames in, Altair charts out (data embedded, no URLs).

Nothing here computes a metric: the numbers come from `scoring` (aggregates, per-spec
rates, SBU composition, what-if re-scores) through `dashboard.data`. The builders only
lay them out, so each is tested on its Vega-Lite dict (tests/test_dashboard_charts.py),
and every chart saves to PNG/SVG/PDF offline through vl-convert (`chart_bytes`). The
paper's Figure 2 and its SR-vs-Safety scatter are report products, built in
`scoring.report.paper_figure` for the dashboard and `safevla figure` alike.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from dashboard.timeline_spec import OUTCOME_COLORS, PANEL_HEIGHT, SPEC_PALETTE, VIOLATION_RED, robustness_spec
from scoring.report.paper_figure import cell_label

# Robustness traces of long episodes pass Altair's default 5,000-row guard.
alt.data_transformers.disable_max_rows()

EXPORT_FORMATS = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}


# ----------------------------------------------------------------------------- violations per spec

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


def robustness_chart(traces: pd.DataFrame, *, step: int | None = None, violating_step: int | None = None,
                     mode: str = "margin", selection: str = "pt", width: int = 620,
                     height: int = PANEL_HEIGHT, colors: Mapping[str, str] | None = None,
                     dt: float | None = None) -> alt.VConcatChart:
    """`robustness_spec` as an Altair chart (validated against the schema), for exports."""
    return alt.VConcatChart.from_dict(robustness_spec(traces, step=step, violating_step=violating_step, mode=mode,
                                                      selection=selection, width=width, height=height,
                                                      colors=colors, dt=dt))


# ----------------------------------------------------------------------------- what-if

def sensitivity_chart(curve: pd.DataFrame, *, current: float | None = None, default: float | None = None,
                      label: str = "threshold", unit: str = "", width: int = 520, height: int = 280) -> alt.LayerChart:
    """Safety and SBU against one family's threshold (`dashboard.data.sensitivity_curve`).

    `curve`: value (knob units), metric ("Safety", "SBU", ...), rate. Grey dashed rule at the
    registry default, black rule at the current setting.
    """
    df = curve[["value", "metric", "rate"]]
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
