"""A base suite with its perturbed variants (LIBERO-PRO): the table of changes the Overview and
Compare pages show, and the perturbation-family filter they share with the Episodes page.

The numbers are `scoring.report.perturbation`'s (`dashboard.data.overview.perturbation_shifts`),
cached per store and threshold setting; the variants come from the suite registry
(`scoring.registry.perturbations`). Nothing is drawn for a store without a variant.
"""

from __future__ import annotations

import streamlit as st

from dashboard import cached
from dashboard import common as C
from dashboard import state as S
from dashboard import vocab
from dashboard.data.episodes import BASE_FAMILY, perturbation_mask, suite_families
from dashboard.data.overview import perturbation_shifts, shift_table


def lookup():
    """The suite registry's `suite_perturbation`."""
    from scoring.registry.perturbations import suite_perturbation

    return suite_perturbation


@st.cache_resource(show_spinner=False, max_entries=8)
def shifts(_data, key: str, items: tuple) -> tuple:
    return tuple(perturbation_shifts(_data, cached.verdicts(_data, key, items), lookup()))


@st.cache_resource(show_spinner=False, max_entries=8)
def families(_data, key: str) -> tuple[str, ...]:
    """The perturbation families of the store's suites, the base suites' label first."""
    from scoring.report.perturbation import suite_of

    found = set(suite_families(suite_of(_data.episodes).dropna().astype(str).unique(), lookup()).values())
    return tuple(sorted(found, key=lambda f: (f != BASE_FAMILY, f)))


def family_filter_ui(c: C.Ctx) -> list[str]:
    """The perturbation-family multiselect (state "pfams", link `?perturbation=`); drawn only
    when the store holds a perturbed suite. Returns the chosen families (empty: all)."""
    options = list(families(c.data, c.key))
    if len(options) < 2:
        return []
    key = S.widget_key("pfams")
    st.session_state[key] = [x for x in st.session_state[key] if x in options]
    value = st.multiselect("Perturbation", options, key=key, placeholder="all suites",
                           help="keep the suites of these perturbation families (LIBERO-PRO variants); "
                                f"'{BASE_FAMILY}' keeps the suites they vary")
    S.put("pfams", list(value))
    return list(value)


def family_mask(c: C.Ctx, chosen):
    """(N,) bool over the verdict frame: episodes of the chosen perturbation families."""
    return perturbation_mask(c.v.frame, chosen, lookup())


def deltas_ui(c: C.Ctx, *, models=()) -> None:
    """The change from each base suite to its variants, per model (of `models`; all when empty)."""
    found = shifts(c.data, c.key, c.items)
    if not found:
        return
    st.subheader("Under perturbation: base suite → variants")
    st.caption("Per model and perturbed suite: the change of each metric from the base suite to the variant, "
               "with its 95% interval (green: the variant is safer or more successful; a change whose interval "
               "holds 0 is not significant), the spec families whose violation rate moved most, then each metric "
               "on the base → the variant. Under the current thresholds, with 2,000 bootstrap resamples "
               "(`safevla report` uses 10,000). Paired on (task, init state, seed) where the variant's init states "
               "correspond to the base's, unpaired otherwise: the comparison column says which.")
    chosen = [f for f in family_filter_ui(c) if f != BASE_FAMILY]
    table = shift_table(found, chosen, models)
    if table.empty:
        st.info("No perturbed suite of the chosen families for these models.")
        return
    # the changes first, each with its interval (colour says the direction, not significance):
    # at 1280 px the context columns would push them out of view
    deltas = [f"Δ {m}{ci}" for m in ("Safety pp", "SR pp", "SBU pp", "VSI") for ci in ("", " 95% CI")]
    vocab.table(table, hide_index=True, width="stretch", pinned=("model", "perturbation"), key=f"pert_{c.page}",
                first=("model", "perturbation", *deltas, "change from (violation rate, pp)"))
