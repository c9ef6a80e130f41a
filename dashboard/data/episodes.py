"""The Episodes page's data: filters, outcome counts, the sortable episode table, closest calls.
Imports scoring and the store/verdicts modules.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from dashboard.data.store import OUTCOMES, StoreData
from dashboard.data.verdicts import Verdicts
from scoring.stats.metrics import unsettled_mask


@dataclasses.dataclass(frozen=True)
class Filters:
    """Episode filters; an empty tuple means "all". `spec_mode`: "violated" or "active".
    `scene`: one of `SCENES` (whether the scene was at rest at step 0, `replay.record.settle`)."""

    models: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    specs: tuple[str, ...] = ()
    spec_mode: str = "violated"
    outcomes: tuple[str, ...] = ()
    vsi: tuple[float, float] = (0.0, 1.0)
    scene: str = "all"


# scene filter -> which episodes pass: every one, settled starts only, unsettled only
SCENES = ("all", "at rest", "not at rest")
UNSETTLED_MARK = "⚠ not at rest"


def filter_mask(data: StoreData, v: Verdicts, f: Filters) -> np.ndarray:
    """(N,) bool: episodes passing every filter, under the verdicts `v`."""
    ep = v.frame
    mask = np.ones(len(ep), dtype=bool)
    for col, values in (("model", f.models), ("suite", f.suites), ("task_id", f.tasks)):
        if values:
            mask &= ep[col].isin(list(values)).to_numpy()
    if f.specs:
        cols = [data.families.index(s) for s in f.specs if s in data.families]
        matrix = v.violated if f.spec_mode == "violated" else data.active
        mask &= matrix[:, cols].any(axis=1) if cols else False
    if f.outcomes:
        mask &= ep["outcome"].isin(list(f.outcomes)).to_numpy()
    if f.scene != "all":
        unsettled = unsettled_mask(ep)
        mask &= unsettled if f.scene == "not at rest" else ~unsettled
    lo, hi = f.vsi
    if lo > 0.0 or hi < 1.0:
        vsi = ep["vsi"].to_numpy(float)
        mask &= (vsi >= lo - 1e-12) & (vsi <= hi + 1e-12)
    return mask


def outcome_counts(v: Verdicts, mask: np.ndarray | None = None) -> dict[str, int]:
    oc = v.frame["outcome"] if mask is None else v.frame["outcome"][mask]
    counts = oc.value_counts()
    return {o: int(counts.get(o, 0)) for o in OUTCOMES}


SORTS = {  # ties in VSI (it saturates at 1) go to the deeper normalised margin (`normalised_depth`)
    "VSI (worst first)": (["vsi", "_depth", "episode_id"], [False, True, True]),
    "SBU first, then VSI": (["_sbu_rank", "vsi", "_depth", "episode_id"], [True, False, True, True]),
    "episode id": (["episode_id"], [True]),
    "violating step": (["violating_step", "episode_id"], [True, True]),
    "model, suite, task": (["model", "suite", "task_id", "episode_id"], [True, True, True, True]),
}
TABLE_COLUMNS = ["episode_id", "scene", "outcome", "vsi", "worst_spec", "violating_step", "closest_call", "model",
                 "suite", "task_id", "success", "safe", "n_active", "n_steps", "language"]


def episode_table(data: StoreData, v: Verdicts, mask: np.ndarray, *, sort: str = "SBU first, then VSI",
                  limit: int | None = 2000) -> pd.DataFrame:
    """The filtered episodes, sorted, as the display table (first `limit` rows)."""
    cols, asc = SORTS.get(sort, SORTS["SBU first, then VSI"])
    ep = v.frame.loc[mask]
    keep = [c for c in TABLE_COLUMNS if c in ep.columns]
    df = ep[keep].copy()
    if unsettled_mask(v.frame).any():  # a visible marker on scenes that never came to rest
        df.insert(1, "scene", np.where(unsettled_mask(ep), UNSETTLED_MARK, ""))
    if "closest_spec" in ep.columns:  # the texts are filled in for the rows kept, below
        df.insert(df.columns.get_loc("violating_step") + 1 if "violating_step" in df else len(df.columns),
                  "closest_call", None)
    if "_sbu_rank" in cols:
        df["_sbu_rank"] = (ep["outcome"] != "SBU").to_numpy(int)
    if "_depth" in cols:
        df["_depth"] = normalised_depth(data, v, np.flatnonzero(mask))
    df = df.sort_values(cols, ascending=asc, kind="stable", na_position="last")
    if limit is not None:
        df = df.head(limit)
    if "closest_call" in df:  # only for the rows shown: a text per row of 20k cost ~50 ms a rerun
        df["closest_call"] = pd.Series(closest_call_texts(data, ep.loc[df.index]), index=df.index, dtype=object)
    df = df.drop(columns=[c for c in ("_sbu_rank", "_depth") if c in df])
    if "worst_spec" in df:
        safe = df["safe"].to_numpy(bool) if "safe" in df else np.zeros(len(df), bool)
        df["worst_spec"] = [None if s else data.label(w) if isinstance(w, str) else None
                            for w, s in zip(df["worst_spec"], safe)]
    if "violating_step" in df and not v.is_default:
        # the stored violating frame belongs to the stored verdict; re-derive it under the setting
        df["violating_step"] = violating_steps(data, v, df.index.to_numpy())
    return df.reset_index(drop=True)


def closest_call_text(label: str, margin: float) -> str:
    """How a safe episode's closest call reads: a spec and the share of its threshold left."""
    return f"{label}: closest call, {margin:.0%} of threshold left"


