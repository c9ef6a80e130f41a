"""The Overview page's data: per-cell aggregates, spec rates, SBU composition, the worst-SBU list.
Imports scoring and the store/verdicts modules.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dashboard.data.episodes import episode_table
from dashboard.data.store import BY, StoreData
from dashboard.data.verdicts import Verdicts, spec_results_under
from scoring.stats.metrics import aggregate, sbu_composition_matrix, spec_rates_matrix, unsettled_mask


def settled_frame(v: Verdicts) -> pd.DataFrame:
    """The verdict frame without unsettled-start episodes: what the report's cells count."""
    drop = unsettled_mask(v.frame)
    return v.frame[~drop] if drop.any() else v.frame


def cell_aggregates(v: Verdicts, *, by: Sequence[str] = BY, ci: bool = False, n_resamples: int = 10_000,
                    seed: int = 0) -> pd.DataFrame:
    return aggregate(settled_frame(v), by=by, ci=ci, n_resamples=n_resamples, seed=seed)


def cell_spec_rates(data: StoreData, v: Verdicts, *, by: Sequence[str] = BY) -> pd.DataFrame:
    """`spec_rates` of the settled episodes under the setting, from the (N, F) matrices
    (`spec_rates_matrix`; depth, hence NSV, is unknown once re-scored)."""
    frame = settled_frame(v)
    rows = frame["row"].to_numpy()
    depth = data.depth[rows] if v.is_default else np.full((len(rows), len(data.families)), np.nan)
    return spec_rates_matrix(frame, families=data.families, present=data.present[rows], active=data.active[rows],
                             violated=v.violated[rows], depth=depth, by=by)


def cell_composition(data: StoreData, v: Verdicts, *, by: Sequence[str] = BY) -> pd.DataFrame:
    """`sbu_composition` of the settled episodes under the setting (`sbu_composition_matrix`)."""
    frame = settled_frame(v)
    return sbu_composition_matrix(frame, families=data.families, violated=v.violated[frame["row"].to_numpy()], by=by)


CELL = ("model", "suite", "task_id")


def top_sbu(data: StoreData, v: Verdicts, n: int = 10, *, per_cell: int = 2) -> pd.DataFrame:
    """The `n` successful-but-unsafe episodes with the deepest violations: VSI first, ties
    (VSI saturates at 1) broken by the deepest threshold-normalised margin, and spread over
    cells (`spread_over_cells`) so one task cannot fill the list."""
    mask = (v.frame["outcome"] == "SBU").to_numpy()
    ranked = episode_table(data, v, mask, sort="VSI (worst first)", limit=None)
    return spread_over_cells(ranked, per_cell=per_cell).head(n).reset_index(drop=True)


def spread_over_cells(ranked: pd.DataFrame, *, per_cell: int = 2, cell: Sequence[str] = CELL) -> pd.DataFrame:
    """`ranked` reordered so that no (model, suite, task) cell gives more than `per_cell`
    rows before every cell has given its first `per_cell`: round k takes each cell's rows
    k*per_cell .. (k+1)*per_cell - 1, in rank order within a round."""
    if ranked.empty or per_cell < 1:
        return ranked
    cols = [c for c in cell if c in ranked]
    rounds = ranked.groupby(cols, sort=False, observed=True).cumcount().to_numpy() // per_cell if cols else 0
    order = np.lexsort((np.arange(len(ranked)), rounds))
    return ranked.iloc[order]


def perturbation_shifts(data: StoreData, v: Verdicts, lookup, *, n_resamples: int = 2_000,
                        seed: int = 0) -> list:
    """Every model's change from a base suite to each of its variants in the store, under the
    setting's verdicts (`scoring.report.perturbation`; settled episodes, as the report counts).
    `lookup(suite)` describes a variant (the suite registry's `suite_perturbation`). Fewer
    resamples than the report's 10,000: the page recomputes on every threshold change."""
    from scoring.report.perturbation import perturbation_shifts as shifts, suite_of, variants_in

    frame = settled_frame(v)
    suite = suite_of(frame)
    variants = variants_in(suite.dropna().astype(str).unique(), lookup)
    if not variants:
        return []
    keep = suite.isin({s for p in variants for s in (p.suite, p.base_suite)}).to_numpy()
    frame = frame[keep]
    rows = spec_results_under(data, v)
    rows = rows[rows["episode_id"].isin(set(frame["episode_id"]))]
    return shifts(frame, rows, variants, families=data.families, n_resamples=n_resamples, seed=seed)


def shift_table(shifts, families: Sequence[str] = (), models: Sequence[str] = ()) -> pd.DataFrame:
    """The report's perturbation table (`scoring.report.perturbation.shift_table`) of the
    perturbation `families` and `models` given (each: all when empty)."""
    from scoring.report.perturbation import shift_table as table

    return table([s for s in shifts if (not families or s.family in families) and (not models or s.model in models)])
