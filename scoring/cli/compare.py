"""`safevla compare STORE --models A B [C...]`: paired comparison tables as CSV, Markdown, LaTeX.

The main CLI (`scoring.cli.main`) registers `add_compare_parser`; `python -m scoring.cli.compare
compare ...` runs it standalone. `comparison_tables` turns a `Comparison` into display tables
(strings, percent with one decimal) that a dashboard page can show as they are.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from scoring.errors import SafeVLAError
from scoring.records.io import atomic_write_bytes
from scoring.report.tables import DASH, ci_pct, pct, write_tables
from scoring.stats.compare import BY_CHOICES, Comparison, compare_models, discordant_episodes
from scoring.stats.compare_verdict import pair_result, verdict
from scoring.stats.ranking import HIGHER_IS_BETTER, LABELS, METRICS



def add_compare_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `compare` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "compare", help="paired comparison of models on shared init states and seeds",
        description="Compare two or more models episode by episode on the (suite, task, init state, seed) keys "
                    "they share: exact McNemar tests and Newcombe intervals for SR, Safety and SBU differences, "
                    "a paired bootstrap for VSI, Holm correction over pairs, tiers of no significant difference, "
                    "and Kendall's tau between the SR and Safety rankings. Writes CSV, Markdown and LaTeX.")
    p.add_argument("store", help="run store directory")
    # nargs="*" so that zero or one model gets our one-line cause (with the valid names), not argparse's usage
    p.add_argument("--models", nargs="*", default=[], metavar="MODEL", help="two or more model names")
    p.add_argument("--out", default=None, help="output directory (default: STORE/compare)")
    p.add_argument("--by", default="suite", help="'suite' (per suite and overall, default) or 'none' (overall only)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level after Holm (default 0.05)")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples for VSI (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--unpaired", action="store_true",
                   help="compare the models as independent samples (two-proportion score test, Newcombe interval, "
                        "two-sample bootstrap for VSI), for models run on different init states, seeds or tasks")
    p.add_argument("--perturbed", default=None, metavar="SUITE",
                   help="compare one model (--models MODEL) on this perturbed suite against the same model on its "
                        "base suite (e.g. libero_spatial_with_mug against libero_spatial): paired on (task, init "
                        "state, seed) where the init states correspond, unpaired otherwise")
    p.set_defaults(func=run_compare)
    return p


def run_compare(args) -> int:
    """Runs `safevla compare`; bad input raises SafeVLAError (the caller prints it on one line)."""
    from scoring.store.write import load_store
    by = {"suite": "suite", "none": None}.get(args.by, args.by)
    if by not in BY_CHOICES:
        raise SafeVLAError(f"--by: unknown grouping {args.by!r}; valid choices: suite, none")
    _, episodes, spec_results = load_store(args.store)
    if episodes.empty:
        raise SafeVLAError(f"run store {args.store!r} has no scored episodes")
    out = Path(args.out) if args.out else Path(args.store) / "compare"
    if getattr(args, "perturbed", None):
        from scoring.cli.compare_perturbed import run_perturbed
        return run_perturbed(args, episodes, spec_results, out)
    if getattr(args, "unpaired", False):
        return _run_unpaired(args, episodes, out)
    try:
            cmp = compare_models(episodes, args.models, by=by, alpha=args.alpha, n_resamples=args.resamples,
                             seed=args.seed)
    except SafeVLAError as exc:
        # no shared key, or keys that do not tell episodes apart (e.g. no seeds recorded): not pairable
        if "is shared by all of" in str(exc) or "expected at most one per" in str(exc):
            raise SafeVLAError(f"{exc} (--unpaired compares them as independent samples)") from exc
        raise
    paths = write_tables(comparison_tables(cmp), out)
    for name, frame in (("compare_discordant", discordant_table(cmp)), ("compare_unpaired", cmp.unpaired)):
        path = out / f"{name}.csv"
        atomic_write_bytes(path, frame.to_csv(index=False).encode())
        paths.append(path)
    print(f"compared {', '.join(cmp.models)} on {len(cmp.pairing.keys)} shared keys "
          f"(paired on {', '.join(cmp.pairing.key_columns)}); {len(cmp.unpaired)} unpaired key(s)")
    for note in cmp.notes:
        print(f"note: {note}")
    _print_verdicts(cmp.pairs, cmp.models)
    print(f"wrote {len(paths)} files to {out}")
    return 0


def _print_verdicts(pairs: pd.DataFrame, models) -> None:
    """The Safety verdict of every pair, in one sentence each (`scoring.stats.compare_verdict`)."""
    for i, a in enumerate(models):
        for b in models[i + 1:]:
            print(f"verdict: {verdict(pair_result(pairs, a, b, 'safety'))}")


def _run_unpaired(args, episodes: pd.DataFrame, out: Path) -> int:
    from scoring.stats.compare_unpaired import compare_unpaired

    pairs = compare_unpaired(episodes, args.models, alpha=args.alpha, n_resamples=args.resamples, seed=args.seed)
    paths = write_tables({"compare_unpaired_pairs": unpaired_table(pairs, n_resamples=args.resamples,
                                                                   seed=args.seed, alpha=args.alpha)}, out)
    models = list(dict.fromkeys([*pairs["model_a"], *pairs["model_b"]]))
    counts = ", ".join(f"{m} {n}" for m, n in episodes[episodes["model"].isin(models)]["model"]
                       .value_counts().reindex(models).items())
    print(f"compared {', '.join(models)} as independent samples, unpaired (episodes: {counts})")
    _print_verdicts(pairs, models)
    print(f"wrote {len(paths)} files to {out}")
    return 0


def unpaired_table(pairs: pd.DataFrame, *, n_resamples: int, seed: int, alpha: float) -> tuple[str, pd.DataFrame]:
    """(caption, display table) of `scoring.stats.compare_unpaired.compare_unpaired`'s result."""
    table = pd.DataFrame({
        "metric": pairs["metric"].map(_label), "model A": pairs["model_a"], "model B": pairs["model_b"],
        "n A": pairs["n_a"], "n B": pairs["n_b"],
        "A": [_value(k, v) for k, v in zip(pairs["metric"], pairs["value_a"])],
        "B": [_value(k, v) for k, v in zip(pairs["metric"], pairs["value_b"])],
        "A - B": [_value(k, v) for k, v in zip(pairs["metric"], pairs["diff"])],
        "95% CI": [_interval(k, lo, hi) for k, lo, hi in zip(pairs["metric"], pairs["diff_lo"], pairs["diff_hi"])],
        "test": pairs["test"], "p": pairs["p_value"].map(_p), "p (Holm)": pairs["p_holm"].map(_p),
        "significant": pairs["significant"].map({True: "yes", False: "no"})})
    caption = (f"Unpaired differences (independent samples, no shared keys): two-proportion score test with Newcombe "
               f"95% CI (SR, Safety, SBU; percent), two-sample bootstrap ({n_resamples} resamples, seed {seed}) for "
               f"VSI; Holm over pairs per metric, alpha {alpha:g}.")
    return caption, table


