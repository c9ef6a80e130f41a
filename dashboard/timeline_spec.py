"""The episode detail's robustness timeline as a Vega-Lite dict, and the dashboard's palettes,
without Altair: importing Altair took 0.2-0.45 s of a fresh server's first detail page, whose
player draws this dict with its own vega bundle. `dashboard.charts` builds the other charts
with Altair, and this one as an Altair chart for exports (`robustness_chart`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

OUTCOME_COLORS = {"SBU": "#d62728", "safe success": "#2ca02c", "unsafe failure": "#ff7f0e",
                  "safe failure": "#9e9e9e"}
VIOLATION_RED = "#d62728"
# spec lines avoid red, which marks violations
SPEC_PALETTE = ["#8c564b", "#e377c2", "#1f77b4", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#7f7f7f",
                "#aec7e8", "#c5b0d5"]


def spec_colors(labels: Sequence[str]) -> dict[str, str]:
    """label -> colour, in the given (registry) order."""
    return {lab: SPEC_PALETTE[i % len(SPEC_PALETTE)] for i, lab in enumerate(labels)}


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
    # a run ends where the next step drawn begins: the next step itself in a full trace, the next
    # bucket's first sample in a decimated one (`dashboard.data.minmax_steps`), so a band keeps its width
    after = np.append(steps[1:], steps[-1] + 1) if len(steps) else steps
    ends = [int(after[b - 1]) for _, b in runs]
    band = pd.DataFrame({"step": [int(steps[a]) for a, _ in runs], "step_end": ends,
                         "steps": [e - int(steps[a]) for (a, _), e in zip(runs, ends)]})
    single = one[one["step"].isin([int(steps[a]) for a, b in runs if b - a == 1])]
    return one, band, single


def _q(field: str, **extra) -> dict:
    """A quantitative Vega-Lite field definition."""
    return {"field": field, "type": "quantitative", **extra}


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN and +-inf as None (Vega-Lite draws gaps), numpy scalars as Python's
    (`robustness_spec` builds its dicts without Altair, which does this for the other charts)."""
    columns = {c: [None if isinstance(x, float) and not math.isfinite(x) else x for x in df[c].tolist()]
               for c in df.columns}
    return [dict(zip(columns, row)) for row in zip(*columns.values())]


def _panel(one: pd.DataFrame, band: pd.DataFrame, single: pd.DataFrame, *, spec: str, mode: str, y_field: str,
           color: str, violating_step: int | None, x_max: int, last: bool, seconds: str, view: str,
           width: int, height: int) -> dict:
    """One spec's panel of `robustness_spec`: its layers as Vega-Lite dicts, data inline."""
    unit = str(one["unit"].iloc[0] or "") if "unit" in one and len(one) else ""
    thr = float(one["threshold"].iloc[0]) if len(one) else 0.0
    ref = thr if mode == "raw" else 0.0
    lo, hi = panel_y_domain(one[y_field].to_numpy(float), ref)
    y_title = (unit or "value") if mode == "raw" else "margin / |thr|"
    x = _q("step", scale={"nice": False, "domain": [0, x_max + 1]}, title="step · time (s)" if last else None,
           axis={"labelExpr": seconds, "labels": last, "ticks": True, "tickCount": 8, "grid": True,
                 "labelOverlap": True, "labelFlush": True})
    y = _q(y_field, title=y_title, scale={"domain": [lo, hi], "zero": False, "nice": False},
           axis={"format": ".3~g", "tickCount": 3})
    values = _records(one[["step", "t", "spec", "margin", "value", "threshold", "unit", "violated"]])
    tooltip = [_q("step"), _q("t", format=".2f", title="t (s)"),
               _q("value", format=".4g", title=f"signal ({unit})" if unit else "signal"),
               _q("threshold", format=".4g"), _q("margin", format=".3f", title="margin / |threshold|")]
    layers = []
    if len(band):
        layers.append({"data": {"values": _records(band)},
                       "mark": {"type": "rect", "color": VIOLATION_RED, "opacity": 0.28},
                       "encoding": {"x": _q("step"), "x2": {"field": "step_end"},
                                    "tooltip": [_q("step", title="violated from step"), _q("steps", title="steps")]}})
    layers.append({"data": {"values": [{"y": ref, "what": "threshold" if mode == "raw" else "zero"}]},
                   "mark": {"type": "rule", "color": "#333", "strokeDash": [6, 3], "strokeWidth": 1.3},
                   "encoding": {"y": _q("y"), "tooltip": [{"field": "what", "type": "nominal"},
                                                          _q("y", format=".4g")]}})
    layers.append({"data": {"values": values},
                   "mark": {"type": "line", "strokeWidth": 1.8, "interpolate": "step-after", "color": color,
                            "clip": True},
                   "encoding": {"x": x, "y": y}})
    if len(single):
        layers.append({"data": {"values": _records(single[["step", y_field]])},
                       "mark": {"type": "point", "shape": "triangle-down", "size": 110, "filled": True,
                                "color": VIOLATION_RED, "opacity": 1},
                       "encoding": {"x": _q("step"), "y": _q(y_field),
                                    "tooltip": [_q("step", title="one-step violation")]}})
    if violating_step is not None:
        layers.append({"data": {"values": [{"step": int(violating_step), "label": "violating step"}]},
                       "mark": {"type": "rule", "color": VIOLATION_RED, "strokeDash": [4, 3], "strokeWidth": 1.5},
                       "encoding": {"x": _q("step"), "tooltip": [{"field": "label", "type": "nominal"}, _q("step")]}})
    layers.append({"data": {"values": [{"k": 0}]},
                   "transform": [{"calculate": CURSOR_PARAM, "as": "step"}, {"filter": "datum.step >= 0"}],
                   "mark": {"type": "rule", "color": CURSOR_COLOR, "strokeWidth": 3.5, "opacity": 0.85},
                   "encoding": {"x": _q("step")}})
    layers.append({"data": {"values": values}, "mark": {"type": "point", "opacity": 0, "size": 60},
                   "encoding": {"x": x, "y": y, "tooltip": tooltip}, "name": view})
    title = {"text": spec, "subtitle": f"threshold {thr:.4g} {unit}".rstrip(), "anchor": "start", "fontSize": 12,
             "subtitleFontSize": 10, "offset": 2}
    return {"width": width, "height": height, "title": title, "layer": layers}


