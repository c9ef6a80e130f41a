"""The Compare page's forest plot: the differences A - B of one pair of models,
per metric and group, as a point with its confidence interval and a zero line.

Pure functions: `forest_frame` reads the pairs table of `scoring.stats.compare` (paired) or
`scoring.stats.compare_unpaired` (unpaired) through `scoring.stats.compare_verdict.pair_result`, so the
plot, the verdict sentence and the tables show the same numbers; `forest_chart` draws it.
Rates are in percentage points and VSI in its own unit, so each sits in its own panel.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

from scoring.stats.compare_verdict import format_p, pair_result
from scoring.stats.ranking import HIGHER_IS_BETTER, LABELS, METRICS

FAVOURS_COLORS = {"A": "#1b7837", "B": "#762a83", "neither": "#8c8c8c"}


def forest_frame(pairs: pd.DataFrame, model_a: str, model_b: str, *,
                 groups: Sequence[str] = ("overall",)) -> pd.DataFrame:
    """One row per (metric, group): `diff`, `lo`, `hi` (percentage points for rates, VSI
    units for VSI; A - B), `p`, `significant`, `favours` ("A", "B" or "neither": the model
    the significant difference is good for, given the metric's direction) and `row` (label)."""
    rows = []
    for metric in METRICS:
        scale = 1.0 if metric == "vsi" else 100.0
        for group in groups:
            r = pair_result(pairs, model_a, model_b, metric, group=group)
            a_better = (r.diff > 0) == HIGHER_IS_BETTER[metric]
            rows.append({"metric": LABELS[metric], "panel": "VSI difference" if metric == "vsi" else
                         "rate difference (pp)", "group": group, "row": f"{LABELS[metric]} · {group}",
                         "diff": scale * r.diff, "lo": scale * r.diff_lo, "hi": scale * r.diff_hi,
                         "p": format_p(r.p_value), "test": r.test, "significant": r.significant,
                         "favours": ("A" if a_better else "B") if r.significant and r.diff != 0 else "neither"})
    return pd.DataFrame(rows)


def _panel(frame: pd.DataFrame, title: str, a: str, b: str, width: int) -> alt.LayerChart:
    order = list(frame["row"])
    y = alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=260))
    colour = alt.Color("favours:N", title="significant, favours",
                       scale=alt.Scale(domain=list(FAVOURS_COLORS), range=list(FAVOURS_COLORS.values())),
                       legend=alt.Legend(orient="bottom", labelExpr=f"datum.label == 'A' ? 'A: {a}' : "
                                                                    f"datum.label == 'B' ? 'B: {b}' : 'neither'"))
    tip = [alt.Tooltip("row:N", title="metric · group"), alt.Tooltip("diff:Q", title="A − B", format=".3~f"),
           alt.Tooltip("lo:Q", title="CI low", format=".3~f"), alt.Tooltip("hi:Q", title="CI high", format=".3~f"),
           alt.Tooltip("test:N"), alt.Tooltip("p:N")]
    lo, hi = float(min(frame["lo"].min(), 0)), float(max(frame["hi"].max(), 0))
    pad = 0.08 * (hi - lo or 1)
    scale = alt.Scale(domain=[lo - pad, hi + pad], nice=False)
    base = alt.Chart(frame).encode(y=y, color=colour, tooltip=tip)
    zero = alt.Chart(pd.DataFrame({"zero": [0.0]})).mark_rule(color="#444", strokeDash=[4, 3]).encode(
        x=alt.X("zero:Q", scale=scale))
    bars = base.mark_rule(strokeWidth=2).encode(x=alt.X("lo:Q", title=f"{title}: A − B", scale=scale), x2="hi:Q")
    points = base.mark_point(filled=True, size=70).encode(x=alt.X("diff:Q", scale=scale))
    return alt.layer(zero, bars, points).properties(width=width, height=22 * len(frame) + 10)


def forest_chart(frame: pd.DataFrame, model_a: str, model_b: str, *, width: int = 520) -> alt.VConcatChart:
    """Point and CI of every row of `forest_frame`, a dashed zero line, one panel per unit."""
    panels = [_panel(part, panel, model_a, model_b, width)
              for panel, part in frame.groupby("panel", sort=False)]
    return alt.vconcat(*panels).resolve_scale(x="independent", color="shared").properties(
        title=alt.TitleParams(f"A = {model_a}, B = {model_b}: differences with 95% intervals", anchor="start"))
