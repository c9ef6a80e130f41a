"""What-if: move each family's threshold (or pick one of the paper's tiers) and see the
store re-scored live by `scoring.evaluate.whatif.WhatIf`: aggregates with deltas against the
default, the episodes whose verdict flips, and Safety/SBU against each threshold."""

from __future__ import annotations

import streamlit as st

from dashboard import cached
from dashboard import common as C
from dashboard import state as S
from dashboard import vocab

FLIP_LIMIT = 500


def _apply_preset(data: C.D.StoreData) -> None:
    name = st.session_state.get("w.preset")
    if not name:
        return
    for k, v in C.D.preset_knobs(data.registry, name).items():
        S.set_widget(f"knob.{k}", v)


def knobs_ui(c: C.Ctx) -> dict:
    """Preset picker and one slider per threshold family; returns the knob values."""
    data = c.data
    presets = data.registry.presets
    st.selectbox("Preset (the paper's threshold tiers, Table 9)", list(presets), key="w.preset", index=None,
                 format_func=lambda n: presets[n].label, placeholder="choose a preset to set the sliders",
                 on_change=_apply_preset, args=(data,))
    defaults = C.D.knob_defaults(data.registry)
    values = dict(c.knobs)
    movable = dict(zip(data.families, data.whatif.movable))
    cols = st.columns(len(C.D.KNOBS))
    for col, k in zip(cols, C.D.KNOBS):
        if k.name not in defaults:
            continue
        with col:
            key = S.widget_key(f"knob.{k.name}", values[k.name])
            fixed = not any(movable.get(f, False) for f in k.families)
            n_active = C.D.knob_active_count(data, k)
            fams = ", ".join(data.label(f) for f in k.families if f in data.families)
            val = st.slider(f"{k.label} ({k.unit})", k.lo, k.hi, step=k.step, key=key, disabled=fixed or not n_active,
                            help=f"threshold of: {fams}; default {defaults[k.name]:g} {k.unit}"
                                 + (" (grasp slip: the object may drop this far in the hand)" if k.name == "slip"
                                    else ""))
            S.put(f"knob.{k.name}", float(val))
            values[k.name] = float(val)
            delta = val - defaults[k.name]
            if not n_active:  # a disabled slider says why, instead of moving nothing
                st.caption(f"Inactive in all {len(data.episodes):,} episodes: changes nothing.")
            else:
                st.caption("default" if abs(delta) < 1e-12 else f"default {defaults[k.name]:g} ({delta:+g})")
    return values


def render() -> None:
    c0 = C.ctx()
    data = c0.data
    st.title("What-if thresholds")
    st.caption("Every number below is a re-score of the store by `scoring.evaluate.whatif.WhatIf` from the stored "
               "per-spec extremes: exact, no re-simulation.")
    values = knobs_ui(c0)
    c = C.make_ctx(data, c0.page, c0.store_param)  # the sliders may have moved in this run
    st.session_state["_ctx"] = c
    st.button("Reset to defaults", on_click=C.reset_knobs, args=(data,), key="whatif_reset")

    summary = C.D.whatif_summary(data, c.v, cached.base_aggregates(data, c.key))
    overall = summary.iloc[-1]
    cols = st.columns(5)
    for col, (name, label) in zip(cols, (("sr", "Success rate"), ("safety", "Safety"), ("sbu", "SBU"),
                                         ("p_unsafe_given_success", "P[unsafe | success]"), ("vsi", "VSI"))):
        fmt = (lambda x: f"{x:.3f}") if name == "vsi" else C.pct
        d = overall[f"d_{name}"]
        dtext = None if abs(d) < 1e-12 else (f"{d:+.3f}" if name == "vsi" else f"{100 * d:+.1f} pp")
        good_up = name in ("sr", "safety")
        col.metric(label, fmt(overall[name]), dtext, delta_color="normal" if good_up else "inverse")

    st.subheader("Per cell, against the default thresholds")
    show = summary.copy()
    for name in ("sr", "safety", "sbu", "p_unsafe_given_success"):
        show[name] = [C.pct(x) for x in show[name]]
        show[f"d_{name}"] = [f"{100 * x:+.1f}" if x == x else "—" for x in show[f"d_{name}"]]
    show["vsi"] = [f"{x:.3f}" for x in show["vsi"]]
    show["d_vsi"] = [f"{x:+.3f}" for x in show["d_vsi"]]
    show = show.rename(columns={"sr": "SR", "safety": "Safety", "sbu": "SBU", "p_unsafe_given_success": "P[U|S]",
                                "vsi": "VSI", "d_sr": "Δ SR pp", "d_safety": "Δ Safety pp", "d_sbu": "Δ SBU pp",
                                "d_p_unsafe_given_success": "Δ P[U|S] pp", "d_vsi": "Δ VSI"})
    st.caption("Δ columns: green is safer (or more successful) than the default thresholds, red is less safe.")
    vocab.table(show, hide_index=True, width="stretch", key="whatif_table", pinned=("model", "suite"))

    left, right = st.columns([1, 1])
    with left:
        st.subheader("Verdicts that flip")
        flips = C.D.flipped(data, c.overrides, limit=None) if c.overrides else None
        if flips is None or flips.empty:
            st.info("No episode changes its safety verdict at these thresholds." if c.overrides else
                    "Move a slider or pick a preset: episodes whose verdict changes are listed here.")
        else:
            to_unsafe = int((~flips["safe_after"]).sum())
            st.markdown(f"**{len(flips):,}** episodes flip: {to_unsafe:,} become unsafe, "
                        f"{len(flips) - to_unsafe:,} become safe; "
                        f"{int((flips['sbu_change'] == 'becomes SBU').sum()):,} become SBU, "
                        f"{int((flips['sbu_change'] == 'leaves SBU').sum()):,} leave SBU.")
            shown = flips.head(FLIP_LIMIT)
            # half a page wide: model and task pinned, then what changed; the rest scrolls
            ev = vocab.table(shown[["model", "task_id", "change", "sbu_change", "vsi_before", "vsi_after", "suite",
                                    "episode_id"]], hide_index=True, width="stretch", key="flip_table",
                             on_select="rerun", selection_mode="single-row", height=360,
                             pinned=("model", "task_id"),
                             column_config={c: st.column_config.NumberColumn(format="%.2f")
                                            for c in ("vsi_before", "vsi_after")})
            if len(flips) > FLIP_LIMIT:
                st.caption(f"First {FLIP_LIMIT} of {len(flips):,} (successes first, deepest violations first).")
            rows = ev.selection.rows if ev is not None else []
            if rows:
                st.session_state.pop("flip_table", None)
                C.go("detail", ep=shown["episode_id"].iat[rows[0]], step=None)
    with right:
        st.subheader("Sensitivity")
        names = [k.name for k in C.D.KNOBS if k.name in values]
        key = S.widget_key("sens")
        if st.session_state[key] not in names:
            st.session_state[key] = names[0]
        knob = st.selectbox("Threshold", names, key=key, format_func=lambda n: C.D.KNOB_BY_NAME[n].label)
        S.put("sens", knob)
        with st.spinner("Re-scoring across the threshold range …"):
            cached.sensitivity(data, c.key, knob)
        C.show(cached.sensitivity_chart(data, c.key, knob, float(values[knob])))
        st.caption("Every other threshold at its registry default, as Table 9 varies one family at a time; "
                   "over all episodes. The black rule is this slider's current setting.")


if __name__ == "__main__":
    render()
