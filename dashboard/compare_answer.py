"""The Compare page's answer: the verdict of the chosen pair in one sentence
(`scoring.stats.compare_verdict`), the forest plot of its differences (`dashboard.forest`), the
methods text, and, on a store whose models share no key, the unpaired comparison
(`scoring.stats.compare_unpaired`) in place of the paired one. Also the helpers that show the
paired tables for the chosen pair only."""

from __future__ import annotations

import streamlit as st

from dashboard import cached
from dashboard import common as C
from dashboard import vocab
from scoring.errors import SafeVLAError


def is_pair(first, second, a: str, b: str):
    """Rows whose two model columns hold A and B, in either order."""
    return ((first == a) & (second == b)) | ((first == b) & (second == a))


def answer_first(table):
    """The pair table with the difference, its interval and the p-values right after the
    metric, so they stay on screen at 1280 px; the counts and model names follow."""
    first = [col for col in table.columns if col in ("metric", "A", "B", "A - B") or col.endswith("CI")
             or col.startswith("p") or col == "significant"]
    return table[first + [col for col in table.columns if col not in first]]


def answer_ui(pairs, a: str, b: str, *, groups=("overall",)) -> None:
    """The Safety verdict of A vs B in one sentence, the other metrics' verdicts under it,
    then the forest plot of every difference (`dashboard.forest`)."""
    from dashboard.forest import forest_chart, forest_frame
    from scoring.stats.compare_verdict import pair_result, verdict

    st.markdown(f"#### {verdict(pair_result(pairs, a, b, 'safety'))}")
    for metric in ("sr", "sbu", "vsi"):
        st.caption(verdict(pair_result(pairs, a, b, metric)))
    # at its own width: a stretched vconcat overflows the page at 1280 px
    C.show(forest_chart(forest_frame(pairs, a, b, groups=groups), a, b), key="cmp_forest", width="content")


PAIRED_METHODS = (
    "**Methods.** Every model sees the same init states and seeds, so the models are compared episode by episode "
    "on the (suite, task, init state, seed) keys they share. SR, Safety and SBU: exact McNemar test on the "
    "discordant pairs, Newcombe square-and-add 95% interval of the paired difference. VSI: paired percentile "
    "bootstrap of the mean difference (10,000 resamples of keys, stratified by suite). p-values are Holm-adjusted "
    "over the pairs of the chosen models; a difference is called only when the Holm p is below 0.05. "
    "Details: docs/compare.md.")
UNPAIRED_METHODS = (
    "**Methods (unpaired).** These models share no key, so they are compared as independent samples, on all of "
    "each model's episodes: two-proportion score test and Newcombe hybrid score 95% interval (statsmodels) for SR, "
    "Safety and SBU; two-sample percentile bootstrap (10,000 resamples per model) of the VSI difference. Holm over "
    "the pairs of the chosen models. Unpaired tests keep the differences between init states, seeds and tasks in "
    "the noise, so they are weaker than the paired ones, and a task mix that differs between the models biases "
    "them. Details: docs/compare.md.")


def methods_ui(*, paired: bool) -> None:
    st.markdown(PAIRED_METHODS if paired else UNPAIRED_METHODS)


@st.cache_resource(show_spinner=False, max_entries=8)
def unpaired_comparison(_data, key: str, items: tuple, models: tuple):
    from scoring.stats.compare_unpaired import compare_unpaired
    return compare_unpaired(cached.verdicts(_data, key, items).frame, list(models))


def unpaired_ui(c: C.Ctx, models: tuple, a: str, b: str, why: str) -> None:
    """No shared keys: the unpaired comparison instead of a dead end, said to be unpaired."""
    from scoring.cli.compare import unpaired_table
    from scoring.report.tables import to_markdown

    why = why if why.endswith((".", "?", "!")) else f"{why}."
    st.warning(f"No paired comparison: {why} Shown instead: an **unpaired** comparison, the models as "
               "independent samples (weaker than a paired one).", icon=":material/link_off:")
    try:
        with st.spinner("Comparing the models as independent samples …"):
            pairs = unpaired_comparison(c.data, c.key, c.items, models)
    except SafeVLAError as exc:
        st.info(f"These models cannot be compared: {exc}", icon=":material/link_off:")
        return
    answer_ui(pairs, a, b)
    methods_ui(paired=False)
    caption, df = unpaired_table(pairs, n_resamples=10_000, seed=0, alpha=0.05)
    st.caption(caption)
    show = answer_first(df[is_pair(df["model A"], df["model B"], a, b)])
    vocab.table(show, hide_index=True, width="stretch", key="cmp_unpaired_pairs", pinned=("metric",),
                row_delta=("A - B", "metric"))
    st.download_button("Markdown", f"{caption}\n\n{to_markdown(df)}\n", file_name="compare_unpaired_pairs.md",
                       mime="text/markdown", on_click="ignore", key="cmp_unpaired_md")
