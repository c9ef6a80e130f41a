"""Verdicts: every episode re-scored under the current thresholds (`WhatIf`), with the spec results
they imply.
Imports scoring and dashboard.data.store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pandas as pd

from dashboard.data.store import OUTCOMES, StoreData
from scoring.stats.metrics import outcome_class


@dataclasses.dataclass(eq=False)
class Verdicts:
    """Per-episode verdicts under one threshold setting.

    frame: `episodes` with safe/sbu/vsi/outcome/worst_spec under the setting.
    rho: (N, F) robustness; violated: (N, F) bool; overrides: family -> threshold.
    """

    overrides: dict[str, float]
    thresholds: dict[str, float]
    frame: pd.DataFrame
    rho: np.ndarray
    violated: np.ndarray

    @property
    def is_default(self) -> bool:
        return not self.overrides


def verdicts(data: StoreData, overrides: Mapping[str, float] | None = None) -> Verdicts:
    """The store's verdicts (no overrides) or `WhatIf.rescore(overrides)`'s."""
    overrides = {k: float(v) for k, v in (overrides or {}).items()}
    if not overrides:
        frame = data.episodes
        rho = data.rho
        thresholds = data.whatif.thresholds()
    else:
        r = data.whatif.rescore(overrides)
        frame = data.episodes.copy()
        frame["safe"], frame["sbu"], frame["vsi"] = r.safe, r.sbu, r.vsi
        frame["outcome"] = pd.Categorical(outcome_class(frame), categories=list(OUTCOMES))
        fams = np.array(data.families, dtype=object)
        frame["worst_spec"] = np.where(r.worst >= 0, fams[np.maximum(r.worst, 0)], None)
        frame["closest_spec"] = np.where(r.closest >= 0, fams[np.maximum(r.closest, 0)], None)
        frame["closest_margin"] = r.closest_margin
        rho, thresholds = r.rho, dict(r.thresholds)
    with np.errstate(invalid="ignore"):
        violated = rho < 0
    return Verdicts(overrides=overrides, thresholds=thresholds, frame=frame, rho=rho, violated=violated)


def spec_results_under(data: StoreData, v: Verdicts) -> pd.DataFrame:
    """The scored spec rows with `rho` under the setting (depth dropped when re-scored)."""
    cols = ["episode_id", "family", "report_only", "active", "rho", "depth"]
    sr = data.scored[cols]
    if v.is_default:
        return sr
    sr = sr.copy()
    sr["rho"] = v.rho[data.scored["_row"].to_numpy(), data.scored["_col"].to_numpy()]
    sr["depth"] = np.nan
    return sr
