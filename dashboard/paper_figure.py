"""Figure 2 of the paper: SR against Safety per cell (Wilson 95% bars, non-dominated
frontier) next to a per-axis violation heatmap (scene interaction, object handling,
execution). Pure builders, data embedded in the spec; `safevla figure --paper fig2`
writes it through vl-convert (`save_figure2`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import altair as alt
import pandas as pd

from dashboard.charts import cell_label, chart_bytes, sr_safety_scatter
from scoring.report.axis_rates import AXES, AXIS_LABELS

FORMATS = ("pdf", "svg", "png")


def axis_heatmap(rates: pd.DataFrame, *, by: Sequence[str] = ("model", "suite"), cells: Sequence[str] | None = None,
                 note: Sequence[str] = (), width: int = 240) -> alt.LayerChart:
    """Cells (rows) x axes (columns), coloured by episode violation rate, text in percent
    ("—" where no family of the axis is active). `rates` is `scoring.report.axis_rates.axis_rates`;
    `note` lines go under the title (the torque statement)."""
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


def figure2(agg: pd.DataFrame, rates: pd.DataFrame, *, by: Sequence[str] = ("model", "suite"),
            torque_note: Sequence[str] = ()) -> alt.HConcatChart:
    """Figure 2: `agg` is `scoring.stats.metrics.aggregate(..., ci=False)` (Wilson bounds are
    always there), `rates` is `scoring.report.axis_rates.axis_rates` over the same cells."""
    by = list(by)
    cells = [cell_label(r, by) for r in agg.sort_values(by).to_dict("records")]
    size = max(300, 20 * len(cells))
    left = sr_safety_scatter(agg, by=by, width=size, height=size)
    left.usermeta = alt.Undefined  # a top-level-only property: invalid inside a concat
    right = axis_heatmap(rates, by=by, cells=cells, note=torque_note, width=240)
    return alt.hconcat(left, right, spacing=40).resolve_scale(color="independent", shape="independent").properties(
        title=alt.Title("Task success, safety and violation type",
                        subtitle="Left: each marker is a model-suite cell, bars Wilson 95% CIs, dashed the "
                                 "non-dominated frontier. Right: episode violation rates per axis."))


def save_figure2(chart: alt.TopLevelMixin, out: str | Path, *, formats: Sequence[str] | None = None) -> list[Path]:
    """Writes `out` in its own format (.pdf/.svg/.png), or, with no suffix, one file per
    format in `formats` (default all three). Returns the paths."""
    out = Path(out)
    suffix = out.suffix.lower().lstrip(".")
    if suffix and suffix not in FORMATS:
        raise ValueError(f"unsupported figure format {out.suffix!r}; expected .pdf, .svg or .png (or no suffix "
                         "for all three)")
    targets = [out] if suffix else [out.with_name(f"{out.name}.{f}") for f in (formats or FORMATS)]
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in targets:
        data = chart_bytes(chart, path.suffix.lstrip("."))
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return targets


def figure2_from_store(store: str | Path, *, applicability: str = "appendix-d") -> alt.HConcatChart:
    """Figure 2 of a run store, cells (model, suite) with the paper's suite names."""
    from scoring.report.axis_rates import axis_rates
    from scoring.errors import SafeVLAError
    from scoring.stats.metrics import aggregate
    from scoring.report.paper_layout import suite_info, with_canonical_benchmark
    from scoring.report.readings import Reading, apply_reading
    from scoring.registry.lookup import load_registry
    from scoring.store.write import load_store
    from scoring.report.torque_joints import torque_attribution

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
        note += [f"joint 5 (12 N·m) carries {torque.joint5} of {resolved} torque violations:",
                 "the simulator clips joints 1-5 at 80 N·m, so only joint 5 can exceed its limit"]
    return figure2(aggregate(named, by=by, ci=False), axis_rates(named, spec_results, registry=reg, by=by), by=by,
                   torque_note=note)
