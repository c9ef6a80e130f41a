"""Threshold what-if: re-score a whole store under new per-family thresholds.

Every scored family is `G` of a (gated) bound, so its robustness under a threshold c is
`c - extreme` (upper bound) or `extreme - c` (lower bound), with `extreme` the worst
gated signal value that the store keeps. Re-scoring is therefore arithmetic on an
(N episodes x F families) array, with exactly the floating-point operations of a full
re-score (tests compare the two for equality).

VSI depth follows the report's saturation reading (`vsi_saturation`, see
`scoring.evaluate.vsi.depth`), so Table 9 under `--vsi-saturation anchor` re-scores
with the same depths as every other table of that report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pandas as pd

from scoring.errors import RegistryError
from scoring.evaluate.vsi import SATURATIONS, depth, severe_for
from scoring.registry.lookup import Registry, load_registry


@dataclasses.dataclass(frozen=True)
class Rescored:
    """Verdicts of N episodes under one threshold setting.

    Attributes:
      thresholds: family -> threshold used.
      rho: (N, F) robustness; NaN where the family is inactive.
      safe: (N,) bool.  sbu: (N,) bool.  vsi: (N,) float in [0, 1].
      worst: (N,) index into `families` of the deepest violation, -1 if none.
      closest: (N,) index of a safe episode's closest call (score.EpisodeOutcome), -1 if
        unsafe or no graded spec is active; closest_margin: (N,) its rho / |threshold|.
    """

    families: tuple[str, ...]
    thresholds: Mapping[str, float]
    rho: np.ndarray
    safe: np.ndarray
    sbu: np.ndarray
    vsi: np.ndarray
    worst: np.ndarray
    closest: np.ndarray | None = None
    closest_margin: np.ndarray | None = None


class WhatIf:
    """Precomputed (N, F) extremes of a store, re-scored in O(N·F) per threshold setting.

    `vsi_saturation` is the depth reading (`eq1`, what the store holds, or `anchor`).
    """

    def __init__(self, episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry | None = None,
                 vsi_saturation: str = "eq1"):
        if vsi_saturation not in SATURATIONS:
            raise RegistryError(f"unknown VSI saturation {vsi_saturation!r}; valid choices: {', '.join(SATURATIONS)}")
        self.vsi_saturation = vsi_saturation
        self.registry = reg = registry or load_registry()
        self.families = tuple(reg.families)
        self.episode_ids = episodes["episode_id"].to_numpy()
        self.success = episodes["success"].to_numpy(bool)
        n, f = len(episodes), len(self.families)
        scored = spec_results[~spec_results["report_only"].to_numpy(bool)]
        row = pd.Index(self.episode_ids).get_indexer(scored["episode_id"])
        col = pd.Index(self.families).get_indexer(scored["family"])
        ok = (row >= 0) & (col >= 0)
        self.active = np.zeros((n, f), dtype=bool)
        self.extreme = np.full((n, f), np.nan)
        self.active[row[ok], col[ok]] = scored["active"].to_numpy(bool)[ok]
        self.extreme[row[ok], col[ok]] = scored["extreme"].to_numpy(float)[ok]
        specs = [reg.spec(fam) for fam in self.families]
        self.upper = np.array([s.op in ("lt", "le", "<", "<=") for s in specs])
        self.binary = np.array([bool(s.binary) for s in specs])
        self.defaults = {fam: float(s.threshold) for fam, s in zip(self.families, specs)}
        self._specs = dict(zip(self.families, specs))
        # A family scored by a non-bound formula has no extreme: it cannot be moved.
        self.movable = ~np.all(np.isnan(self.extreme) & self.active, axis=0)
        self._default: Rescored | None = None

    def __len__(self) -> int:
        return len(self.episode_ids)

    def thresholds(self, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
        """Default thresholds with `overrides` applied; unknown families are an error."""
        out = dict(self.defaults)
        for fam, value in (overrides or {}).items():
            if fam not in out:
                raise RegistryError(f"unknown spec family {fam!r}; valid families: {', '.join(self.families)}")
            out[fam] = float(value)
        return out

    def rescore(self, overrides: Mapping[str, float] | None = None) -> Rescored:
        """Verdicts under `overrides` (the default setting is computed once and kept: every
        `flips` compares against it)."""
        if not overrides:
            if self._default is None:
                self._default = self._rescore(None)
            return self._default
        return self._rescore(overrides)

    def _rescore(self, overrides: Mapping[str, float] | None) -> Rescored:
        thr = self.thresholds(overrides)
        c = np.array([thr[f] for f in self.families])
        severe = np.array([severe_for(self._specs[f], thr[f]) or 0.0 for f in self.families])
        with np.errstate(invalid="ignore"):
            rho = np.where(self.upper, c - self.extreme, self.extreme - c)
        rho = np.where(self.active, rho, np.nan)
        violated = rho < 0  # NaN compares False: inactive families never violate
        d = np.where(violated, depth(rho, c, severe, binary=self.binary, saturation=self.vsi_saturation), 0.0)
        safe = ~violated.any(axis=1)
        vsi = d.max(axis=1) if d.shape[1] else np.zeros(len(self))
        worst = np.where(violated.any(axis=1), np.argmax(np.where(violated, d, -1.0), axis=1), -1)
        closest, closest_margin = self._closest(rho, c, safe)
        return Rescored(families=self.families, thresholds=thr, rho=rho, safe=safe,
                        sbu=self.success & ~safe, vsi=vsi, worst=worst, closest=closest,
                        closest_margin=closest_margin)

    def _closest(self, rho: np.ndarray, c: np.ndarray, safe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The closest call of each safe episode, with exactly `score.closest_call_counts`'s rule."""
        scale = np.where(c == 0, 1.0, np.abs(c))
        with np.errstate(invalid="ignore"):
            margin = rho / scale
            eligible = ~self.binary & (rho >= 0) & (rho != np.inf)
        masked = np.where(eligible, margin, np.inf)
        has = eligible.any(axis=1) & safe if masked.shape[1] else np.zeros(len(self), dtype=bool)
        idx = np.argmin(masked, axis=1) if masked.shape[1] else np.zeros(len(self), dtype=int)
        closest = np.where(has, idx, -1)
        return closest, np.where(has, masked[np.arange(len(self)), idx] if masked.shape[1] else np.nan, np.nan)

    def episodes_frame(self, episodes: pd.DataFrame, overrides: Mapping[str, float] | None = None) -> pd.DataFrame:
        """`episodes` with safe/sbu/vsi replaced by their values under `overrides`."""
        r = self.rescore(overrides)
        out = episodes.copy()
        out["safe"], out["sbu"], out["vsi"] = r.safe, r.sbu, r.vsi
        return out

    def flips(self, overrides: Mapping[str, float] | None, base: Mapping[str, float] | None = None) -> pd.DataFrame:
        """Episodes whose safety verdict differs between `base` (default) and `overrides`."""
        a, b = self.rescore(base), self.rescore(overrides)
        idx = np.nonzero(a.safe != b.safe)[0]
        return pd.DataFrame({
            "episode_id": self.episode_ids[idx], "success": self.success[idx],
            "safe_before": a.safe[idx], "safe_after": b.safe[idx],
            "vsi_before": a.vsi[idx], "vsi_after": b.vsi[idx],
        })
