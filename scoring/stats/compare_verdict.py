"""The answer of a comparison in one sentence: "careful is safer than hasty by
26.7 pp [17.8, 35.3] (exact McNemar, p = 2e-8, 120 paired keys)".

`pair_result` picks one pair's row out of `Comparison.pairs` (or the unpaired table of
`scoring.stats.compare_unpaired`) oriented as A - B, whichever order the table holds the pair in;
`verdict` words it. A difference is called only when it is significant after Holm (the
table's `significant`); otherwise the sentence says there is no significant difference and
still gives the estimate, its interval and p. Proportions are in percentage points.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from scoring.errors import SafeVLAError
from scoring.stats.ranking import HIGHER_IS_BETTER, LABELS

# how the better model is described, per metric
BETTER = {"safety": "safer than", "sr": "more successful than", "sbu": "less often successful-but-unsafe than",
          "vsi": "milder in its violations (lower VSI) than"}


class PairResult(NamedTuple):
    """One metric of one pair, oriented so that `diff` = A - B (proportions as fractions)."""

    metric: str
    model_a: str
    model_b: str
    value_a: float
    value_b: float
    diff: float
    diff_lo: float
    diff_hi: float
    test: str
    p_value: float
    p_holm: float
    significant: bool
    n: str  # "120 paired keys" or "60 vs 58 episodes (unpaired)"


def pair_result(pairs: pd.DataFrame, model_a: str, model_b: str, metric: str, *, group: str = "overall") -> PairResult:
    """The row of `pairs` for (A, B) on `metric` in `group`, flipped to A - B if stored as B - A."""
    rows = pairs[(pairs["group"] == group) & (pairs["metric"] == metric)]
    hit = rows[(rows["model_a"] == model_a) & (rows["model_b"] == model_b)]
    flip = hit.empty
    if flip:
        hit = rows[(rows["model_a"] == model_b) & (rows["model_b"] == model_a)]
    if hit.empty:
        raise SafeVLAError(f"no {metric} comparison of {model_a!r} and {model_b!r} in group {group!r}")
    r = hit.iloc[0]
    if "n_a" in r.index:
        na, nb = (int(r["n_b"]), int(r["n_a"])) if flip else (int(r["n_a"]), int(r["n_b"]))
        n = f"{na} vs {nb} episodes, unpaired"
    else:
        n = f"{int(r['n'])} paired keys"
    va, vb, d, lo, hi = (float(r[c]) for c in ("value_a", "value_b", "diff", "diff_lo", "diff_hi"))
    if flip:
        va, vb, d, lo, hi = vb, va, -d, -hi, -lo
    return PairResult(metric, model_a, model_b, va, vb, d, lo, hi, str(r["test"]), float(r["p_value"]),
                      float(r["p_holm"]), bool(r["significant"]), n)


def format_p(p: float) -> str:
    """p to two significant digits, or one in scientific notation below 0.001 ("2e-8")."""
    if p is None or math.isnan(p):
        return "—"
    if p >= 1e-3:
        return f"{p:.2g}" if p < 0.1 else f"{p:.2f}"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def format_diff(metric: str, value: float) -> str:
    """A difference in the metric's unit: percentage points, or VSI points."""
    return f"{value:.3f}" if metric == "vsi" else f"{100 * value:.1f} pp"


def _interval(metric: str, lo: float, hi: float) -> str:
    return f"[{lo:.3f}, {hi:.3f}]" if metric == "vsi" else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def verdict(res: PairResult) -> str:
    """One sentence: who is better on the metric, by how much, with CI, test, p and sample."""
    p = f"p = {format_p(res.p_value)}" + (f", Holm {format_p(res.p_holm)}" if res.p_holm != res.p_value else "")
    how = f"({res.test}, {p}, {res.n})"
    if not res.significant:
        return (f"No significant {LABELS[res.metric]} difference between {res.model_a} and {res.model_b}: "
                f"A − B = {format_diff(res.metric, res.diff)} {_interval(res.metric, res.diff_lo, res.diff_hi)} "
                f"{how}.")
    a_better = (res.diff > 0) == HIGHER_IS_BETTER[res.metric]
    better, worse = (res.model_a, res.model_b) if a_better else (res.model_b, res.model_a)
    # the gap as the better model's advantage: |diff| with the interval turned the same way
    lo, hi = (res.diff_lo, res.diff_hi) if res.diff > 0 else (-res.diff_hi, -res.diff_lo)
    return (f"{better} is {BETTER[res.metric]} {worse} by {format_diff(res.metric, abs(res.diff))} "
            f"{_interval(res.metric, lo, hi)} {how}.")
