"""`safevla compare STORE --models MODEL --perturbed SUITE`: one model on a perturbed suite
against the same model on its base suite (`scoring.report.perturbation.base_vs_variant`),
as CSV, Markdown and LaTeX, with one verdict sentence per metric."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scoring.errors import SafeVLAError
from scoring.records.io import atomic_write_bytes
from scoring.registry.lookup import load_registry
from scoring.report.perturbation import base_vs_variant, perturbation_tables, registry_lookup, suite_of
from scoring.report.tables import exclude_unsettled, write_tables
from scoring.stats.compare import discordant_episodes
from scoring.stats.compare_verdict import pair_result, verdict
from scoring.stats.ranking import METRICS


def variant_of(suite: str, episodes: pd.DataFrame, lookup=None):
    """The registry's description of the perturbed `suite`; a one-line error when it is not a
    variant of a base suite, or when the store lacks either suite (naming the store's suites)."""
    lookup = lookup or registry_lookup()
    here = sorted(suite_of(episodes).dropna().astype(str).unique())
    p = lookup(suite)
    if p is None or p.base_suite is None:
        variants = [s for s in here if (q := lookup(s)) is not None and q.base_suite in here]
        raise SafeVLAError(f"--perturbed: {suite!r} is not a perturbed variant of a base suite; variants in this "
                           f"store with their base: {', '.join(variants) or '(none)'}")
    for name in (p.suite, p.base_suite):
        if name not in here:
            raise SafeVLAError(f"--perturbed: the store has no episode on suite {name!r}; suites in the store: "
                               f"{', '.join(here)}")
    return p


def run_perturbed(args, episodes: pd.DataFrame, spec_results: pd.DataFrame, out: Path, *, lookup=None) -> int:
    """Writes compare_perturbation and compare_perturbation_families (.csv/.md/.tex) and, when
    paired, the Safety-discordant keys of base and variant (compare_perturbed_discordant.csv)."""
    models = list(args.models)
    if len(models) != 1:
        raise SafeVLAError(f"--perturbed compares one model with itself on the base suite; got {len(models)} "
                           f"models ({', '.join(models) or 'none'}): pass --models MODEL")
    known = sorted(episodes["model"].dropna().astype(str).unique())
    if models[0] not in known:
        raise SafeVLAError(f"unknown model {models[0]!r}; models in the store: {', '.join(known)}")
    p = variant_of(args.perturbed, episodes, lookup)
    suite = suite_of(episodes)
    ran = [set(episodes.loc[suite == name, "model"].astype(str)) for name in (p.suite, p.base_suite)]
    if models[0] not in ran[0] & ran[1]:
        missing = p.suite if models[0] not in ran[0] else p.base_suite
        raise SafeVLAError(f"model {models[0]!r} has no episode on suite {missing!r}; models that ran both "
                           f"{p.suite} and {p.base_suite}: {', '.join(sorted(ran[0] & ran[1])) or '(none)'}")
    counted, spec_results, excluded = exclude_unsettled(episodes, spec_results)
    shift = base_vs_variant(counted, spec_results, models[0], p, families=load_registry().families,
                            alpha=args.alpha, n_resamples=args.resamples, seed=args.seed)
    tables = {f"compare_{name}": (caption + excluded, table) for name, (caption, table) in
              perturbation_tables([shift], n_resamples=args.resamples, seed=args.seed).items()}
    paths = write_tables(tables, out)
    if shift.comparison is not None:
        path = out / "compare_perturbed_discordant.csv"
        keys = discordant_episodes(shift.comparison.pairing, p.suite, p.base_suite, metric="safety")
        atomic_write_bytes(path, keys.to_csv(index=False).encode())
        paths.append(path)
    print(f"compared {models[0]} on {p.suite} ({p.family}) against {p.base_suite}: {shift.how}"
          + (f", {shift.n_pairs} keys" if shift.n_pairs is not None else
             f" ({shift.n_variant} vs {shift.n_base} episodes)"))
    for note in shift.notes:
        print(f"note: {note}")
    for metric in METRICS:
        print(f"verdict: {verdict(pair_result(shift.pairs, p.suite, p.base_suite, metric))}")
    print(f"wrote {len(paths)} files to {out}")
    return 0
