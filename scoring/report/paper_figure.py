"""Figure 2 of the paper: SR against Safety per cell (Wilson 95% bars, non-dominated
frontier) next to a per-axis violation heatmap (scene interaction, object handling,
execution). Pure builders, data embedded in the spec; `safevla figure --paper fig2`
writes it through vl-convert (`save_figure2`), and the dashboard shows and exports the
same charts.

Altair and vl-convert come with the `dashboard` extra, so the builders import Altair when
called: `scoring` itself imports without them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from scoring.report.axis_rates import AXES, AXIS_LABELS

if TYPE_CHECKING:
    import altair as alt

FORMATS = ("pdf", "svg", "png")
PNG_SCALE = 2.0  # pixels per Vega-Lite pixel in the PNG: sharp in a paper at column width
MARKER_SIZE = 90  # area in square pixels of a cell's marker
MARKER_PAD = 8  # pixels between the frame and a cell at 0% or 100%: more than a marker's radius (4.7)
# models: Okabe-Ito's colour-blind-safe qualitative palette, ordered so that neighbours differ in
# hue (Streamlit's default put light blue next to dark blue); no red, which marks violations
MODEL_PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#999999", "#F0E442"]


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


def cell_label(row: Mapping, by: Sequence[str]) -> str:
    """A cell's name on an axis: its `by` values joined ("pi0 · LIBERO-Spatial")."""
    return " · ".join(str(row[c]) for c in by)


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


# ----------------------------------------------------------------------------- Figure 2 left

def sr_safety_scatter(agg: pd.DataFrame, *, by: Sequence[str] = ("model", "suite"), width: int = 520,
                      height: int = 400) -> alt.LayerChart:
    """SR (x) against Safety (y) per cell with Wilson 95% error bars and the non-dominated frontier.

    `agg` is `scoring.stats.metrics.aggregate(...)` output: sr, sr_lo, sr_hi, safety, safety_lo,
    safety_hi, sbu, n and the `by` columns.
    """
    import altair as alt

    by = list(by)
    color = by[0] if by else None
    shape = by[1] if len(by) > 1 else None
    df = agg[[*by, "n", "sr", "sr_lo", "sr_hi", "safety", "safety_lo", "safety_hi", "sbu"]].copy()
    df["cell"] = [cell_label(r, by) for r in df.to_dict("records")] if by else "all"
    df["frontier"] = pareto_front(df, "sr", "safety")
    # an explicit domain clips marks at the frame: pad it by a marker's radius so a cell at SR or
    # Safety 0% / 100% shows its whole marker, and never clip the markers themselves
    xscale = alt.Scale(domain=rate_axis_domain(agg, "sr"), padding=MARKER_PAD, nice=False)
    yscale = alt.Scale(domain=rate_axis_domain(agg, "safety"), padding=MARKER_PAD, nice=False)
    base = alt.Chart(df)
    enc = {}
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=color, scale=alt.Scale(range=MODEL_PALETTE))
    x = alt.X("sr:Q", title="Success rate (SR)", scale=xscale, axis=alt.Axis(format="%"))
    y = alt.Y("safety:Q", title="Safety (no spec violated)", scale=yscale, axis=alt.Axis(format="%"))
    tooltip = [alt.Tooltip("cell:N", title="cell"), alt.Tooltip("n:Q"),
               alt.Tooltip("sr:Q", format=".1%", title="SR"), alt.Tooltip("safety:Q", format=".1%", title="Safety"),
               alt.Tooltip("sbu:Q", format=".1%", title="SBU")]
    xerr = base.mark_rule(strokeWidth=1.5, opacity=0.7, clip=True).encode(
        x=alt.X("sr_lo:Q", scale=xscale), x2="sr_hi:Q", y=y, **enc)
    yerr = base.mark_rule(strokeWidth=1.5, opacity=0.7, clip=True).encode(
        x=x, y=alt.Y("safety_lo:Q", scale=yscale), y2="safety_hi:Q", **enc)
    pt_enc = dict(enc)
    if shape:
        pt_enc["shape"] = alt.Shape(f"{shape}:N", title=shape)
    points = base.mark_point(size=MARKER_SIZE, filled=True, opacity=0.95, clip=False).encode(
        x=x, y=y, tooltip=tooltip, **pt_enc)
    front = base.transform_filter(alt.datum.frontier).mark_line(
        strokeDash=[6, 4], color="#444", strokeWidth=1.5, point=False).encode(
        x="sr:Q", y="safety:Q", order="sr:Q")
    diag = alt.Chart(pd.DataFrame({"sr": [0.0, 1.0], "safety": [0.0, 1.0]})).mark_line(
        color="#bbb", strokeDash=[2, 3], strokeWidth=1, clip=True).encode(x="sr:Q", y="safety:Q")
    # display_height: the whole chart's pixel height with titles and legend, for a page that
    # must give the chart its height up front (the dashboard's `charts.display_height`)
    return alt.layer(diag, front, xerr, yerr, points).properties(
        width=width, height=height, usermeta={"display_height": height + 90},
        title=alt.Title("SR vs Safety per cell", subtitle="Wilson 95% bars; dashed: non-dominated frontier"))


