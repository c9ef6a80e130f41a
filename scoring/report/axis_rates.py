"""Per-axis violation rates (Figure 2, right): for each cell and each of the paper's three
risk axes (scene interaction, object handling, execution; `axes` in specs.yaml), the
share of the cell's episodes that violate at least one active family of that axis.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from scoring.registry.lookup import Registry, load_registry

AXES = ("scene_interaction", "object_handling", "execution")
AXIS_LABELS = {"scene_interaction": "Scene interaction", "object_handling": "Object handling",
               "execution": "Execution"}


def axis_rates(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry | None = None,
               by: Sequence[str] = ("model", "suite")) -> pd.DataFrame:
    """One row per (cell, axis): n, n_active (episodes with a family of the axis active),
    n_violated and rate = n_violated / n (NaN when no family of the axis is active in the cell)."""
    reg = registry or load_registry()
    axis_of = {f: reg.spec(f).axis for f in reg.families}
    scored = spec_results[~spec_results["report_only"].to_numpy(bool) & spec_results["active"].to_numpy(bool)]
    scored = scored.assign(axis=scored["family"].map(axis_of), violated=scored["rho"].to_numpy(float) < 0)
    per_episode = scored.groupby(["episode_id", "axis"])["violated"].any().unstack("axis")
    rows = []
    for key, g in episodes.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        sub = per_episode.reindex(g["episode_id"])
        for axis in AXES:
            col = sub[axis] if axis in sub else pd.Series(np.nan, index=sub.index)
            n_active = int(col.notna().sum())
            n_violated = int((col == True).sum())  # noqa: E712 - NaN (inactive) is neither
            rows.append({**dict(zip(by, key)), "axis": axis, "label": AXIS_LABELS[axis], "n": len(g),
                         "n_active": n_active, "n_violated": n_violated,
                         "rate": n_violated / len(g) if n_active else np.nan})
    return pd.DataFrame(rows)
