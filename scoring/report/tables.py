"""Paper tables from a run store: 4/5 (main), 7/8 (per-spec rates), 9 (threshold
sensitivity), 10/11 (SBU composition) and 12 (per-task Wilson), as CSV, Markdown, LaTeX.

Each builder returns a DataFrame of display strings (percent with one decimal, CIs in
brackets, "—" for inactive cells); `write_tables` writes all of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from scoring.records.io import atomic_write_bytes
from scoring.registry.lookup import Registry, load_registry
from scoring.report.provenance import made_with
from scoring.report.readings import Reading
from scoring.report.sensitivity import sensitivity_means
from scoring.report.table_render import latex_escape
from scoring.stats.metrics import aggregate, sbu_composition, spec_rates, unsettled_mask

DASH = "—"
SHORT = {
    "arm_furniture_force": "arm-furn", "target_furniture_force": "obj-furn", "max_contact_force": "max-force",
    "non_target_max_disp": "bystander", "held_object_tilt_world": "held-tilt",
    "stable_grasp_maintained": "grasp-slip", "joint_torque": "torque", "self_collision_free": "self-coll",
}


def pct(x: float, digits: int = 1) -> str:
    return DASH if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}"


def ci_pct(lo: float, hi: float) -> str:
    return DASH if math.isnan(lo) else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def _cell_label(spec) -> str:
    """Column label in the paper's style: disp@5mm, grasp-slip@2cm, torque@1x limit."""
    name = SHORT.get(spec.family, spec.family)
    if spec.binary:
        return name
    value = abs(spec.threshold)
    if spec.unit == "m":
        text = f"{value * 100:g}cm" if value >= 0.01 else f"{value * 1000:g}mm"
    elif spec.unit == "ratio":
        text = f"{value:g}x limit"
    else:
        text = f"{value:g}{ {'deg': '°'}.get(spec.unit, spec.unit)}"
    return f"{name}@{text}"


def main_table(episodes: pd.DataFrame, *, by: Sequence[str] = ("model", "suite"), ci: bool = True,
               seed: int = 0) -> pd.DataFrame:
    """Tables 4/5: per cell n, SR, Safety, SBU, P[U|S] (percent, Wilson CI) and VSI (bootstrap CI)."""
    agg = aggregate(episodes, by=by, ci=ci, seed=seed)
    out = agg[list(by)].copy()
    out["n"] = agg["n"]
    for name, label in (("sr", "SR %"), ("safety", "Safety %"), ("sbu", "SBU %"), ("p_unsafe_given_success", "P[U|S] %")):
        out[label] = [pct(v) for v in agg[name]]
        out[f"{label} CI"] = [ci_pct(lo, hi) for lo, hi in zip(agg[f"{name}_lo"], agg[f"{name}_hi"])]
    out["VSI"] = [f"{v:.3f}" for v in agg["vsi"]]
    out["VSI CI"] = [DASH if math.isnan(lo) else f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(agg["vsi_lo"], agg["vsi_hi"])]
    out["VSI|U"] = [DASH if math.isnan(v) else f"{v:.3f}" for v in agg["vsi_u"]]
    return out


def spec_rate_table(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry,
                    by: Sequence[str] = ("model", "suite")) -> pd.DataFrame:
    """Tables 7/8: per-cell violation rate of each scored family ("—" if never active); a row
    per cell that was run (a model never run on a suite has no row)."""
    rates = spec_rates(episodes, spec_results, by=by, ci=False, families=registry.families)
    wide = rates.pivot_table(index=list(by), columns="family", values="rate", aggfunc="first", dropna=False)
    run = episodes.groupby(list(by), sort=True).size().index
    wide = wide.reindex(index=run, columns=list(registry.families))
    out = wide.reset_index()
    for fam in registry.families:
        out[fam] = [DASH if pd.isna(v) else f"{100 * v:.1f}%" for v in wide[fam].to_numpy()]
    return out.rename(columns={f: _cell_label(registry.spec(f)) for f in registry.families})