# ----------------------------------------------------------------------------- Figure 2 right

def axis_heatmap(rates: pd.DataFrame, *, by: Sequence[str] = ("model", "suite"), cells: Sequence[str] | None = None,
                 note: Sequence[str] = (), width: int = 240) -> alt.LayerChart:
    """Cells (rows) x axes (columns), coloured by episode violation rate, text in percent
    ("—" where no family of the axis is active). `rates` is `scoring.report.axis_rates.axis_rates`;
    `note` lines go under the title (the torque statement)."""
    import altair as alt

    by = list(by)
    df = rates[[*by, "axis", "label", "rate", "n", "n_active", "n_violated"]].copy()
    df["cell"] = [cell_label(r, by) for r in df.to_dict("records")]
    df["text"] = ["—" if pd.isna(r) else f"{100 * r:.0f}" for r in df["rate"]]
    df["inactive"] = df["rate"].isna()
    order = list(cells) if cells is not None else list(dict.fromkeys(df["cell"]))
    x = alt.X("label:N", sort=[AXIS_LABELS[a] for a in AXES], title=None,
              axis=alt.Axis(labelAngle=-30, orient="bottom", labelLimit=140))
    y = alt.Y("cell:N", sort=order, title=None, axis=alt.Axis(labelLimit=220))
    base = alt.Chart(df).encode(x=x, y=y)
    grey = base.transform_filter(alt.datum.inactive).mark_rect(color="#eeeeee")
    rect = base.transform_filter("!datum.inactive").mark_rect().encode(
        color=alt.Color("rate:Q", scale=alt.Scale(scheme="reds", domain=[0, 1]),
                        legend=alt.Legend(title="violation rate", format="%", orient="right")),
        tooltip=[alt.Tooltip("cell:N"), alt.Tooltip("label:N", title="axis"),
                 alt.Tooltip("rate:Q", format=".1%"), alt.Tooltip("n_violated:Q", title="violated"),
                 alt.Tooltip("n:Q", title="episodes")])
    text = base.mark_text(fontSize=11).encode(
        text="text:N", color=alt.condition("datum.rate > 0.5", alt.value("white"), alt.value("#222")))
    subtitle = ["episode violation rate (%) per risk axis", "— = no active spec", *note]
    return alt.layer(grey, rect, text).properties(
        width=width, height=max(120, 20 * len(order)), title=alt.Title("Violations by axis", subtitle=subtitle))


# ----------------------------------------------------------------------------- the figure

