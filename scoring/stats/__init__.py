"""What scored episodes add up to: intervals, cell metrics, paired and unpaired model comparison, ranking.

May import: scoring.errors only (pure numpy/pandas/scipy/statsmodels over tables of verdicts).
"""

from scoring.stats.intervals import bootstrap_ci, bootstrap_cis, bootstrap_means, wilson_interval  # contract names

__all__ = ["bootstrap_ci", "bootstrap_cis", "bootstrap_means", "wilson_interval"]
