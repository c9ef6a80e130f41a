"""The What-if page's data: the summary against the registry's thresholds, flipped episodes,
sensitivity curves.
Imports scoring and the knobs/store/verdicts modules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dashboard.data.knobs import Knob, knob_defaults, knob_overrides
from dashboard.data.overview import settled_frame
from dashboard.data.store import BY, StoreData
from dashboard.data.verdicts import Verdicts
from scoring.stats.metrics import aggregate, unsettled_mask


def base_aggregates(v: Verdicts, *, by: Sequence[str] = BY) -> dict:
    """`aggregate` per cell and overall (ci off): the reference side of `whatif_summary`."""
    frame = settled_frame(v)
    return {"cells": aggregate(frame, by=by, ci=False), "all": aggregate(frame, by=(), ci=False)}


def whatif_summary(data: StoreData, v: Verdicts, base: Verdicts | dict, *, by: Sequence[str] = BY) -> pd.DataFrame:
    """Per cell (plus "all"): SR, Safety, SBU, P[U|S], VSI under `v`, and deltas against `base`
    (verdicts, or their `base_aggregates`)."""
    ref_aggs = base if isinstance(base, dict) else base_aggregates(base, by=by)
    rows = []
    for b, name in ((by, "cells"), ((), "all")):
        cur = aggregate(settled_frame(v), by=b, ci=False)
        ref = ref_aggs[name]
        for (_, c), (_, r) in zip(cur.iterrows(), ref.iterrows()):
            row = {col: c[col] for col in by} if b else {col: "all" for col in by}
            row["n"] = int(c["n"])
            for name_ in ("sr", "safety", "sbu", "p_unsafe_given_success", "vsi"):
                row[name_] = c[name_]
                row[f"d_{name_}"] = c[name_] - r[name_]
            rows.append(row)
    return pd.DataFrame(rows)


def flipped(data: StoreData, overrides: Mapping[str, float], *, limit: int | None = 1000) -> pd.DataFrame:
    """Episodes whose safety verdict differs from the default (`WhatIf.flips`), with context."""
    fl = data.whatif.flips(dict(overrides))
    if fl.empty:
        return fl.assign(model=[], suite=[], task_id=[], change=[])
    ctx = data.episodes.set_index("episode_id").loc[fl["episode_id"], ["model", "suite", "task_id"]]
    fl = fl.assign(model=ctx["model"].to_numpy(), suite=ctx["suite"].to_numpy(), task_id=ctx["task_id"].to_numpy())
    fl["change"] = np.where(fl["safe_after"], "unsafe → safe", "safe → unsafe")
    fl["sbu_change"] = np.where(fl["success"], np.where(fl["safe_after"], "leaves SBU", "becomes SBU"), "")
    fl = fl.sort_values(["success", "vsi_after", "vsi_before"], ascending=[False, False, False], kind="stable")
    return fl.head(limit).reset_index(drop=True) if limit else fl.reset_index(drop=True)


def knob_active_count(data: StoreData, knob: Knob) -> int:
    """How many episodes of the store have at least one of the knob's families active: 0
    means its slider can change nothing (tilt on the demo store: no task holds an object
    that tilt applies to)."""
    cols = [j for j, f in enumerate(data.families) if f in knob.families]
    return int(data.active[:, cols].any(axis=1).sum()) if cols else 0


def knob_grid(knob: Knob, *, current: float | None, default: float | None, n: int = 21,
              extra: Sequence[float] = ()) -> np.ndarray:
    grid = np.linspace(knob.lo, knob.hi, n)
    pts = [x for x in (current, default, *extra) if x is not None and knob.lo <= x <= knob.hi]
    return np.unique(np.round(np.concatenate([grid, pts]), 9))


def sensitivity_curve(data: StoreData, knob: Knob, values: Mapping[str, float] | None = None, *,
                      n: int = 21) -> pd.DataFrame:
    """Safety, SBU and P[U|S] over all episodes as `knob` sweeps its range, every other
    threshold at `values` (default: the registry defaults, as Table 9 varies one family
    at a time): the continuous version of Table 9, re-scored by `WhatIf.rescore`."""
    values = dict(values or {})
    default = knob_defaults(data.registry).get(knob.name)
    tiers = []
    for fam in knob.families[:1]:
        if fam in data.registry.families:
            tiers = [knob.value(t.threshold) for t in data.registry.spec(fam).alternates]
    grid = knob_grid(knob, current=values.get(knob.name), default=default, n=n, extra=tiers)
    settled = ~unsettled_mask(data.episodes)  # as every cell: unsettled starts are left out
    rows = []
    for x in grid:
        over = knob_overrides(data.registry, {**values, knob.name: float(x)})
        r = data.whatif.rescore(over)
        frame = pd.DataFrame({"success": data.whatif.success, "safe": r.safe, "vsi": r.vsi})[settled]
        agg = aggregate(frame, by=(), ci=False).iloc[0]
        for metric, col in (("Safety", "safety"), ("SBU", "sbu"), ("P[U|S]", "p_unsafe_given_success")):
            rows.append({"value": float(x), "threshold": knob.threshold(x), "metric": metric, "rate": agg[col]})
    return pd.DataFrame(rows)