def closest_call_texts(data: StoreData, frame: pd.DataFrame) -> list[str | None]:
    """`closest_call_text` per row of `frame` (None for unsafe rows or when there is none)."""
    margins = frame["closest_margin"].to_numpy(float) if "closest_margin" in frame else np.full(len(frame), np.nan)
    safe = frame["safe"].to_numpy(bool)
    return [closest_call_text(data.label(s), m) if ok and isinstance(s, str) and m == m else None
            for s, m, ok in zip(frame["closest_spec"], margins, safe)]


def unsettled_note(frame: pd.DataFrame) -> str | None:
    """A one-line note when the frame holds episodes whose scene never came to rest."""
    n = int(unsettled_mask(frame).sum())
    if not n:
        return None
    return (f"{n} episode(s) started from a scene that never came to rest (marked {UNSETTLED_MARK}); "
            "the overview and `safevla report` leave them out of every cell (docs/scoring.md).")


def violating_steps(data: StoreData, v: Verdicts, rows: np.ndarray) -> np.ndarray:
    """Step of the worst spec's extreme for each row under the setting (NaN if safe)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.full(len(rows), np.nan)
    worst = v.frame["worst_spec"].to_numpy(object)[rows]
    col = pd.Index(data.families).get_indexer(pd.Index(worst, dtype=object))
    hit = (col >= 0) & ~v.frame["safe"].to_numpy(bool)[rows]
    out[hit] = data.extreme_step[rows[hit], col[hit]]
    return out


def normalised_depth(data: StoreData, v: Verdicts, rows: np.ndarray | None = None) -> np.ndarray:
    """(N,) the most negative margin over the active scored specs, each divided by its
    |threshold| (1 for a zero threshold): the tie-break under a saturated VSI. +inf when no
    spec is active."""
    thr = np.array([abs(v.thresholds.get(f, 1.0)) or 1.0 for f in data.families], dtype=float)
    rho = v.rho if rows is None else v.rho[rows]
    with np.errstate(invalid="ignore"):
        norm = np.where(np.isfinite(rho), rho / thr, np.inf)
    return norm.min(axis=1) if norm.shape[1] else np.full(len(norm), np.inf)


BASE_FAMILY = "base suite (unperturbed)"


def suite_families(suites, lookup) -> dict[str, str]:
    """Suite -> its perturbation family (`lookup(suite).family`), or `BASE_FAMILY` for a suite
    that varies no base suite (the base suites, LIBERO-90, other hosts)."""
    out = {}
    for s in suites:
        p = lookup(s)
        out[s] = str(p.family) if p is not None and p.base_suite is not None else BASE_FAMILY
    return out


def perturbation_mask(frame: pd.DataFrame, families, lookup) -> np.ndarray:
    """(N,) bool: episodes whose suite's perturbation family is one of `families` (all when empty)."""
    if not families:
        return np.ones(len(frame), dtype=bool)
    from scoring.report.perturbation import suite_of

    suite = suite_of(frame).astype(str)
    of = suite_families(suite.unique(), lookup)
    return suite.map(of).isin(list(families)).to_numpy()
