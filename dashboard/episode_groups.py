"""Grouped counts and rates of the filtered episodes (the Episodes page's "Group by"), and the
CSV of the filtered list. Pure functions of the store and the verdicts, testable without Streamlit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dashboard import data as D

# a task id ("task_3") repeats across suites, so tasks group within their suite
GROUPS = {"none": None, "model": ["model"], "suite": ["suite"], "task": ["suite", "task_id"], "spec": "spec"}


def group_table(data: D.StoreData, v: D.Verdicts, mask: np.ndarray, by: str) -> pd.DataFrame:
    """One row per model / suite / task (episodes, SR, Safety, SBU count and rate, mean VSI), or
    per spec (episodes where it is active, violated, violation rate, SBU among them).
    Rates are fractions of the group's episodes; groups sorted by SBU rate, worst first."""
    col = GROUPS[by]
    frame = v.frame.loc[mask]
    if col == "spec":
        active = data.active[mask]
        violated = v.violated[mask]
        sbu = frame["outcome"].eq("SBU").to_numpy()
        rows = []
        for j, fam in enumerate(data.families):
            n = int(active[:, j].sum())
            if not n:
                continue
            k = int(violated[:, j].sum())
            rows.append({"spec": data.label(fam), "episodes (spec active)": n, "violated": k,
                         "violation rate": k / n, "SBU with this violation": int((violated[:, j] & sbu).sum())})
        out = pd.DataFrame(rows, columns=["spec", "episodes (spec active)", "violated", "violation rate",
                                          "SBU with this violation"])
        return out.sort_values(["violation rate", "spec"], ascending=[False, True], kind="stable").reset_index(drop=True)
    g = frame.assign(_sbu=frame["outcome"].eq("SBU"), _succ=frame["success"].astype(bool),
                     _safe=frame["safe"].astype(bool)).groupby(col, sort=True, observed=True)
    out = pd.DataFrame({
        "episodes": g.size(), "SR": g["_succ"].mean(), "Safety": g["_safe"].mean(), "SBU": g["_sbu"].sum(),
        "SBU rate": g["_sbu"].mean(), "mean VSI": g["vsi"].mean()}).reset_index()
    out["SBU"] = out["SBU"].astype(int)
    out = out.rename(columns={"task_id": "task"})
    keys = list(out.columns[:len(col)])
    return out.sort_values(["SBU rate", *keys], ascending=[False] + [True] * len(keys), kind="stable").reset_index(drop=True)


def episodes_csv(table: pd.DataFrame, columns: Sequence[str] | None = None) -> bytes:
    """The filtered episode list as CSV (UTF-8): `columns` (episode_id always first), empty cells
    for missing values."""
    cols = list(table.columns) if not columns else ["episode_id", *[c for c in columns if c != "episode_id"]]
    return table[[c for c in cols if c in table.columns]].to_csv(index=False).encode()


def worst_sbu(data: D.StoreData, v: D.Verdicts, mask: np.ndarray) -> str | None:
    """The episode the detail page opens when none is chosen: among the filtered SBU episodes the
    highest VSI, ties (VSI saturates at 1) broken by the deepest violation relative to its
    threshold (most negative rho / |threshold| over the episode's violated specs), then by id.
    Without an SBU episode, the same order over the filtered unsafe episodes; None if none."""
    frame = v.frame
    for outcomes in (("SBU",), ("SBU", "unsafe failure")):
        rows = np.flatnonzero(mask & frame["outcome"].isin(outcomes).to_numpy())
        if rows.size:
            break
    else:
        return None
    depth = _relative_depth(data, v, rows)
    order = np.lexsort((frame["episode_id"].to_numpy()[rows].astype(str), depth,
                        -frame["vsi"].to_numpy(float)[rows]))
    return str(frame["episode_id"].iat[rows[order[0]]])


def _relative_depth(data: D.StoreData, v: D.Verdicts, rows: np.ndarray) -> np.ndarray:
    """(len(rows),) the most negative rho / |threshold| over violated specs (0 when none): units
    differ between specs (N, m, degrees), so margins compare as shares of their thresholds."""
    scale = np.array([abs(float(v.thresholds.get(f, 1.0) or 0.0)) or 1.0 for f in data.families])
    rel = np.where(v.violated[rows], v.rho[rows] / scale, 0.0)
    return np.nan_to_num(rel.min(axis=1), nan=0.0)
