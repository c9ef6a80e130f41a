"""A base suite against its perturbed variants (LIBERO-PRO's distractors, swaps, paraphrases):
per model and variant, the change in SR, Safety, SBU and VSI from the base suite, with its
interval, and the spec families the change comes from.

The statistics are `scoring.stats.compare`'s, reused as they are: the base and the variant
are relabelled as two "models" on one suite (tasks mapped to their base task), so a variant
whose init states correspond to the base's is compared episode by episode on the shared
(task, init state, seed) keys (exact McNemar and Newcombe's interval from Wilson intervals
for the rates, paired bootstrap for VSI), and any other variant as two independent samples
(`scoring.stats.compare_unpaired`: score test with Newcombe's interval, two-sample
bootstrap). Every row says which it is, and why when a variant meant to pair could not.

A variant is described by an object with the attributes of the suite registry's
`SuitePerturbation`: `suite`, `base_suite`, `family`, `init_states_match` and `task_map`
(variant task i -> base task index, or None when the tasks do not correspond to base tasks:
then only the suites' overall rates compare, unpaired).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence

import pandas as pd

from scoring.errors import RecordError, SafeVLAError
from scoring.report.tables import DASH, SHORT, ci_pct, pct
from scoring.stats.compare import Comparison, compare_models
from scoring.stats.compare_unpaired import compare_unpaired
from scoring.stats.metrics import spec_rates
from scoring.stats.ranking import LABELS, METRICS

PAIRED = "paired"
UNPAIRED = "unpaired"


@dataclasses.dataclass(frozen=True)
class Shift:
    """One model on one variant against the same model on the variant's base suite.

    Fields:
        model, suite (the variant), base_suite, family (the perturbation family).
        pairing: "paired" or "unpaired"; how: the sentence saying on what, or why not.
        n_base, n_variant: the episodes of each side compared: where the tasks correspond,
            those of the tasks both suites ran (`notes` counts the others); n_pairs: the keys
            the paired comparison used (None when unpaired).
        changes: one row per metric (sr, safety, sbu, vsi): base, variant, change
            (variant - base), change_lo, change_hi, ci, test, p_value. Rates are fractions.
        families: one row per spec family: base_rate, variant_rate, change (violation rate
            over the compared episodes, Tables 7/8's rate; NaN where the family is inactive
            on that side).
        comparison: the paired `Comparison` (models named after the two suites), or None.
        pairs: the comparison's rows as `scoring.stats.compare_verdict.pair_result` reads
            them (`Comparison.pairs` or `compare_unpaired`'s), the variant as model A.
        notes: how the pairing was done (`Comparison.notes`), or why it fell back.
    """

    model: str
    suite: str
    base_suite: str
    family: str
    pairing: str
    how: str
    n_base: int
    n_variant: int
    n_pairs: int | None
    changes: pd.DataFrame
    families: pd.DataFrame
    comparison: Comparison | None = None
    pairs: pd.DataFrame | None = None
    notes: tuple[str, ...] = ()

    def change(self, metric: str) -> float:
        return float(self.changes.set_index("metric").loc[metric, "change"])

    def sources(self, *, limit: int = 3) -> str:
        """The families whose violation rate moved most, e.g. "bystander +20.0 pp; arm-furn -5.0 pp"."""
        if self.families.empty:
            return DASH
        fam = self.families.assign(size=self.families["change"].abs())
        fam = fam[fam["size"] > 1e-12].sort_values(["size", "family"], ascending=[False, True], kind="stable")
        parts = [f"{SHORT.get(f, f)} {100 * c:+.1f} pp" for f, c in zip(fam["family"], fam["change"])][:limit]
        return "; ".join(parts) if parts else "no family's violation rate changed"


def suite_of(episodes: pd.DataFrame) -> pd.Series:
    """Each episode's LIBERO suite name: its suite, else its benchmark, with '_' for '-' (a
    benchmark id is the suite's name with dashes: libero-spatial-with-mug)."""
    suite = episodes["suite"] if "suite" in episodes else pd.Series(None, index=episodes.index, dtype=object)
    if "benchmark" in episodes:
        suite = suite.fillna(episodes["benchmark"])
    return suite.astype(object).where(suite.isna(), suite.astype(str).str.replace("-", "_"))


def variants_in(suites: Iterable[str], lookup: Callable[[str], object | None]) -> list:
    """The variants among `suites` whose base suite is there too, by base then variant name.

    `lookup(suite)` returns the suite's perturbation description, or None for a base suite
    or an unknown one.
    """
    present = set(suites)
    found = [p for p in (lookup(s) for s in sorted(present)) if p is not None and p.base_suite in present]
    return sorted(found, key=lambda p: (p.base_suite, p.suite))


def base_task_ids(task_ids: pd.Series, task_map: Sequence[int] | None, *, episode_ids: pd.Series,
                  suite: str) -> pd.Series:
    """Variant task ids as the base suite's ("task_3" -> "task_<task_map[3]>"); unchanged
    without a map (the tasks do not correspond; nothing pairs on them). A task id without
    an index, or out of the map, is a RecordError."""
    if task_map is None:
        return task_ids
    out = []
    for tid, eid in zip(task_ids.astype(str), episode_ids.astype(str)):
        head, _, tail = tid.rpartition("_")
        if not tail.isdigit() or int(tail) >= len(task_map):
            raise RecordError(f"task {tid!r} of suite {suite!r} has no base task; expected task_0 .. "
                              f"task_{len(task_map) - 1} (the suite's task map)", episode=eid, field="task_id")
        out.append(f"{head}_{task_map[int(tail)]}" if head else str(task_map[int(tail)]))
    return pd.Series(out, index=task_ids.index, dtype=object)


def base_vs_variant(episodes: pd.DataFrame, spec_results: pd.DataFrame, model: str, perturbation, *,
                    families: Sequence[str] | None = None, alpha: float = 0.05, confidence: float = 0.95,
                    n_resamples: int = 10_000, seed: int = 0) -> Shift:
    """`model` on the variant `perturbation.suite` against `model` on its base suite.

    Paired on the shared (task, init state, seed) keys when the variant's init states
    correspond to the base's, else (or when no key is shared) unpaired; see the module
    docstring. Where the tasks correspond, only the tasks both suites ran are compared, so
    a variant run on some of the tasks meets the same task mix on the base. `families`
    orders the per-family rows (default: as `spec_results` has them).
    """
    p = perturbation
    if p.suite == p.base_suite:
        raise SafeVLAError(f"suite {p.suite!r} is its own base; a variant needs another base suite")
    suite = suite_of(episodes)
    own = episodes["model"].astype(str) == str(model)
    base, variant = episodes[own & (suite == p.base_suite)], episodes[own & (suite == p.suite)]
    for name, side in ((p.base_suite, base), (p.suite, variant)):
        if side.empty:
            raise SafeVLAError(f"model {model!r} has no episode on suite {name!r}")
    variant = variant.assign(task_id=base_task_ids(variant["task_id"], p.task_map,
                                                   episode_ids=variant["episode_id"], suite=p.suite))
    # the two sides as two "models" of one suite: the comparison's own labels are the suite names
    frame = pd.concat([base.assign(model=p.base_suite), variant.assign(model=p.suite)], ignore_index=True)
    frame["suite"] = p.base_suite
    notes, on_tasks = [], ""
    if p.task_map is not None:  # corresponding tasks: compare the same task mix on both sides
        common = set(base["task_id"].astype(str)) & set(variant["task_id"].astype(str))
        keep = frame["task_id"].astype(str).isin(common).to_numpy()
        if common and not keep.all():
            notes.append(f"compared on the {len(common)} base task(s) both suites ran; {int((~keep).sum())} "
                         f"episode(s) of other tasks left out")
            on_tasks = f" (on the {len(common)} tasks both ran)"
            frame = frame[keep]
    names = [p.suite, p.base_suite]
    options = dict(alpha=alpha, confidence=confidence, n_resamples=n_resamples, seed=seed)
    cmp = None
    why = ("its tasks do not correspond to the base suite's" if p.task_map is None else
           "its init states differ from the base suite's")
    if p.init_states_match and p.task_map is not None:
        try:
            cmp = compare_models(frame, names, by=None, **options)
        except SafeVLAError as exc:  # no shared key, or several episodes per key: not pairable
            why = f"not pairable ({exc})"
    if cmp is not None:
        raw = cmp.pairs
        used = cmp.pairing.episodes["episode_id"].to_numpy()[cmp.pairing.index.ravel()]
        compared = frame[frame["episode_id"].isin(set(used))]
        how = f"paired on ({', '.join(_key_names(cmp.pairing.key_columns))})"
        notes, n_pairs = [*notes, *cmp.notes], len(cmp.pairing.keys)
    else:
        raw = compare_unpaired(frame, names, **options)
        compared, how, n_pairs = frame, f"unpaired{on_tasks}: {why}", None
    columns = {"value_a": "variant", "value_b": "base", "diff": "change", "diff_lo": "change_lo",
               "diff_hi": "change_hi"}
    fields = ["metric", "base", "variant", "change", "change_lo", "change_hi", "ci", "test", "p_value"]
    changes = raw.rename(columns=columns)[fields]
    changes = changes.set_index("metric").loc[list(METRICS)].reset_index()
    return Shift(model=str(model), suite=p.suite, base_suite=p.base_suite, family=str(p.family),
                 pairing=PAIRED if cmp is not None else UNPAIRED, how=how,
                 n_base=int((frame["model"] == p.base_suite).sum()), n_variant=int((frame["model"] == p.suite).sum()),
                 n_pairs=n_pairs, changes=changes,
                 families=_family_changes(compared, spec_results, p, families), comparison=cmp,
                 pairs=raw, notes=tuple(notes))


def _key_names(columns: Sequence[str]) -> list[str]:
    return [{"task_id": "task", "init_state": "init state"}.get(c, c) for c in columns if c != "suite"]


def _family_changes(compared: pd.DataFrame, spec_results: pd.DataFrame, p, families) -> pd.DataFrame:
    """Per family: violation rate on each side over the compared episodes, and the change."""
    cols = ["family", "base_rate", "variant_rate", "change"]
    if spec_results is None or spec_results.empty:
        return pd.DataFrame(columns=cols)
    # only the compared episodes' rows: spec_rates merges every row it is given
    rows = spec_results[spec_results["episode_id"].isin(compared["episode_id"]).to_numpy()]
    rates = spec_rates(compared, rows, by=("model",), ci=False, families=families)
    wide = rates.pivot_table(index="family", columns="model", values="rate", aggfunc="first", dropna=False)
    wide = wide.reindex(columns=[p.base_suite, p.suite])
    order = list(families) if families is not None else list(dict.fromkeys(rates["family"]))
    wide = wide.reindex(order)
    out = pd.DataFrame({"family": wide.index, "base_rate": wide[p.base_suite].to_numpy(float),
                        "variant_rate": wide[p.suite].to_numpy(float)})
    out["change"] = out["variant_rate"] - out["base_rate"]
    return out[cols].reset_index(drop=True)


def perturbation_shifts(episodes: pd.DataFrame, spec_results: pd.DataFrame, perturbations: Sequence, *,
                        families: Sequence[str] | None = None, seed: int = 0, n_resamples: int = 10_000,
                        alpha: float = 0.05, confidence: float = 0.95) -> list[Shift]:
    """`base_vs_variant` of every model that ran both a variant and its base, by base suite,
    variant and model."""
    suite = suite_of(episodes)
    out = []
    for p in perturbations:
        both = set(episodes.loc[suite == p.base_suite, "model"].astype(str)) & \
            set(episodes.loc[suite == p.suite, "model"].astype(str))
        out += [base_vs_variant(episodes, spec_results, m, p, families=families, seed=seed, n_resamples=n_resamples,
                                alpha=alpha, confidence=confidence) for m in sorted(both)]
    return out


def _value(metric: str, x: float) -> str:
    return DASH if x is None or (isinstance(x, float) and math.isnan(x)) else (
        f"{x:.3f}" if metric == "vsi" else pct(x))


def _signed(metric: str, x: float) -> str:
    return f"{x:+.3f}" if metric == "vsi" else f"{100 * x:+.1f}"


def _interval(metric: str, lo: float, hi: float) -> str:
    return f"[{lo:+.3f}, {hi:+.3f}]" if metric == "vsi" else ci_pct(lo, hi)


def shift_table(shifts: Sequence[Shift]) -> pd.DataFrame:
    """The perturbation table: a row per (model, variant): each metric on the base and the
    variant, its change and the change's 95% interval, the pairing, and the families the
    change comes from."""
    rows = []
    for s in shifts:
        row = {"model": s.model, "perturbation": s.suite, "base suite": s.base_suite, "perturbation family": s.family,
               "comparison": s.how, "n base": s.n_base, "n perturbed": s.n_variant,
               "n pairs": DASH if s.n_pairs is None else s.n_pairs}
        for r in s.changes.itertuples(index=False):
            label = LABELS[r.metric] + ("" if r.metric == "vsi" else " %")
            row[label] = f"{_value(r.metric, r.base)} → {_value(r.metric, r.variant)}"
            delta = f"Δ {LABELS[r.metric]}" + ("" if r.metric == "vsi" else " pp")
            row[delta] = _signed(r.metric, r.change)
            row[f"{delta} 95% CI"] = _interval(r.metric, r.change_lo, r.change_hi)
        row["change from (violation rate, pp)"] = s.sources()
        rows.append(row)
    return pd.DataFrame(rows)


def family_table(shifts: Sequence[Shift]) -> pd.DataFrame:
    """Per (model, variant, family): violation rate on the base and the variant and the change in
    percentage points ("—" where the family is inactive)."""
    rows = []
    for s in shifts:
        for r in s.families.itertuples(index=False):
            rows.append({"model": s.model, "perturbation": s.suite, "base suite": s.base_suite,
                         "spec": SHORT.get(r.family, r.family), "base %": pct(r.base_rate),
                         "perturbed %": pct(r.variant_rate),
                         "change (pp)": DASH if math.isnan(r.change) else f"{100 * r.change:+.1f}"})
    return pd.DataFrame(rows, columns=["model", "perturbation", "base suite", "spec", "base %", "perturbed %",
                                       "change (pp)"])


def perturbation_tables(shifts: Sequence[Shift], *, n_resamples: int = 10_000,
                        seed: int = 0) -> dict[str, tuple[str, pd.DataFrame]]:
    """name -> (caption, table) for `scoring.report.tables.write_tables`; empty without shifts."""
    if not shifts:
        return {}
    caption = ("Base suite against perturbed variants, per model: SR, Safety and SBU (percent) and VSI on the base "
               "→ the variant, and the change (variant - base) with its 95% interval. Paired variants (init states "
               "correspond) are compared on shared (task, init state, seed) keys: exact McNemar with Newcombe's "
               "interval built from Wilson intervals, and a paired bootstrap for VSI; the others as independent "
               "samples: Newcombe's hybrid score interval and a two-sample bootstrap. "
               f"Bootstrap: {n_resamples} resamples, seed {seed}. The last column lists the spec families whose "
               "violation rate moved most (percentage points).")
    return {"perturbation": (caption, shift_table(shifts)),
            "perturbation_families": ("Per-spec violation rate (Tables 7/8's rate) on the base suite and the "
                                      "perturbed variant, over the compared episodes; — = inactive.",
                                      family_table(shifts))}


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def shifts_json(shifts: Sequence[Shift]) -> list[dict]:
    """The perturbation table for metrics.json: fractions, intervals as [lo, hi], null for NaN."""
    out = []
    for s in shifts:
        metrics = {r.metric: {"base": _num(r.base), "perturbed": _num(r.variant), "change": _num(r.change),
                              "change_ci": [_num(r.change_lo), _num(r.change_hi)], "ci": r.ci, "test": r.test,
                              "p_value": _num(r.p_value)} for r in s.changes.itertuples(index=False)}
        fams = {r.family: {"base_rate": _num(r.base_rate), "perturbed_rate": _num(r.variant_rate),
                           "change": _num(r.change)} for r in s.families.itertuples(index=False)}
        out.append({"model": s.model, "suite": s.suite, "base_suite": s.base_suite, "family": s.family,
                    "pairing": s.pairing, "how": s.how, "n_base": s.n_base, "n_perturbed": s.n_variant,
                    "n_pairs": s.n_pairs, "metrics": metrics, "families": fams})
    return out


def registry_lookup() -> Callable[[str], object | None]:
    """`suite_perturbation` of the suite registry (assets/perturbations.yaml)."""
    from scoring.registry.perturbations import suite_perturbation
    return suite_perturbation
