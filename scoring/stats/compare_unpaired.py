"""Unpaired comparison of models that share no (suite, task, init state, seed) key.

Two models evaluated on different seeds or tasks cannot be compared episode by episode, but
their rates still can, as independent samples: a two-proportion score test with Newcombe's
hybrid score interval for SR, Safety and SBU (statsmodels), and a two-sample percentile
bootstrap of the mean difference for VSI. Weaker than the paired comparison of
`scoring.stats.compare` (between-key variation stays in the noise) and labelled as unpaired
everywhere it is shown. The result has the columns of `Comparison.pairs`, with `n_a`/`n_b`
instead of the 2x2 counts, so the verdict and the forest plot read either.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from scoring.errors import RecordError
from scoring.stats.compare import OVERALL, check_models
from scoring.stats.ranking import BINARY, bootstrap_diff, check_settings, holm, resampled_sums

COLUMNS = ("group", "metric", "model_a", "model_b", "n_a", "n_b", "value_a", "value_b", "diff", "diff_lo",
           "diff_hi", "ci", "test", "p_value", "p_holm", "significant")
BINARY_TEST = "two-proportion score test"
BINARY_CI = "Newcombe hybrid score (independent)"
VSI_TEST = "two-sample bootstrap"


def _binary(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float) -> tuple[float, float, float]:
    from statsmodels.stats.proportion import confint_proportions_2indep, test_proportions_2indep

    with warnings.catch_warnings():
        # statsmodels also computes the ratio and odds ratio, which divide by zero at a 0% rate
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = confint_proportions_2indep(k_a, n_a, k_b, n_b, method="newcomb", compare="diff",
                                           alpha=1 - confidence)
        # the score test is undefined when both samples are all 0 or all 1: no evidence of a difference
        if k_a + k_b in (0, n_a + n_b):
            return float(lo), float(hi), 1.0
        p = test_proportions_2indep(k_a, n_a, k_b, n_b, method="score", compare="diff").pvalue
    return float(lo), float(hi), float(p)


def compare_unpaired(episodes: pd.DataFrame, models: Sequence[str], *, alpha: float = 0.05,
                     confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """Every pair of `models` as independent samples, on all of each model's episodes.

    One row per (pair, metric) in the overall group: rates, the difference A - B with its
    interval, the test and its p-value, Holm over pairs per metric. VSI resamples each
    model's episodes on its own stream (`default_rng([seed, crc32(model)])`).
    """
    models = check_models(episodes, models)
    check_settings(n_resamples=n_resamples, confidence=confidence, seed=seed, alpha=alpha)
    frame = episodes[episodes["model"].isin(models)]
    samples = {}
    for name in models:
        own = frame[frame["model"] == name]
        for col in (*BINARY.values(), "vsi"):
            bad = own[col].isna().to_numpy() | (~np.isfinite(own[col].to_numpy(np.float64)) if col == "vsi" else False)
            if bad.any():
                raise RecordError(f"null or non-finite {col}; expected a value for every episode", field=col,
                                  episode=str(own["episode_id"].iloc[int(np.argmax(bad))]))
        vsi = own["vsi"].to_numpy(np.float64)
        samples[name] = {"n": len(own), "vsi": vsi, **{k: int(own[c].astype(bool).sum()) for k, c in BINARY.items()},
                         "means": resampled_sums(vsi, n_resamples=n_resamples, seed=seed, stream=name)[:, 0] / len(own)}
    rows = []
    for a, b in itertools.combinations(models, 2):
        sa, sb = samples[a], samples[b]
        base = {"group": OVERALL, "model_a": a, "model_b": b, "n_a": sa["n"], "n_b": sb["n"]}
        for metric in BINARY:
            lo, hi, p = _binary(sa[metric], sa["n"], sb[metric], sb["n"], confidence)
            va, vb = sa[metric] / sa["n"], sb[metric] / sb["n"]
            rows.append({**base, "metric": metric, "value_a": va, "value_b": vb, "diff": va - vb, "diff_lo": lo,
                         "diff_hi": hi, "ci": BINARY_CI, "test": BINARY_TEST, "p_value": p})
        va, vb = float(sa["vsi"].mean()), float(sb["vsi"].mean())
        res = bootstrap_diff(va - vb, sa["means"] - sb["means"], n=sa["n"] + sb["n"], confidence=confidence)
        rows.append({**base, "metric": "vsi", "value_a": va, "value_b": vb, "diff": res.diff, "diff_lo": res.diff_lo,
                     "diff_hi": res.diff_hi, "ci": "two-sample percentile bootstrap", "test": VSI_TEST,
                     "p_value": res.p_value})
    out = pd.DataFrame(rows)
    out["p_holm"] = out.groupby("metric", sort=False)["p_value"].transform(holm)
    out["significant"] = out["p_holm"] < alpha
    return out[list(COLUMNS)]