def _p(p: float) -> str:
    # scientific notation below 0.001 rather than "<0.001": a bare "<" prints as an inverted
    # exclamation mark in LaTeX's default font encoding
    return DASH if p is None or math.isnan(p) else (f"{p:.4f}" if p >= 1e-3 else f"{p:.1e}")


def _value(metric: str, v: float) -> str:
    return f"{v:.3f}" if metric == "vsi" else pct(v)


def _interval(metric: str, lo: float, hi: float) -> str:
    return f"[{lo:.3f}, {hi:.3f}]" if metric == "vsi" else ci_pct(lo, hi)


def _label(metric: str) -> str:
    return f"{LABELS[metric]} ({'higher' if HIGHER_IS_BETTER[metric] else 'lower'} is better)"


def comparison_tables(cmp: Comparison) -> dict[str, tuple[str, pd.DataFrame]]:
    """Display tables of a comparison: name -> (caption, table of strings)."""
    level = f"{100 * cmp.confidence:g}%"
    pairs = pd.DataFrame({
        "group": cmp.pairs["group"], "metric": cmp.pairs["metric"].map(_label),
        "model A": cmp.pairs["model_a"], "model B": cmp.pairs["model_b"], "n": cmp.pairs["n"],
        **{label: cmp.pairs[col].astype(object).where(cmp.pairs[col].notna(), DASH)
           for label, col in (("both", "both"), ("b: only A", "only_a"), ("c: only B", "only_b"),
                              ("neither", "neither"))},
        "A": [_value(k, v) for k, v in zip(cmp.pairs["metric"], cmp.pairs["value_a"])],
        "B": [_value(k, v) for k, v in zip(cmp.pairs["metric"], cmp.pairs["value_b"])],
        "A - B": [_value(k, v) for k, v in zip(cmp.pairs["metric"], cmp.pairs["diff"])],
        f"{level} CI": [_interval(k, lo, hi) for k, lo, hi in
                        zip(cmp.pairs["metric"], cmp.pairs["diff_lo"], cmp.pairs["diff_hi"])],
        "test": cmp.pairs["test"], "p": cmp.pairs["p_value"].map(_p), "p (Holm)": cmp.pairs["p_holm"].map(_p),
        "significant": cmp.pairs["significant"].map({True: "yes", False: "no"}),
    })
    rank = {(g, k, m): (v, r, t) for g, k, m, v, r, t in
            cmp.ranking[["group", "metric", "model", "value", "rank", "tier"]].itertuples(index=False)}
    wide = []
    for g in cmp.groups:
        for model in cmp.models:
            row = {"group": g, "model": model}
            for k in METRICS:
                v, r, t = rank[g, k, model]
                row[LABELS[k] + (" %" if k != "vsi" else "")] = _value(k, v)
                row[f"{LABELS[k]} rank"], row[f"{LABELS[k]} tier"] = int(r), int(t)
            wide.append(row)
    agreement = pd.DataFrame({
        "group": cmp.agreement["group"], "models": cmp.agreement["n_models"],
        "Kendall tau (SR vs Safety)": [DASH if math.isnan(t) else f"{t:.3f}" for t in cmp.agreement["tau"]],
        "p": cmp.agreement["p_value"].map(_p), "rank flips": cmp.agreement["n_flips"],
        "significant flips": cmp.agreement["n_significant_flips"],
        "flips": cmp.agreement["flips"].replace("", DASH)})
    flips = pd.DataFrame({
        "group": cmp.flips["group"], "ahead by SR": cmp.flips["model_1"], "ahead by Safety": cmp.flips["model_2"],
        "SR %": [f"{pct(a)} vs {pct(b)}" for a, b in zip(cmp.flips["sr_1"], cmp.flips["sr_2"])],
        "Safety %": [f"{pct(a)} vs {pct(b)}" for a, b in zip(cmp.flips["safety_1"], cmp.flips["safety_2"])],
        "p SR (Holm)": cmp.flips["p_sr"].map(_p), "p Safety (Holm)": cmp.flips["p_safety"].map(_p),
        "both significant": cmp.flips["significant"].map({True: "yes", False: "no"})})
    keys = ", ".join(cmp.pairing.key_columns)
    return {
        "compare_pairs": (f"Paired differences on shared ({keys}) keys: exact McNemar with Newcombe {level} CI "
                          f"(SR, Safety, SBU; percent), paired bootstrap ({cmp.n_resamples} resamples, seed "
                          f"{cmp.seed}) for VSI; Holm over pairs per group and metric, alpha {cmp.alpha:g}.", pairs),
        "compare_ranking": ("Ranks and tiers: models sorted by the metric; a model opens a new tier when it differs "
                            "significantly (Holm) from the top model of the current tier.", pd.DataFrame(wide)),
        "compare_rank_agreement": ("Kendall's tau-b between the SR and Safety rankings, with the rank flips.",
                                   agreement),
        "compare_flips": ("Rank flips: pairs ordered one way by SR and the other way by Safety.", flips),
    }


def discordant_table(cmp: Comparison) -> pd.DataFrame:
    """Safety-discordant keys of every pair (A safe and B unsafe, or the reverse), for replay."""
    parts = []
    for i, a in enumerate(cmp.models):
        for b in cmp.models[i + 1:]:
            d = discordant_episodes(cmp.pairing, a, b, metric="safety")
            d.insert(0, "model_b", b)
            d.insert(0, "model_a", a)
            parts.append(d)
    return pd.concat(parts, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry: `python -m scoring.cli.compare compare STORE --models A B` (the main CLI's)."""
    from scoring.cli.main import main as safevla_main
    return safevla_main(argv)


if __name__ == "__main__":
    sys.exit(main())