def sensitivity_table(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry,
                      by: Sequence[str] = ("model", "suite"), vsi_saturation: str = "eq1") -> pd.DataFrame:
    """Table 9: Safety, SBU, P[U|S], VSI per threshold variant, as means over the cells of each
    host (`scoring.report.sensitivity`).

    `vsi_saturation` is the VSI reading of the report (the default row then equals Table 4's
    means under it); applicability comes with `spec_results`' active flags.
    """
    means = sensitivity_means(episodes, spec_results, registry=registry, by=by, vsi_saturation=vsi_saturation)
    rows = []
    for _, g in means.groupby("variant", sort=False):
        row = {"variant": g["label"].iloc[0]}
        for r in g.itertuples():
            row[f"{r.host} Safety"] = pct(r.safety)
            row[f"{r.host} SBU"] = pct(r.sbu)
            row[f"{r.host} P[U|S]"] = pct(r.p_unsafe_given_success)
            row[f"{r.host} VSI"] = f"{r.vsi:.3f}"
        rows.append(row)
    return pd.DataFrame(rows)


def composition_table(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry,
                      by: Sequence[str] = ("model", "suite")) -> pd.DataFrame:
    """Tables 10/11: per cell, SBU% (n/total) and each violated family's share."""
    comp = sbu_composition(episodes, spec_results, by=by)
    rows = []
    for key, g in episodes.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        n, k = len(g), int(g["sbu"].sum())
        sel = comp
        for col, val in zip(by, key):
            sel = sel[sel[col] == val]
        parts = [f"{_cell_label(registry.spec(f)) if f in registry.families else f} {100 * s:.0f}%"
                 for f, s in zip(sel["family"], sel["share"])]
        row = dict(zip(by, key))
        row["SBU"] = f"{100 * k / n:.1f}% ({k}/{n})"
        row["composition"] = "; ".join(parts) if parts else "(no spec-violations)"
        rows.append(row)
    return pd.DataFrame(rows)


def per_task_table(episodes: pd.DataFrame, *, by: Sequence[str] = ("model", "suite")) -> pd.DataFrame:
    """Table 12: per task n, SR% and Safety% with Wilson 95% CIs, plus the cell aggregate."""
    rows = []
    tasks = aggregate(episodes, by=[*by, "task_id"], ci=False)
    cells = aggregate(episodes, by=by, ci=False)
    for _, cell in cells.iterrows():
        sel = tasks
        for col in by:
            sel = sel[sel[col] == cell[col]]
        sel = sel.iloc[sorted(range(len(sel)), key=lambda i: _task_order(sel["task_id"].iloc[i]))]
        for _, r in [*sel.iterrows(), (None, cell)]:
            row = {col: cell[col] for col in by}
            row["task"] = r["task_id"] if "task_id" in r and isinstance(r.get("task_id"), str) else "aggregate"
            row.update({"n": int(r["n"]), "SR %": pct(r["sr"]), "SR Wilson 95% CI": ci_pct(r["sr_lo"], r["sr_hi"]),
                        "Safety %": pct(r["safety"]),
                        "Safety Wilson 95% CI": ci_pct(r["safety_lo"], r["safety_hi"])})
            rows.append(row)
    return pd.DataFrame(rows)


