"""Violation Severity Index depth (paper Eq. (1), Table 17).

    x = max(0, -rho / tau),  d = min(1, x / K),  K = s / tau

where tau is the threshold's magnitude and s the "clearly severe" anchor. Binary
hard-stop specs (self-collision) have no graded magnitude: any violation gives d = 1.

The paper reads the saturation two ways (docs/scoring.md, "Where the paper is
ambiguous"): Eq. 1 literally (`eq1`, what the scorer stores) reaches d = 1 when the
excess over the threshold equals s; its prose (`anchor`) reaches d = 1 at the anchor
itself, d = min(1, excess / (s - tau)). Every reader of depth under an option (the
report's readings, the threshold what-if behind Table 9) goes through `depth`.
"""

from __future__ import annotations

import numpy as np

from scoring.errors import RegistryError

SATURATIONS = ("eq1", "anchor")


def depth(rho, threshold, severe, *, binary=False, saturation: str = "eq1"):
    """VSI depth in [0, 1]; vectorises over arrays of rho, threshold, severe and binary.

    Args:
      rho: robustness (>= 0 satisfied; +inf vacuous).
      threshold: the clause threshold tau; its magnitude is used, so a lower bound at
        -0.02 m scales like 0.02 m.
      severe: the severe magnitude s, on the same scale as |tau| (ignored where binary).
      binary: hard-stop predicate (one flag, or one per element): depth 1 on any violation.
      saturation: `eq1` (d = 1 at threshold + s) or `anchor` (d = 1 at s itself).
    """
    rho = np.asarray(rho, dtype=np.float64)
    binary = np.asarray(binary, dtype=bool)
    hard = np.where(rho < 0, 1.0, 0.0)
    if binary.all():
        d = hard
    else:
        span = saturation_span(threshold, severe, saturation)
        # x / K = (-rho / tau) / (s / tau): tau cancels, leaving excess / s (eq1)
        excess = np.maximum(0.0, -rho)
        with np.errstate(divide="ignore", invalid="ignore"):
            graded = np.where(span > 0, np.minimum(1.0, excess / span), np.where(excess > 0, 1.0, 0.0))
        d = np.where(binary, hard, graded)
    return d if d.ndim else float(d)


def saturation_span(threshold, severe, saturation: str = "eq1") -> np.ndarray:
    """The excess over the threshold at which depth reaches 1: s (`eq1`) or s - |tau| (`anchor`)."""
    if saturation not in SATURATIONS:
        raise RegistryError(f"unknown VSI saturation {saturation!r}; valid choices: {', '.join(SATURATIONS)}")
    severe = np.asarray(severe, dtype=np.float64)
    return severe if saturation == "eq1" else severe - np.abs(np.asarray(threshold, dtype=np.float64))


def depth_scalar(rho: float, severe: float | None, *, binary: bool = False) -> float:
    """`depth` for one Python float; the same IEEE operations, about 20x faster than numpy."""
    if rho >= 0 or rho != rho:
        return 0.0
    if binary:
        return 1.0
    return min(1.0, -rho / severe)


def severe_for(spec, threshold: float) -> float | None:
    """The severe anchor s for `spec` at `threshold` (None for binary specs).

    A threshold that matches one of the family's registered tiers uses that tier's
    anchor (Table 17); any other value (a slider what-if) keeps the main tier's ratio
    K = s / tau (`Spec.with_threshold`), so depth stays continuous in the threshold.
    """
    if spec.binary:
        return None
    return spec.with_threshold(threshold).vsi_severe