def _named_datasets(spec: dict) -> dict:
    """`spec` with every inline dataset moved to its top-level `datasets` under the name Altair
    gives it (a hash of its values): the panels' lines and click layers share one copy."""
    datasets: dict = {}
    for panel in spec["vconcat"]:
        for layer in panel["layer"]:
            values = layer["data"]["values"]
            name = "data-" + hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:32]
            datasets[name] = values
            layer["data"] = {"name": name}
    return {**spec, "datasets": datasets}


# What Altair puts on a top-level chart: its Vega-Lite version and its default theme
# (tests/test_dashboard_charts.py checks them against the installed Altair's)
VEGA_LITE_HEAD = {"$schema": "https://vega.github.io/schema/vega-lite/v6.4.1.json",
                  "config": {"view": {"continuousWidth": 300, "continuousHeight": 300}}}


def robustness_spec(traces: pd.DataFrame, *, step: int | None = None, violating_step: int | None = None,
                    mode: str = "margin", selection: str = "pt", width: int = 620, height: int = PANEL_HEIGHT,
                    colors: Mapping[str, str] | None = None, dt: float | None = None) -> dict:
    """Small multiples of the episode's active specs over time, one panel per spec, as a
    Vega-Lite dict (the timeline player draws it; `robustness_chart` is the same as an Altair chart).

    `traces` (from `dashboard.data.robustness_traces`): step, t, spec, margin (margin /
    |threshold|, NaN on gated-off steps), value (raw signal), threshold, unit, violated.

    mode "raw" plots each spec's signal in its unit against its threshold line; mode
    "margin" plots margin / |threshold| against zero. In each panel the violated steps are
    filled red (one rect per run, so a one-step spike is a visible band) and a one-step
    violation also gets its own red triangle; the violating step is a red dashed rule and the
    current step (`step`; None: none) a thick green cursor driven by the Vega-Lite variable
    `cursor` (so a client can move it). The y-range of each panel fits its data and its
    reference line. The x axis gives steps and seconds (`dt`, else from the `t` column);
    dragging on x zooms all panels together (double-click resets). A nearest-step point
    selection named `selection` reports clicks ({selection: [{"step": k}]}).

    Built as dicts, not through Altair's API: for a demo episode's five panels this takes 11 ms,
    where Altair's unit charts alone took 130 ms and its compound chart 0.55 s (more in a server
    whose render thread is busy). The result
    is what Altair writes for the same chart, to the letter but for the views' names
    (tests/test_dashboard_charts.py builds it with Altair to compare); it is not validated
    against the schema here (`robustness_chart` and the tests do that).
    """
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
    seconds = f"datum.value + ' · ' + format(datum.value * {dt!r}, '.1f') + ' s'"
    x_max = int(traces["step"].max()) if len(traces) else 0
    views = [f"{VIEW_PREFIX}{n}" for n in range(len(specs))]
    panels = [_panel(*_panel_frames(traces, spec, y_field), spec=spec, mode=mode, y_field=y_field,
                     color=palette.get(spec, "#1f77b4"), violating_step=violating_step, x_max=x_max,
                     last=n == len(specs) - 1, seconds=seconds, view=views[n], width=width, height=height)
              for n, spec in enumerate(specs)]
    params = [{"name": selection, "select": {"type": "point", "fields": ["step"], "nearest": True, "on": "click",
                                             "clear": "dblclick"}, "views": views},
              {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales", "views": views},
              {"name": CURSOR_PARAM, "value": -1 if step is None else int(step)}]
    top = {**VEGA_LITE_HEAD, "resolve": {"scale": {"x": "shared", "y": "independent"}}, "spacing": 6,
           "title": {"text": "Robustness over time" if mode == "margin" else "Signals over time",
                     "subtitle": "red band: violated steps; ▼ one-step violation; red dashes: violating step; "
                                 "green: current step; drag to zoom"},
           "usermeta": {"display_height": len(specs) * (height + 48) + 60, "dt": dt},
           "params": params, "vconcat": panels}
    return _named_datasets(top)
