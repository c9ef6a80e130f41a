"""Paired model comparison: pair episodes on shared keys, test every pair, rank.

Every model sees the same (suite, task, init state, seed) keys (paper Section 4.1), so two
models can be compared episode by episode instead of cell against cell. `compare_models`
runs the whole comparison for two or more models, per suite and overall, and returns a
frozen `Comparison` of DataFrames; `discordant_episodes` lists the keys where two models
disagree, for side-by-side replay. The statistics (exact McNemar, Newcombe interval, paired
bootstrap, Holm, tiers, Kendall's tau) live in `scoring.stats.ranking`. Everything is a pure
function of the run store's `episodes` table, so the CLI (`scoring.cli.compare`) and a
dashboard page share it; docs/compare.md explains the choices.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from scoring.errors import RecordError, SafeVLAError
from scoring.stats.intervals import wilson_interval
from scoring.stats.ranking import (BINARY, METRICS, bootstrap_diff, check_settings, holm, mcnemar_exact,
                                   newcombe_paired_ci, rank_agreement, resampled_sums, tier_table)

KEY_COLUMNS = ("suite", "task_id", "init_state", "seed")
OVERALL = "overall"
BY_CHOICES = ("suite", None)
_REQUIRED = ("episode_id", "model", "task_id", "success", "safe", "sbu", "vsi")


@dataclasses.dataclass(frozen=True)
class Pairing:
    """Episodes of several models aligned on their shared keys.

    Fields:
        models: the compared models, in the caller's order (column j of `index`).
        key_columns: the key columns actually used; a column that is null for every episode
            (e.g. a store without init states) is left out, and `notes` says so.
        keys: one row per key that every model has, sorted; `suite` falls back to `benchmark`.
        index: (len(keys), len(models)) row positions into `episodes`.
        episodes: the selected models' episodes (index reset) that `index` points into.
        unpaired: keys missing for at least one model: key columns, `present`, `missing`
            (comma-separated model names) and the `episode_ids` that exist. Never dropped
            silently: they are excluded from every pair and listed here.
        notes: plain-language remarks on how the pairing was done.
    """

    models: tuple[str, ...]
    key_columns: tuple[str, ...]
    keys: pd.DataFrame
    index: np.ndarray
    episodes: pd.DataFrame
    unpaired: pd.DataFrame
    notes: tuple[str, ...]

    def values(self, column: str) -> np.ndarray:
        """`column` of the paired episodes as a (keys x models) array."""
        return self.episodes[column].to_numpy()[self.index]


def check_models(episodes: pd.DataFrame, models: Iterable[str]) -> tuple[str, ...]:
    """The validated model tuple; unknown names list the models in the store."""
    if isinstance(models, (str, bytes)) or not isinstance(models, Iterable):
        raise SafeVLAError(f"models must be a list of model names, got {models!r}")
    models = tuple(models)
    known = sorted(episodes["model"].dropna().unique()) if "model" in episodes else []
    listing = ", ".join(map(str, known)) or "(none)"
    unknown = [m for m in models if m not in known]
    if unknown:
        raise SafeVLAError(f"unknown model {unknown[0]!r}; models in the store: {listing}")
    if len(set(models)) != len(models):
        raise SafeVLAError(f"each model may be named once, got {', '.join(models)}")
    if len(models) < 2:
        raise SafeVLAError(f"a comparison needs at least two models, got {len(models)}; models in the store: {listing}")
    return models


def pair_episodes(episodes: pd.DataFrame, models: Sequence[str]) -> Pairing:
    """Aligns the episodes of `models` on (suite, task_id, init_state, seed).

    A key column that is null for every selected episode is left out of the key (noted);
    one null in only some episodes is kept as its own key value (noted). Two episodes of
    one model on the same key are a RecordError naming the key and both episode ids.
    """
    missing = [c for c in _REQUIRED if c not in episodes.columns]
    if missing:
        raise RecordError(f"episodes table lacks column(s) {', '.join(missing)}; expected a run store's "
                          f"episodes.parquet", field=missing[0])
    models = check_models(episodes, models)
    frame = episodes[episodes["model"].isin(models)].reset_index(drop=True)
    suite = frame["suite"] if "suite" in frame else pd.Series(None, index=frame.index, dtype=object)
    if "benchmark" in frame:
        suite = suite.fillna(frame["benchmark"])
    frame = frame.assign(suite=suite)
    for col in ("suite", "task_id", *_REQUIRED[3:]):
        bad = frame[col].isna().to_numpy()
        if bad.any():
            raise RecordError(f"null {col} in {int(bad.sum())} episode(s); expected a value for every episode",
                              episode=str(frame["episode_id"].iloc[int(np.argmax(bad))]), field=col)
    notes, used = [], []
    for col in KEY_COLUMNS:
        nulls = int(frame[col].isna().sum()) if col in frame else len(frame)
        if nulls == len(frame):
            notes.append(f"{col} is missing for every episode, so it is not part of the pairing key")
            continue
        used.append(col)
        if nulls:
            notes.append(f"{col} is null in {nulls} of {len(frame)} episodes; null is paired with null")
    kid = frame.groupby(used, sort=True, dropna=False).ngroup().to_numpy()
    n_keys, m = int(kid.max()) + 1, len(models)
    mcode = frame["model"].map({name: j for j, name in enumerate(models)}).to_numpy(np.int64)
    slot = kid * m + mcode
    order = np.argsort(slot, kind="stable")
    dup = np.flatnonzero(slot[order][1:] == slot[order][:-1])
    if dup.size:
        first = slot[order][dup[0]]
        rows = np.flatnonzero(slot == first)
        key = ", ".join(f"{c}={frame[c].iloc[rows[0]]!r}" for c in used)
        n_dup = np.unique(slot[order][dup]).size
        raise RecordError(f"model {models[first % m]!r} has {rows.size} episodes on key ({key}): "
                          f"{', '.join(frame['episode_id'].iloc[rows].astype(str))}; expected at most one per "
                          f"({', '.join(used)}) key ({n_dup} duplicated key(s) in all)", field="key")
    index = np.full((n_keys, m), -1, dtype=np.int64)
    index[kid, mcode] = np.arange(len(frame))
    _, first_row = np.unique(kid, return_index=True)  # ngroup numbers keys 0..n_keys-1
    all_keys = frame[used].iloc[first_row].reset_index(drop=True)
    complete = (index >= 0).all(axis=1)
    unpaired = all_keys[~complete].reset_index(drop=True)
    if len(unpaired):
        have = index[~complete] >= 0
        names = np.array(models, dtype=object)
        ids = frame["episode_id"].astype(str).to_numpy()
        unpaired["present"] = [", ".join(names[h]) for h in have]
        unpaired["missing"] = [", ".join(names[~h]) for h in have]
        unpaired["episode_ids"] = [", ".join(ids[r[r >= 0]]) for r in index[~complete]]
        notes.append(f"{len(unpaired)} key(s) are not shared by every model and are left out of every pair "
                     f"(listed in `unpaired`)")
    else:
        unpaired = unpaired.assign(present=pd.Series(dtype=object), missing=pd.Series(dtype=object),
                                   episode_ids=pd.Series(dtype=object))
    if not complete.any():
        raise SafeVLAError(f"no ({', '.join(used)}) key is shared by all of {', '.join(models)}; "
                           f"{len(unpaired)} unpaired key(s); were they run on the same init states and seeds?")
    return Pairing(models=models, key_columns=tuple(used), keys=all_keys[complete].reset_index(drop=True),
                   index=index[complete], episodes=frame, unpaired=unpaired, notes=tuple(notes))


def discordant_episodes(source: Pairing | pd.DataFrame, model_a: str, model_b: str, *,
                        metric: str = "safety") -> pd.DataFrame:
    """Keys where A and B disagree on `metric` (default: A safe and B unsafe, or the reverse).

    One row per key: the key columns, `which` ("<A> only" / "<B> only": the model with the
    outcome), and for each side the episode id, success, safe, vsi, worst_spec and
    violating_step (suffixes `_a`, `_b`), so a page can replay both side by side.
    `source` is a Pairing (e.g. `Comparison.pairing`) or an episodes table.
    """
    if metric not in BINARY:
        raise SafeVLAError(f"unknown metric {metric!r}; valid choices: {', '.join(BINARY)}")
    pairing = source if isinstance(source, Pairing) else pair_episodes(source, [model_a, model_b])
    cols = []
    for name in (model_a, model_b):
        if name not in pairing.models:
            raise SafeVLAError(f"unknown model {name!r}; models in this comparison: {', '.join(pairing.models)}")
        cols.append(pairing.models.index(name))
    out = pairing.values(BINARY[metric])[:, cols].astype(bool)
    rows = np.flatnonzero(out[:, 0] != out[:, 1])
    table = pairing.keys.iloc[rows].reset_index(drop=True)
    table.insert(len(table.columns), "which", np.where(out[rows, 0], f"{model_a} only", f"{model_b} only"))
    fields = [f for f in ("episode_id", "success", "safe", "vsi", "worst_spec", "violating_step")
              if f in pairing.episodes]
    for suffix, j in (("a", cols[0]), ("b", cols[1])):
        for f in fields:
            table[f"{f}_{suffix}"] = pairing.episodes[f].to_numpy()[pairing.index[rows, j]]
    return table


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Result of `compare_models`. Proportions are fractions in [0, 1]; groups are
    "overall" (keys pooled across suites) then each suite when `by="suite"`.

    Fields:
        models, by, alpha, confidence, n_resamples, seed, stratified: the settings used.
        groups: group names in output order.
        pairing: the aligned episodes (keys, per-model rows, unpaired keys) behind every table.
        notes: how keys were paired, what was left out, how the bootstrap was stratified.
        rates: group, metric, model, position, n, value, lo, hi: each model's SR, Safety,
            SBU (Wilson interval) and VSI (bootstrap interval) on the paired keys.
        pairs: group, metric, model_a, model_b, n, both, only_a (b), only_b (c), neither
            (<NA> for VSI), value_a, value_b, diff (A - B), diff_lo, diff_hi, ci, test,
            p_value, p_holm (Holm over the group's pairs for that metric), significant.
        ranking: `rates` with rank (1 = best) and tier (see `scoring.stats.ranking.tier_table`).
        agreement, flips: Kendall's tau between the SR and Safety rankings per group, and
            the pairs of models the two rankings order differently.
        unpaired: `pairing.unpaired`, keys missing for at least one model.
    """

    models: tuple[str, ...]
    by: str | None
    alpha: float
    confidence: float
    n_resamples: int
    seed: int
    stratified: bool
    groups: tuple[str, ...]
    pairing: Pairing
    notes: tuple[str, ...]
    rates: pd.DataFrame
    pairs: pd.DataFrame
    ranking: pd.DataFrame
    agreement: pd.DataFrame
    flips: pd.DataFrame

    @property
    def unpaired(self) -> pd.DataFrame:
        return self.pairing.unpaired


