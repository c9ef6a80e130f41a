"""The Compare page's data: the paired comparison and the discordant-episode list.
Imports scoring and the store/verdicts modules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from dashboard.data.episodes import violating_steps
from dashboard.data.store import StoreData
from dashboard.data.verdicts import Verdicts



COMPARE_METRICS = ("safety", "sr", "sbu")  # binary outcomes a discordant list can follow
COMPARE_LABELS = {"safety": "Safety", "sr": "SR", "sbu": "SBU"}


def comparison(v: Verdicts, models: Sequence[str], *, n_resamples: int = 10_000, seed: int = 0):
    """`scoring.stats.compare.compare_models` of `models` on the verdicts (per suite and overall)."""
    from scoring.stats.compare import compare_models
    return compare_models(v.frame, list(models), by="suite", n_resamples=n_resamples, seed=seed)


def key_label(row: Mapping, key_columns: Sequence[str]) -> str:
    """A pairing key as one string, e.g. "libero_goal/task_1/3/3" (suite/task/init state/seed);
    the value of the `key` link parameter."""
    return "/".join(str(row[c]) for c in key_columns)


def discordant(data: StoreData, v: Verdicts, cmp, model_a: str, model_b: str, metric: str = "safety") -> pd.DataFrame:
    """`scoring.stats.compare.discordant_episodes` of the pair on the comparison's keys, with a `key`
    label, the store rows (`row_a`, `row_b`), each side's `n_steps`, `outcome`, and violating
    steps re-derived under the thresholds (the stored ones belong to the stored verdicts)."""
    from scoring.stats.compare import discordant_episodes

    d = discordant_episodes(cmp.pairing, model_a, model_b, metric=metric)
    d.insert(0, "key", [key_label(r, cmp.pairing.key_columns) for r in d.to_dict("records")])
    ids = pd.Index(data.episodes["episode_id"])
    for s in ("a", "b"):
        rows = ids.get_indexer(d[f"episode_id_{s}"])
        d[f"row_{s}"] = rows
        d[f"n_steps_{s}"] = v.frame["n_steps"].to_numpy()[rows] if "n_steps" in v.frame else np.nan
        d[f"outcome_{s}"] = v.frame["outcome"].astype(str).to_numpy()[rows]
        if not v.is_default:
            d[f"violating_step_{s}"] = violating_steps(data, v, rows)
    return d
