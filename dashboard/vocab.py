"""Tables as a reader sees them: readable headers (`scoring.report.display.column_label`, data in
assets/display.yaml), empty cells where a value is missing, key columns first and
pinned, and deltas coloured by whether they are safer.

`table(df, ...)` is `st.dataframe` for every page; `shown_frame` and `header_config` are
pure, so tests check them without Streamlit. Row selections still index `df`'s rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from scoring.report.display import column_label

# a delta column -> +1 when a rise is safer (green), -1 when it is less safe (red)
SAFER_WHEN = {"d_sr": +1, "d_safety": +1, "d_sbu": -1, "d_p_unsafe_given_success": -1, "d_vsi": -1,
              "Δ SR pp": +1, "Δ Safety pp": +1, "Δ SBU pp": -1, "Δ P[U|S] pp": -1, "Δ VSI": -1}
SAFER_RGB, LESS_SAFE_RGB = "#1a7f37", "#cf222e"  # GitHub's accessible green/red text colours


def _missing(values: pd.Series) -> np.ndarray:
    return pd.isna(values).to_numpy(bool) | values.astype(str).isin(["None", "nan", "NaN", "<NA>"]).to_numpy(bool)


def _number_text(x, fmt: str | None) -> str:
    if fmt and fmt.startswith("%"):
        try:
            return fmt % (int(x) if "d" in fmt else float(x))
        except (TypeError, ValueError):
            return str(x)
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def shown_frame(df: pd.DataFrame, *, formats: Mapping[str, str] | None = None) -> pd.DataFrame:
    """`df` with missing cells (None, NaN) as empty text. A numeric column with gaps becomes
    text in its `formats` printf format ("%d", "%.3g"; else 4 significant digits), since the
    grid would print "None" in a numeric cell."""
    formats = dict(formats or {})
    out = df.copy()
    for col in out.columns:
        s = out[col]
        gaps = _missing(s)
        if not gaps.any():
            continue
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            out[col] = ["" if g else _number_text(x, formats.get(col)) for x, g in zip(s.to_numpy(), gaps)]
        else:
            out[col] = ["" if g else x for x, g in zip(s.astype(object).to_numpy(), gaps)]
    return out


def header_config(df: pd.DataFrame, shown: pd.DataFrame, column_config: Mapping | None = None, *,
                  pinned: Sequence[str] = ()) -> dict:
    """A column config naming every column readably. Explicit configs keep their own label
    (or get the readable one); a number/progress config on a column `shown_frame` turned
    into text becomes a text column with the same label and help; `pinned` columns stay
    in view when the table scrolls sideways."""
    import streamlit as st

    out: dict = {}
    for col in df.columns:
        cfg = (column_config or {}).get(col)
        if cfg is None or isinstance(cfg, str):
            cfg = st.column_config.Column(cfg or column_label(col))
        else:
            cfg = dict(cfg)
            cfg["label"] = cfg.get("label") or column_label(col)
            typ = (cfg.get("type_config") or {}).get("type")
            if typ in ("number", "progress") and not pd.api.types.is_numeric_dtype(shown[col]):
                cfg = dict(st.column_config.TextColumn(cfg["label"], help=cfg.get("help"), width=cfg.get("width")))
        if col in pinned:
            cfg = {**dict(cfg), "pinned": True}
        out[col] = cfg
    return out


def key_columns_first(columns: Sequence[str], first: Sequence[str]) -> list[str]:
    """`columns` with those of `first` moved to the front (in `first`'s order)."""
    lead = [c for c in first if c in columns]
    return lead + [c for c in columns if c not in lead]


def signed_colour(value, sign: int) -> str:
    """CSS for a difference `value` ("+26.7", "−0.120" or a number) under `sign` (+1: a rise
    is safer/better, -1: a fall is): green when it goes the good way, red when the bad way,
    none when it is 0, not a number, or `sign` is 0."""
    try:
        x = float(str(value).replace("+", "").replace("−", "-"))
    except ValueError:
        return ""
    if not sign or not np.isfinite(x) or abs(x) < 1e-12:
        return ""
    return f"color: {SAFER_RGB if x * sign > 0 else LESS_SAFE_RGB}; font-weight: 600"


def delta_colour(name: str, value) -> str:
    """CSS for a delta cell: green when the change is safer, red when less safe, none when 0."""
    return signed_colour(value, SAFER_WHEN.get(name, 0))


def row_sign(metric: str) -> int:
    """+1 for a metric labelled "(higher is better)", -1 for "(lower is better)", else 0:
    the sign rule of a difference column whose metric changes from row to row (Compare)."""
    text = str(metric)
    return +1 if "higher is better" in text else -1 if "lower is better" in text else 0


def row_delta_colours(shown: pd.DataFrame, delta: str, metric: str) -> pd.DataFrame:
    """CSS per cell: `delta` coloured green where it favours the row's first model (A) under
    the row's `metric` sign rule (`row_sign`), red where it favours B; other cells plain."""
    css = pd.DataFrame("", index=shown.index, columns=shown.columns)
    signs = shown[metric].map(row_sign)
    css[delta] = [signed_colour(value, sign) for value, sign in zip(shown[delta], signs)]
    return css


def table(df: pd.DataFrame, *, column_config: Mapping | None = None, formats: Mapping[str, str] | None = None,
          first: Sequence[str] = (), pinned: Sequence[str] = (), row_delta: tuple[str, str] | None = None, **kw):
    """`st.dataframe(df)` with readable headers, empty missing cells, `first` columns in
    front, `pinned` columns fixed, and delta columns (`SAFER_WHEN`) coloured; `row_delta`
    = (difference column, metric column) colours a difference by each row's metric."""
    import streamlit as st

    shown = shown_frame(df, formats=formats)
    if first:
        shown = shown[key_columns_first(list(shown.columns), first)]
    cfg = header_config(shown, shown, column_config, pinned=pinned)
    deltas = [c for c in shown.columns if c in SAFER_WHEN]
    data = shown
    if deltas:
        data = shown.style
        for c in deltas:
            data = data.map(lambda x, c=c: delta_colour(c, x), subset=[c])
    if row_delta and all(c in shown.columns for c in row_delta):
        data = data if deltas else shown.style
        data = data.apply(lambda frame: row_delta_colours(frame, *row_delta), axis=None)
    return st.dataframe(data, column_config=cfg, **kw)
