"""Tags and notes in the dashboard: the detail page's editor, the Episodes tag filter, and
the tags/note columns of the episode table and its CSV (`scoring.store.annotations` keeps the file).

The log is re-read whenever its size or mtime changes, so a tag saved in another session
shows up on the next rerun; it never touches the store's cached tables.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import common as C
from dashboard import state as S
from scoring.store import annotations as A

UNTAGGED = "(untagged)"


def _stamp(store: str) -> str:
    try:
        s = os.stat(A.annotations_path(store))
        return f"{s.st_mtime_ns}:{s.st_size}"
    except OSError:
        return "-"


@st.cache_data(show_spinner=False, max_entries=8)
def _read(store: str, stamp: str) -> tuple[dict, list[str]]:
    return A.read_annotations(store)


def current(c: C.Ctx) -> dict[str, A.Annotation]:
    """{episode_id: Annotation} of the shown store; bad lines are shown once as a toast."""
    got, problems = _read(c.data.path, _stamp(c.data.path))
    seen = st.session_state.setdefault("_annotation_problems", set())
    for p in problems:
        if p not in seen:
            seen.add(p)
            st.toast(p, icon=":material/warning:")
    return got


def tag_options(c: C.Ctx) -> list[str]:
    """Tags in use in this store (for the filter), then UNTAGGED."""
    return list(A.all_tags(current(c))) + [UNTAGGED]


def tag_mask(c: C.Ctx, tags) -> np.ndarray:
    """(N,) bool: episodes carrying any of `tags` (UNTAGGED: episodes without a tag); all when empty."""
    ids = c.v.frame["episode_id"]
    if not tags:
        return np.ones(len(ids), dtype=bool)
    ann = current(c)
    want = set(tags) - {UNTAGGED}
    tagged = {eid for eid, a in ann.items() if want & set(a.tags)}
    mask = ids.isin(tagged).to_numpy().copy()
    if UNTAGGED in tags:
        mask |= ~ids.isin({eid for eid, a in ann.items() if a.tags}).to_numpy()
    return mask


def filtered_mask(c: C.Ctx) -> np.ndarray:
    """The Episodes filters (including tags) as one mask: what the Episodes table, its CSV and the
    detail page's chooser show."""
    return C.D.filter_mask(c.data, c.v, S.filters()) & tag_mask(c, S.get("tags") or [])


def with_annotations(c: C.Ctx, table: pd.DataFrame) -> pd.DataFrame:
    """`table` (with an episode_id column) plus tags and note columns."""
    tags, notes = A.annotation_columns(current(c), table["episode_id"])
    out = table.copy()
    out["tags"] = tags
    out["note"] = notes
    return out


def _save(c: C.Ctx, eid: str) -> None:
    tags = st.session_state.get(f"w.tags:{eid}") or []
    note = st.session_state.get(f"w.note:{eid}") or ""
    try:
        A.save_annotation(c.data.path, eid, tags=tags, note=note)
        st.session_state["_annotation_saved"] = eid
        st.session_state.pop("_annotation_error", None)
    except A.AnnotationError as exc:
        st.session_state["_annotation_error"] = str(exc)


def editor_ui(c: C.Ctx, eid: str) -> None:
    """The detail page's tag multiselect (suggested tags plus any new one) and note, saved on change."""
    ann = current(c).get(eid) or A.Annotation(eid)
    tkey, nkey = f"w.tags:{eid}", f"w.note:{eid}"
    if tkey not in st.session_state:
        st.session_state[tkey] = list(ann.tags)
    if nkey not in st.session_state:
        st.session_state[nkey] = ann.note
    options = list(dict.fromkeys([*A.suggested_tags(), *A.all_tags(current(c)), *st.session_state[tkey]]))
    with st.container(border=True):
        left, right = st.columns([1, 1.4])
        left.multiselect("Tags", options, key=tkey, accept_new_options=True, on_change=_save, args=(c, eid),
                         placeholder="add a tag (type a new one and press Enter)",
                         help=f"saved on change to {A.ANNOTATIONS} beside the run store; kept when the store is "
                              "re-scored; filter by them on the Episodes page")
        right.text_area("Note", key=nkey, on_change=_save, args=(c, eid), height=68,
                        placeholder="free text, saved when you leave the box (Ctrl+Enter)")
        err = st.session_state.get("_annotation_error")
        if err:
            st.error(err, icon=":material/block:")
        elif st.session_state.get("_annotation_saved") == eid:
            st.caption(f":material/check: Saved to `{A.annotations_path(c.data.path)}`.")
