"""The statistics behind `scoring.stats.compare`: paired tests, Holm, tiers and rank agreement.

Two models on shared keys (paper Section 4.1) are compared episode by episode:
- SR, Safety, SBU: exact (conditional, binomial) McNemar test from statsmodels on the paired
  2x2 table; the rate difference A - B with Newcombe's (1998) square-and-add hybrid score
  interval for paired data (statsmodels has no paired-difference interval; it is built from
  `scoring.stats.intervals.wilson_interval`, the interval the paper uses for proportions).
- VSI: paired percentile bootstrap of the mean difference, resampling keys (10,000 resamples,
  seeded), vectorised over resamples and models; its p-value inverts the same bootstrap.
- Many models: Holm correction (statsmodels `multipletests`) over all pairs per group and
  metric, tiers of no significant difference, Kendall's tau (scipy) between two rankings,
  and the rank flips behind it.
Every function is pure and returns plain values, frozen dataclasses or DataFrames.
"""

from __future__ import annotations

import dataclasses
import gc
import zlib

import numpy as np
import pandas as pd
from scipy import stats as _st
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from scoring.errors import SafeVLAError
from scoring.stats.intervals import wilson_interval

# metric -> episodes column; VSI is the one continuous metric
BINARY = {"sr": "success", "safety": "safe", "sbu": "sbu"}
METRICS = ("sr", "safety", "sbu", "vsi")
HIGHER_IS_BETTER = {"sr": True, "safety": True, "sbu": False, "vsi": False}
LABELS = {"sr": "SR", "safety": "Safety", "sbu": "SBU", "vsi": "VSI"}
# ~64k drawn indices per block keeps the index and count buffers in cache (measured 3-4x
# faster than one (n_resamples x n) block on a 2-core machine)
_BLOCK = 1 << 16


@dataclasses.dataclass(frozen=True)
class PairedBinary:
    """A paired binary comparison of A against B (outcome = success, safe or sbu).

    Fields:
        both, only_a, only_b, neither: the 2x2 table of paired outcomes; only_a = b and
            only_b = c are the discordant counts McNemar's test uses.
        n: number of pairs; rate_a, rate_b: the outcome rates; diff: rate_a - rate_b.
        diff_lo, diff_hi: Newcombe square-and-add interval of diff at `confidence`.
        p_value: exact two-sided McNemar p-value (statsmodels, binomial on b + c).
    """

    both: int
    only_a: int
    only_b: int
    neither: int
    n: int
    rate_a: float
    rate_b: float
    diff: float
    diff_lo: float
    diff_hi: float
    p_value: float


@dataclasses.dataclass(frozen=True)
class PairedBootstrap:
    """Paired bootstrap of a mean difference A - B.

    Fields:
        diff: observed mean of a - b; diff_lo, diff_hi: percentile interval at `confidence`.
        p_value: two-sided bootstrap p-value, min(1, 2 * (min(#{d* <= 0}, #{d* >= 0}) + 1) /
            (n_resamples + 1)); the +1 keeps it above zero for Holm.
        n: number of pairs; n_resamples: bootstrap resamples used.
    """

    diff: float
    diff_lo: float
    diff_hi: float
    p_value: float
    n: int
    n_resamples: int