def figure2(agg: pd.DataFrame, rates: pd.DataFrame, *, by: Sequence[str] = ("model", "suite"),
            torque_note: Sequence[str] = (), made_with: Sequence[str] = ()) -> alt.HConcatChart:
    """Figure 2: `agg` is `scoring.stats.metrics.aggregate(..., ci=False)` (Wilson bounds are
    always there), `rates` is `scoring.report.axis_rates.axis_rates` over the same cells;
    `made_with` lines (the applicability preset, the force sampling) go under the title."""
    import altair as alt

    by = list(by)
    cells = [cell_label(r, by) for r in agg.sort_values(by).to_dict("records")]
    size = max(300, 20 * len(cells))
    left = sr_safety_scatter(agg, by=by, width=size, height=size)
    left.usermeta = alt.Undefined  # a top-level-only property: invalid inside a concat
    right = axis_heatmap(rates, by=by, cells=cells, note=torque_note, width=240)
    return alt.hconcat(left, right, spacing=40).resolve_scale(color="independent", shape="independent").properties(
        title=alt.Title("Task success, safety and violation type",
                        subtitle=["Left: each marker is a model-suite cell, bars Wilson 95% CIs, dashed the "
                                  "non-dominated frontier. Right: episode violation rates per axis.", *made_with]))


def save_figure2(chart: alt.TopLevelMixin, out: str | Path, *, formats: Sequence[str] | None = None) -> list[Path]:
    """Writes `out` in its own format (.pdf/.svg/.png), or, with no suffix, one file per
    format in `formats` (default all three), each through a temporary file and a rename.
    Returns the paths."""
    out = Path(out)
    suffix = out.suffix.lower().lstrip(".")
    if suffix and suffix not in FORMATS:
        raise ValueError(f"unsupported figure format {out.suffix!r}; expected .pdf, .svg or .png (or no suffix "
                         "for all three)")
    targets = [out] if suffix else [out.with_name(f"{out.name}.{f}") for f in (formats or FORMATS)]
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in targets:
        fmt = path.suffix.lower().lstrip(".")
        tmp = path.with_name(f".{path.name}.tmp")
        chart.save(str(tmp), format=fmt, **({"scale_factor": PNG_SCALE} if fmt == "png" else {}))  # vl-convert
        tmp.replace(path)
    return targets


def figure2_from_store(store: str | Path, *, applicability: str = "appendix-d") -> alt.HConcatChart:
    """Figure 2 of a run store, cells (model, suite) with the paper's suite names."""
    from scoring.errors import SafeVLAError
    from scoring.registry.lookup import load_registry
    from scoring.report.axis_rates import axis_rates
    from scoring.report.paper_layout import suite_info, with_canonical_benchmark
    from scoring.report.provenance import sampling_note
    from scoring.report.readings import Reading, apply_reading
    from scoring.report.torque_joints import CLIPPED_HOSTS, torque_attribution
    from scoring.stats.metrics import aggregate
    from scoring.store.write import load_store

    reg = load_registry()
    _, episodes, spec_results = load_store(store)
    if episodes.empty:
        raise SafeVLAError(f"run store {str(store)!r} has no scored episodes")
    episodes, spec_results = apply_reading(episodes, spec_results, Reading(applicability=applicability), registry=reg)
    named = with_canonical_benchmark(episodes, reg)
    named = named.assign(suite=[suite_info(b)["name"] for b in named["benchmark"]])
    by = ("model", "suite")
    torque = torque_attribution(store, episodes, spec_results, registry=reg)
    note = ["execution = torque + self-collision"]
    if torque.n_violations:
        resolved = torque.n_violations - torque.unresolved
        others = {j: k for j, k in sorted(torque.by_joint.items()) if j != 5}
        # the clipping facts are LIBERO's, and false for records that violate on other joints
        clipped = set(named["host"]) <= set(CLIPPED_HOSTS) and not others
        note += [f"joint 5 (12 N·m) carries {torque.joint5} of {resolved} torque violations"
                 + (":" if clipped else "")]
        if clipped:
            note += ["LIBERO's simulator clips joints 1-5 at 80 N·m, so only joint 5 can exceed its limit"]
        elif others:
            note += ["other joints: " + ", ".join(f"joint {j}: {k}" for j, k in others.items())]
    made_with = [f"Applicability preset: {applicability}.", sampling_note(episodes)]
    return figure2(aggregate(named, by=by, ci=False), axis_rates(named, spec_results, registry=reg, by=by), by=by,
                   torque_note=note, made_with=[line for line in made_with if line])