def compare_models(episodes: pd.DataFrame, models: Sequence[str], *, by: str | None = "suite",
                   alpha: float = 0.05, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0,
                   stratified: bool = True) -> Comparison:
    """Paired comparison of `models` on the keys they all share, overall and per suite.

    For every pair: exact McNemar p and Newcombe interval of the SR, Safety and SBU
    differences; paired bootstrap interval and p of the VSI difference. Holm over pairs per
    group and metric; tiers; Kendall's tau of SR against Safety with the rank flips.
    `stratified` resamples the pooled group within suites (the benchmark fixes episodes per
    suite); per-suite groups reuse those very resamples, so the whole run costs one
    bootstrap pass over the keys.
    """
    if by not in BY_CHOICES:
        raise SafeVLAError(f"unknown grouping by={by!r}; valid choices: {', '.join(map(repr, BY_CHOICES))}")
    check_settings(n_resamples=n_resamples, confidence=confidence, seed=seed, alpha=alpha)
    pairing = pair_episodes(episodes, models)
    models, m = pairing.models, len(pairing.models)
    vsi = pairing.values("vsi").astype(np.float64)
    if not np.isfinite(vsi).all():
        row = pairing.index[~np.isfinite(vsi)][0]
        raise RecordError("non-finite vsi; expected a number in [0, 1]", field="vsi",
                          episode=str(pairing.episodes["episode_id"].iloc[row]))
    outcome = {k: pairing.values(col).astype(bool) for k, col in BINARY.items()}
    suite = pairing.keys["suite"].astype(str).to_numpy()
    suites = sorted(set(suite))
    sums = {}
    if stratified or by == "suite":
        for s in suites:
            sums[s] = resampled_sums(vsi[suite == s], n_resamples=n_resamples, seed=seed, stream=s)
    groups = [(OVERALL, np.ones(len(suite), bool),
               sum(sums.values()) / len(suite) if stratified else
               resampled_sums(vsi, n_resamples=n_resamples, seed=seed, stream=OVERALL) / len(suite))]
    if by == "suite":
        groups += [(s, suite == s, sums[s] / int((suite == s).sum())) for s in suites]
    pair_idx = list(itertools.combinations(range(m), 2))
    ia, ib = (np.array([p[k] for p in pair_idx], dtype=np.int64) for k in (0, 1))
    rates, pairs = [], []
    for name, rows, means in groups:
        n = int(rows.sum())
        base = {"group": name, "n": n}
        for metric, x in outcome.items():
            xi = x[rows].astype(np.int64)
            k, both = xi.sum(axis=0), xi.T @ xi
            lo, hi = wilson_interval(k, np.full(m, n), confidence)
            rates += [{**base, "metric": metric, "model": models[j], "position": j, "value": k[j] / n,
                       "lo": lo[j], "hi": hi[j]} for j in range(m)]
            bb = both[ia, ib]
            oa, ob = k[ia] - bb, k[ib] - bb
            nn = n - bb - oa - ob
            dlo, dhi = newcombe_paired_ci(bb, oa, ob, nn, confidence=confidence)
            pairs += [{**base, "metric": metric, "model_a": models[i], "model_b": models[j], "both": bb[q],
                       "only_a": oa[q], "only_b": ob[q], "neither": nn[q], "value_a": k[i] / n,
                       "value_b": k[j] / n, "diff": (oa[q] - ob[q]) / n, "diff_lo": dlo[q], "diff_hi": dhi[q],
                       "ci": "Newcombe square-and-add", "test": "exact McNemar",
                       "p_value": mcnemar_exact(oa[q], ob[q])} for q, (i, j) in enumerate(pair_idx)]
        mean = vsi[rows].mean(axis=0)
        tail = 100 * (1 - confidence) / 2
        lo, hi = np.percentile(means, [tail, 100 - tail], axis=0)
        rates += [{**base, "metric": "vsi", "model": models[j], "position": j, "value": mean[j], "lo": lo[j],
                   "hi": hi[j]} for j in range(m)]
        for i, j in pair_idx:
            res = bootstrap_diff(mean[i] - mean[j], means[:, i] - means[:, j], n=n, confidence=confidence)
            pairs.append({**base, "metric": "vsi", "model_a": models[i], "model_b": models[j],
                          "value_a": mean[i], "value_b": mean[j], "diff": res.diff, "diff_lo": res.diff_lo,
                          "diff_hi": res.diff_hi, "ci": "paired percentile bootstrap",
                          "test": "paired bootstrap", "p_value": res.p_value})
    rates = pd.DataFrame(rates)[["group", "metric", "model", "position", "n", "value", "lo", "hi"]]
    pairs = pd.DataFrame(pairs)
    for col in ("both", "only_a", "only_b", "neither"):
        pairs[col] = pairs[col].astype("Int64")
    pairs["p_holm"] = pairs.groupby(["group", "metric"], sort=False)["p_value"].transform(holm)
    pairs["significant"] = pairs["p_holm"] < alpha
    pairs = pairs[["group", "metric", "model_a", "model_b", "n", "both", "only_a", "only_b", "neither", "value_a",
                   "value_b", "diff", "diff_lo", "diff_hi", "ci", "test", "p_value", "p_holm", "significant"]]
    order = {k: i for i, k in enumerate(METRICS)}
    rates = rates.sort_values(["metric"], key=lambda c: c.map(order), kind="stable").reset_index(drop=True)
    agreement, flips = rank_agreement(rates, pairs, x="sr", y="safety", alpha=alpha)
    notes = list(pairing.notes)
    if stratified and len(suites) > 1:
        notes.append(f"overall VSI intervals resample keys within each of the {len(suites)} suites "
                     f"(stratified bootstrap)")
    return Comparison(models=models, by=by, alpha=alpha, confidence=confidence, n_resamples=n_resamples,
                      seed=seed, stratified=stratified, groups=tuple(g[0] for g in groups), pairing=pairing,
                      notes=tuple(notes), rates=rates, pairs=pairs, ranking=tier_table(rates, pairs, alpha=alpha),
                      agreement=agreement, flips=flips)