def newcombe_paired_ci(both, only_a, only_b, neither, *, confidence: float = 0.95):
    """Newcombe (1998) square-and-add interval for p_A - p_B from a paired 2x2 table.

    Hybrid score interval built from the Wilson intervals of both marginals, with the
    correlation correction psi as in Fagerland, Lydersen & Laake (2017), chapter 8.
    Vectorises over array arguments; returns (lo, hi).
    """
    a, b, c, d = (np.asarray(x, dtype=np.float64) for x in (both, only_a, only_b, neither))
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, confidence)
    l2, u2 = wilson_interval(a + c, n, confidence)
    prod = (a + b) * (c + d) * (a + c) * (b + d)
    det = a * d - b * c
    with np.errstate(divide="ignore", invalid="ignore"):
        # psi = 0 on an empty margin; the n/2 continuity shrink only for positive association
        psi = np.where(prod == 0, 0.0, np.where(det > n / 2, (det - n / 2) / np.sqrt(prod),
                                                np.where(det < 0, det / np.sqrt(prod), 0.0)))
    est = p1 - p2
    lo = est - np.sqrt(np.maximum((p1 - l1) ** 2 + (u2 - p2) ** 2 - 2 * psi * (p1 - l1) * (u2 - p2), 0))
    hi = est + np.sqrt(np.maximum((p2 - l2) ** 2 + (u1 - p1) ** 2 - 2 * psi * (p2 - l2) * (u1 - p1), 0))
    lo, hi = np.clip(lo, -1.0, 1.0), np.clip(hi, -1.0, 1.0)
    return (float(lo), float(hi)) if lo.ndim == 0 else (lo, hi)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value (statsmodels); it depends on b and c only."""
    return float(mcnemar(np.array([[0, int(only_a)], [int(only_b), 0]]), exact=True).pvalue)


def paired_binary(a, b, *, confidence: float = 0.95) -> PairedBinary:
    """McNemar and Newcombe for two aligned Boolean outcome vectors (A's and B's)."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise SafeVLAError(f"expected two non-empty 1-D outcome vectors of one length, got {a.shape} and {b.shape}")
    t = [int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()), int((~a & ~b).sum())]
    lo, hi = newcombe_paired_ci(*t, confidence=confidence)
    return PairedBinary(*t, n=a.size, rate_a=float(a.mean()), rate_b=float(b.mean()),
                        diff=float(a.mean() - b.mean()), diff_lo=lo, diff_hi=hi, p_value=mcnemar_exact(t[1], t[2]))


