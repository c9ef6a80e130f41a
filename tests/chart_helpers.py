"""What the chart tests read from an Altair spec, and the two-model cell table they draw."""

from __future__ import annotations

import pandas as pd


def chart_rows(spec: dict, layer: dict | None = None) -> list[dict]:
    """The embedded rows a (layer of a) chart draws."""
    src = (layer or spec).get("data") or spec.get("data")
    if src is None:  # the base data of a layered chart sits on its first data-carrying layer
        src = next(lay["data"] for lay in spec["layer"] if "data" in lay)
    return spec["datasets"][src["name"]]


def chart_marks(spec: dict) -> list[str]:
    return [lay["mark"]["type"] if isinstance(lay["mark"], dict) else lay["mark"] for lay in spec["layer"]]


def two_model_cells() -> pd.DataFrame:
    """Cells of models a and b on suites s1 and s2, with Wilson-like intervals."""
    return pd.DataFrame({
        "model": ["a", "a", "b", "b"], "suite": ["s1", "s2", "s1", "s2"], "n": [10, 10, 10, 10],
        "sr": [0.9, 0.5, 0.8, 0.4], "sr_lo": [0.6, 0.2, 0.5, 0.1], "sr_hi": [0.98, 0.8, 0.95, 0.7],
        "safety": [0.3, 0.9, 0.6, 0.5], "safety_lo": [0.1, 0.6, 0.3, 0.2], "safety_hi": [0.6, 0.98, 0.85, 0.8],
        "sbu": [0.6, 0.1, 0.3, 0.2]})