def closest_call_table(episodes: pd.DataFrame, *, by: Sequence[str] = ("model", "suite")) -> pd.DataFrame:
    """Closest calls of the safe episodes per cell: which spec came nearest its threshold.

    Not violations: a safe episode's closest call is the active graded spec with the
    smallest rho / |threshold| (`scoring.evaluate.score.EpisodeOutcome`). Per cell and family: how
    many safe episodes had it as their closest call, and the median and minimum
    normalised margin (share of the threshold left).
    """
    cols = [*by, "closest call", "safe episodes", "median margin %", "min margin %"]
    if "closest_spec" not in episodes.columns:
        return pd.DataFrame(columns=cols)
    safe = episodes[episodes["safe"].to_numpy(bool) & episodes["closest_spec"].notna().to_numpy()]
    rows = []
    for key, g in safe.groupby([*by, "closest_spec"], sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        margin = g["closest_margin"].to_numpy(float)
        rows.append({**dict(zip(by, key[:-1])), "closest call": SHORT.get(key[-1], key[-1]), "safe episodes": len(g),
                     "median margin %": pct(float(np.median(margin))), "min margin %": pct(float(margin.min()))})
    return pd.DataFrame(rows, columns=cols)


def _task_order(task_id: str):
    head, _, tail = task_id.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (task_id, -1)


_NUMERIC = re.compile(r"^-?\d+(\.\d+)?%?$")


def to_markdown(df: pd.DataFrame) -> str:
    """GitHub Markdown with the cells exactly as formatted (tabulate's number parsing would
    print 100.0 as 100 and 0.300 as 0.3); numeric columns right-aligned, '|' escaped."""
    def esc(x) -> str:
        return str(x).replace("|", "\\|")

    cells = df.astype(str)
    align = ["right" if len(cells) and cells[c].map(lambda v: bool(_NUMERIC.match(v)) or v == DASH).all()
             and cells[c].map(lambda v: v != DASH).any() else "left" for c in cells.columns]
    return cells.map(esc).rename(columns=esc).to_markdown(index=False, disable_numparse=True, colalign=align)


def to_latex(df: pd.DataFrame, caption: str = "") -> str:
    # "%" in "SR %" would start a LaTeX comment, and "τ=87N·m" needs math mode: the paper layouts'
    # escaping, for headers, cells and caption alike
    def esc(x) -> str:
        return latex_escape(str(x))

    styler = df.style.hide(axis="index").format(esc).format_index(esc, axis=1)
    return styler.to_latex(caption=latex_escape(caption) if caption else None, hrules=True,
                           column_format="l" * len(df.columns))


def build_tables(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry | None = None,
                 by: Sequence[str] = ("model", "suite"), seed: int = 0,
                 reading: Reading = Reading()) -> dict[str, tuple[str, pd.DataFrame]]:
    """All report tables: name -> (caption, table).

    `episodes` and `spec_results` are already under `reading` (`apply_reading`); Table 9
    re-scores its thresholds with the reading's VSI saturation. Every caption names the
    rollout protocol, the force and torque sampling and the reading. Episodes whose scene
    never came to rest (`settled` false) are left out of every table, and every caption
    ends with a footnote that counts them.
    """
    reg = registry or load_registry()
    episodes, spec_results, note = exclude_unsettled(episodes, spec_results)
    note = f" {made_with(episodes, reading)}{note}"
    tables = {
        "table4_main": ("Main results per cell (Tables 4/5): SR, Safety, SBU, P[U|S] with Wilson 95% CI; VSI with "
                        "10,000-resample bootstrap 95% CI.", main_table(episodes, by=by, seed=seed)),
        "table7_spec_rates": ("Per-spec violation rate (Tables 7/8); — = inactive for the cell.",
                              spec_rate_table(episodes, spec_results, registry=reg, by=by)),
        "table9_sensitivity": ("Threshold sensitivity (Table 9): means over cells per host.",
                               sensitivity_table(episodes, spec_results, registry=reg, by=by,
                                                 vsi_saturation=reading.vsi_saturation)),
        "table10_sbu_composition": ("SBU spec composition (Tables 10/11).",
                                    composition_table(episodes, spec_results, registry=reg, by=by)),
        "table12_per_task": ("Per-task SR and Safety with Wilson 95% CI (Table 12).", per_task_table(episodes, by=by)),
        "closest_calls": ("Closest calls of safe episodes (not violations): the spec nearest its threshold by "
                          "rho / |threshold|, with the share of the threshold left.",
                          closest_call_table(episodes, by=by)),
    }
    return {name: (caption + note, df) for name, (caption, df) in tables.items()}


def exclude_unsettled(episodes: pd.DataFrame, spec_results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(episodes, spec_results) without unsettled-start episodes, and the footnote ("" if none)."""
    drop = unsettled_mask(episodes)
    if not drop.any():
        return episodes, spec_results, ""
    ids = episodes["episode_id"][drop]
    note = (f" Note: {int(drop.sum())} episode(s) excluded because the scene was not at rest at step 0 "
            f"(settled = false in the store; their verdicts would measure the scene's own motion): "
            f"{', '.join(ids.astype(str).head(5))}{' ...' if len(ids) > 5 else ''}.")
    keep = spec_results["episode_id"].isin(set(episodes["episode_id"][~drop]))
    return episodes[~drop], spec_results[keep], note


def write_tables(tables: dict[str, tuple[str, pd.DataFrame]], out_dir: str | Path) -> list[Path]:
    """Writes every table as .csv, .md and .tex into `out_dir` (atomically); returns the paths."""
    out_dir = Path(out_dir)
    written = []
    for name, (caption, df) in tables.items():
        for suffix, text in ((".csv", df.to_csv(index=False)), (".md", f"{caption}\n\n{to_markdown(df)}\n"),
                             (".tex", to_latex(df, caption))):
            path = out_dir / f"{name}{suffix}"
            atomic_write_bytes(path, text.encode())
            written.append(path)
    return written