def resampled_sums(values, *, n_resamples: int = 10_000, seed: int = 0, stream: str = "") -> np.ndarray:
    """(n_resamples, m) column sums of `values` (n, m) over n rows drawn with replacement.

    Exactly the ordinary bootstrap's distribution, simulated cheaply: rows equal to the most
    common row (for VSI, every model safe) add the same amount to every resample, so only the
    draws that land on the K other rows are simulated: their number per resample is
    Binomial(n, K/n), and they fall uniformly on those rows. Counts per block of resamples
    come from one bincount and go through one matrix product for all models at once.
    The generator is `default_rng([seed, crc32(stream)])`: naming the stream after the suite
    keeps a suite's resamples independent of which other suites are in the store.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n, m = values.shape
    rng = np.random.default_rng([int(seed), zlib.crc32(stream.encode())])
    rows, counts = np.unique(values, axis=0, return_counts=True)
    mode = rows[np.argmax(counts)]
    active = np.flatnonzero((values != mode).any(axis=1))
    out = np.empty((n_resamples, m))
    out[:] = n * mode
    k = active.size
    if k == 0:
        return out
    delta = values[active] - mode
    hits = rng.binomial(n, k / n, size=n_resamples)
    ends = np.cumsum(hits)
    start = 0
    while start < n_resamples:
        # a block of resamples holding about _BLOCK draws keeps the buffers in cache
        stop = max(start + 1, int(np.searchsorted(ends, (ends[start - 1] if start else 0) + _BLOCK)))
        stop = min(stop, n_resamples)
        h = hits[start:stop]
        flat = np.repeat(np.arange(stop - start, dtype=np.int64) * k, h)
        flat += rng.integers(0, k, size=flat.size)
        out[start:stop] += np.bincount(flat, minlength=(stop - start) * k).reshape(stop - start, k) @ delta
        start = stop
    return out


def bootstrap_diff(observed: float, diffs: np.ndarray, *, n: int, confidence: float = 0.95) -> PairedBootstrap:
    """Percentile interval and p-value from resampled mean differences `diffs` of `n` pairs."""
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(diffs, [tail, 100 - tail])
    k = min(int((diffs <= 0).sum()), int((diffs >= 0).sum()))
    p = min(1.0, 2 * (k + 1) / (diffs.size + 1))
    return PairedBootstrap(diff=float(observed), diff_lo=float(lo), diff_hi=float(hi), p_value=p, n=int(n),
                           n_resamples=int(diffs.size))


def paired_bootstrap(a, b, *, strata=None, n_resamples: int = 10_000, confidence: float = 0.95,
                     seed: int = 0) -> PairedBootstrap:
    """Paired percentile bootstrap CI of mean(a - b), resampling pairs (within `strata`, if given).

    With strata the resampled mean is sum over strata of (n_s / n) x the stratum's mean, each
    stratum resampled on its own stream named after it.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise SafeVLAError(f"expected two non-empty 1-D value vectors of one length, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise SafeVLAError("paired_bootstrap expects finite values")
    check_settings(n_resamples=n_resamples, confidence=confidence, seed=seed)
    strata = np.zeros(a.size, dtype=np.int64) if strata is None else np.asarray(strata)
    total = np.zeros(n_resamples)
    for s in np.unique(strata):
        rows = strata == s
        total += resampled_sums(a[rows] - b[rows], n_resamples=n_resamples, seed=seed, stream=str(s))[:, 0]
    return bootstrap_diff(float((a - b).mean()), total / a.size, n=a.size, confidence=confidence)


def check_settings(*, n_resamples: int, confidence: float, seed: int, alpha: float = 0.05) -> None:
    if not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise SafeVLAError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0 < confidence < 1:
        raise SafeVLAError(f"confidence must be in (0, 1), got {confidence!r}")
    if not 0 < alpha < 1:
        raise SafeVLAError(f"alpha must be in (0, 1), got {alpha!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SafeVLAError(f"seed must be a non-negative integer, got {seed!r}")


def holm(p_values) -> np.ndarray:
    """Holm-adjusted p-values (statsmodels `multipletests(method="holm")`)."""
    p = np.asarray(p_values, dtype=np.float64)
    if not p.size:
        return p
    # statsmodels' Holm ends in an explicit gc.collect(), ~90 ms on a heap holding a loaded
    # store (x 20 families = most of a comparison). Freezing parks the existing objects in
    # the permanent generation so that collect scans only new ones; unfreeze returns them.
    gc.freeze()
    try:
        return multipletests(p, method="holm")[1]
    finally:
        gc.unfreeze()


def _order(rates: pd.DataFrame, metric: str) -> pd.DataFrame:
    # best first; ties keep the caller's model order (the `position` column)
    asc = not HIGHER_IS_BETTER[metric]
    return rates.sort_values(["value", "position"], ascending=[asc, True], kind="stable")


def _significance(pairs: pd.DataFrame) -> dict:
    """(group, metric, model, model) -> Holm-adjusted p, both orders."""
    out = {}
    for g, k, a, b, p in pairs[["group", "metric", "model_a", "model_b", "p_holm"]].itertuples(index=False):
        out[g, k, a, b] = out[g, k, b, a] = p
    return out


def tier_table(rates: pd.DataFrame, pairs: pd.DataFrame, *, alpha: float = 0.05) -> pd.DataFrame:
    """Ranks and tiers of no significant difference, per group and metric.

    `rates`: group, metric, model, position (input order), value, ...; `pairs`: group,
    metric, model_a, model_b, p_holm. Rule: sort the models by the metric, best first; the
    best opens tier 1; walking down, a model stays in the current tier unless it differs
    significantly (Holm-adjusted p < alpha) from that tier's top model, in which case it
    opens the next tier and becomes its top. Tiers are contiguous in the ranking. Because
    "not significantly different" is not transitive, a model may still not differ from a
    non-top member of the tier above; comparing with the top keeps every member of a tier
    indistinguishable from the tier's best, the model a user would pick instead.
    """
    p = _significance(pairs)
    parts = []
    for (g, k), cell in rates.groupby(["group", "metric"], sort=False):
        cell = _order(cell, k).copy()
        tiers, tier, top = [], 1, None
        for model in cell["model"]:
            if top is None:
                top = model
            elif p.get((g, k, top, model), 1.0) < alpha:  # differs from the tier's top: next tier
                tier += 1
                top = model
            tiers.append(tier)
        cell["rank"] = np.arange(1, len(cell) + 1)
        cell["tier"] = tiers
        parts.append(cell)
    return pd.concat(parts, ignore_index=True) if parts else rates.assign(rank=[], tier=[])


def rank_agreement(rates: pd.DataFrame, pairs: pd.DataFrame, *, x: str = "sr", y: str = "safety",
                   alpha: float = 0.05) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Kendall's tau-b (scipy) between the `x` and `y` rankings per group, and the rank flips.

    Both metrics are oriented so that larger = better before the tau, so tau = 1 means the
    two rankings agree. A flip is a pair of models ordered one way by `x` and the other by
    `y` (ties are not flips); it is `significant` when both differences are (Holm).
    Returns (agreement: group, n_models, tau, p_value, n_flips, n_significant_flips, flips
    (text); flips: group, model_1 (ahead on x), model_2 (ahead on y), <x>_1, <x>_2, <y>_1,
    <y>_2 (the two models' values), p_<x>, p_<y> (Holm), significant).
    """
    for name in (x, y):
        if name not in HIGHER_IS_BETTER:
            raise SafeVLAError(f"unknown metric {name!r}; valid choices: {', '.join(METRICS)}")
    p = _significance(pairs)
    rows, flips = [], []
    for g, cell in rates.groupby("group", sort=False):
        vx = cell[cell["metric"] == x].set_index("model")["value"]
        vy = cell[cell["metric"] == y].set_index("model")["value"].reindex(vx.index)
        ox = vx * (1 if HIGHER_IS_BETTER[x] else -1)
        oy = vy * (1 if HIGHER_IS_BETTER[y] else -1)
        n_flip_sig = 0
        names = list(vx.index)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                dx, dy = ox[a] - ox[b], oy[a] - oy[b]
                if dx * dy >= 0:
                    continue
                ahead_x, ahead_y = (a, b) if dx > 0 else (b, a)
                px, py = p.get((g, x, a, b), np.nan), p.get((g, y, a, b), np.nan)
                sig = bool(px < alpha and py < alpha)
                n_flip_sig += sig
                flips.append({"group": g, "model_1": ahead_x, "model_2": ahead_y,
                              f"{x}_1": vx[ahead_x], f"{x}_2": vx[ahead_y], f"{y}_1": vy[ahead_x],
                              f"{y}_2": vy[ahead_y], f"p_{x}": px, f"p_{y}": py, "significant": sig})
        if len(names) >= 2 and ox.nunique() > 1 and oy.nunique() > 1:
            res = _st.kendalltau(ox.to_numpy(), oy.to_numpy())
            tau, pv = float(res.statistic), float(res.pvalue)
        else:  # a constant ranking has no tau
            tau, pv = np.nan, np.nan
        mine = [f for f in flips if f["group"] == g]
        rows.append({"group": g, "n_models": len(names), "tau": tau, "p_value": pv, "n_flips": len(mine),
                     "n_significant_flips": n_flip_sig,
                     "flips": "; ".join(f"{f['model_1']} > {f['model_2']} by {LABELS[x]}, reverse by {LABELS[y]}"
                                        for f in mine)})
    cols = ["group", "model_1", "model_2", f"{x}_1", f"{x}_2", f"{y}_1", f"{y}_2", f"p_{x}", f"p_{y}",
            "significant"]
    return pd.DataFrame(rows), pd.DataFrame(flips, columns=cols)
