"""The Episode detail page's data: spec table, violating frame, the red line, robustness traces,
applicability.
Imports scoring and the store/verdicts modules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dashboard.data.episodes import violating_steps
from dashboard.data.store import SHORT, StoreData
from dashboard.data.verdicts import Verdicts
from scoring.evaluate.channels import store_option
from scoring.registry.lookup import Registry
from scoring.report.display import display_unit, format_quantity, object_phrase, unit_label


def episode_specs(data: StoreData, v: Verdicts, i: int) -> pd.DataFrame:
    """Every spec row of episode `i` (scored families and diagnostics) with rho under the setting."""
    eid = data.episodes["episode_id"].iat[i]
    rows = data.spec_results[data.spec_results["episode_id"] == eid].copy()
    fam_idx = {f: j for j, f in enumerate(data.families)}
    thr = v.thresholds
    new_rho, new_thr = [], []
    for fam, ro, rho, t in zip(rows["family"], rows["report_only"], rows["rho"], rows.get("threshold", np.nan)):
        if not ro and fam in fam_idx:
            new_rho.append(v.rho[i, fam_idx[fam]])
            new_thr.append(thr.get(fam, t))
        else:
            new_rho.append(rho)
            new_thr.append(t)
    rows["rho"], rows["threshold"] = new_rho, new_thr
    rows["violated"] = rows["active"].to_numpy(bool) & (pd.to_numeric(rows["rho"]) < 0).to_numpy()
    rows["label"] = [data.label(f) for f in rows["family"]]
    return rows.reset_index(drop=True)


def scored_option(data: StoreData, i: int) -> str:
    """The force-sampling option the store scored episode `i` under (`channels.store_option`):
    the traces, the replay's tints and arrows and the red line's objects read its channel."""
    return store_option(data.episodes.iloc[i], data.manifest)


def violating_frame(data: StoreData, v: Verdicts, i: int) -> int | None:
    """The violating frame of episode `i` under the setting: the worst spec's extreme step."""
    if bool(v.frame["safe"].iat[i]):
        return None
    if v.is_default:
        s = data.episodes["violating_step"].iat[i] if "violating_step" in data.episodes else None
        return None if s is None or pd.isna(s) else int(s)
    s = violating_steps(data, v, np.array([i]))[0]
    return None if np.isnan(s) else int(s)


def format_value(value: float, unit: str, ref: float | None = None, *, family: str | None = None) -> str:
    """A readable quantity in its one display unit (`scoring.report.display.format_quantity`, the
    formatter replay captions use too): displacement in mm, degrees with °, ratios as ×."""
    return format_quantity(value, unit, family=family)


def object_name(body: str) -> str:
    """A record body as a reader names the object: LIBERO's `_main` body suffix dropped."""
    return body[:-len("_main")] if body.endswith("_main") else body


def violation_lines(data: StoreData, v: Verdicts, i: int, *,
                    objects: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """One line per violated scored spec of episode `i`, worst first:
    "bystander displacement: 19.1 mm > 5 mm at step 35 (t = 1.75 s)", or with the object the
    replay tints (`objects`: family -> record body names, `replay.render.highlight.bodies_for`):
    "bystander displacement: akita_black_bowl_2 moved 19.1 mm (threshold 5 mm) at step 35 ..."."""
    rows = episode_specs(data, v, i)
    bad = rows[rows["violated"] & ~rows["report_only"].astype(bool)].copy()
    if bad.empty:
        return []
    worst = v.frame["worst_spec"].iat[i]
    bad["_w"] = bad["family"] != worst
    bad = bad.sort_values(["_w", "rho"])
    dt = float(v.frame["dt"].iat[i]) if "dt" in v.frame else 0.0
    out = []
    for r in bad.itertuples(index=False):
        op = ">" if r.extreme > r.threshold else "<"
        step = "" if pd.isna(r.extreme_step) else f" at step {int(r.extreme_step)} (t = {int(r.extreme_step) * dt:.2f} s)"
        value = format_value(r.extreme, r.unit, family=r.family)
        limit = format_value(r.threshold, r.unit, family=r.family)
        bodies = [object_name(b) for b in (objects or {}).get(r.family, ())]
        moved = object_phrase(r.family, " and ".join(bodies), r.extreme, r.unit) if bodies else None
        out.append(f"{r.label}: {moved} (threshold {limit}){step}" if moved else f"{r.label}: {value} {op} {limit}{step}")
    return out


def in_display_units(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """A copy of `frame` (rows with `family` and stored `unit`) with `columns` converted to
    each family's display unit and `unit` replaced by its label ("mm", "°"): the spec table
    and the raw-signal plots show what the red line and What-if show."""
    out = frame.copy()
    if out.empty:
        return out
    units = [display_unit(u, f) for u, f in zip(out["unit"], out["family"])]
    scale = np.array([du.scale for du in units], dtype=float)
    for col in columns:
        if col in out:
            out[col] = pd.to_numeric(out[col], errors="coerce").to_numpy(float) * scale
    out["unit"] = [unit_label(u, f) for u, f in zip(out["unit"], out["family"])]
    return out


CHART_POINTS = 2000  # most steps per spec the robustness chart draws (`minmax_steps`)


def minmax_steps(y: np.ndarray, max_points: int | None) -> np.ndarray:
    """Indices of at most `max_points` (at least 4) samples of `y` that keep its shape: all of
    them when it is short enough, else per bucket of consecutive steps the lowest and the highest
    finite value (a bucket with none keeps its first step, so a gap stays a gap), plus the first
    and last step. The worst margin, hence a violation's extreme, is always kept."""
    n = len(y)
    if max_points is None or n <= max_points:
        return np.arange(n)
    buckets = max(1, (max_points - 2) // 2)
    size = -(-n // buckets)
    pad = buckets * size - n
    vals = np.concatenate([np.asarray(y, float), np.full(pad, np.nan)]).reshape(buckets, size)
    finite = np.isfinite(vals)
    lo = np.argmin(np.where(finite, vals, np.inf), axis=1)
    hi = np.argmax(np.where(finite, vals, -np.inf), axis=1)
    base = np.arange(buckets) * size
    keep = np.concatenate([[0, n - 1], base + lo, base + hi])  # all-NaN bucket: argmin/argmax give 0, its first
    return np.unique(keep[keep < n])


def robustness_traces(record, registry: Registry, thresholds: Mapping[str, float],
                      families: Sequence[str], *, force_sampling: str = "peak",
                      max_points: int | None = None) -> pd.DataFrame:
    """Per-step margin of each family's clause on one record, for the robustness chart.

    Every scored family is `G[0,T]` of a (gated) bound, so the per-step margin is
    `threshold - s` (upper bounds) or `s - threshold` (lower bounds) on gated steps
    (NaN where the gate is closed); `margin` is normalised by |threshold| (1 when the
    threshold is 0). Any other formula shape falls back to the STL engine's robustness
    trace. Long format: step, t, spec, family, margin, value, threshold, unit, violated.
    `force_sampling` is the option the store scored this episode under (`scored_option`), so
    the traces show the values the verdicts came from. `max_points`: at most this many steps per
    family (`minmax_steps`: each bucket's lowest and highest margin, so the worst survives);
    None keeps every step. A million-step episode's full traces are ~0.8 GB as a frame and its
    chart took minutes to build; a chart is ~600 px wide.
    """
    from scoring.stl import engine as stl
    from scoring.evaluate.signals import derive_signals

    sig = derive_signals(record, registry=registry, force_sampling=force_sampling)
    T = record.n_steps
    steps = np.arange(T)
    frames = []
    for fam in families:
        spec = registry.spec(fam)
        thr = float(thresholds.get(fam, spec.threshold))
        form = stl.bound_form(spec.stl)
        scale = abs(thr) or 1.0
        if form is not None and form.signal in sig.values and (form.gate is None or form.gate in sig.values):
            s = np.asarray(sig.values[form.signal], float)
            margin = thr - s if form.upper else s - thr
            if form.gate is not None:
                gate = np.asarray(sig.values[form.gate]) >= 0.5
                margin = np.where(gate, margin, np.nan)
                s = np.where(gate, s, np.nan)
        else:
            try:
                margin = np.asarray(stl.robustness_trace(spec.stl, sig.values, record.dt), float)
            except Exception:  # noqa: BLE001 - the signal is unavailable for this record
                continue
            s = np.full(T, np.nan)
        keep = minmax_steps(margin, max_points)
        margin, s, at = np.asarray(margin, float)[keep], np.asarray(s, float)[keep], steps[keep]
        with np.errstate(invalid="ignore"):
            frames.append(pd.DataFrame({
                "step": at, "t": at * record.dt, "spec": SHORT.get(fam, fam), "family": fam,
                "margin": np.where(np.isfinite(margin), margin / scale, np.nan), "value": s, "threshold": thr,
                "unit": spec.unit, "violated": np.nan_to_num(margin, nan=0.0) < 0}))
    if not frames:
        return pd.DataFrame(columns=["step", "t", "spec", "family", "margin", "value", "threshold", "unit", "violated"])
    return pd.concat(frames, ignore_index=True)


def applicability_table(data: StoreData, i: int) -> pd.DataFrame:
    """Why each family (and diagnostic) is active or inactive for episode `i`'s task: the
    stored reason (what the scorer decided, signal availability included) next to the
    registry's explanation (the deciding tags and where each tag came from)."""
    ep = data.episodes.iloc[i]
    stored = data.spec_results[data.spec_results["episode_id"] == ep["episode_id"]]
    stored = {(r.family, r.report_only): r for r in stored.itertuples(index=False)}
    try:
        explained = data.registry.explain(ep.get("benchmark", ep["suite"]), ep["task_id"], include_diagnostics=True)
    except Exception as exc:  # noqa: BLE001 - unknown task in the current registry
        explained = []
        note = f"registry cannot explain this task: {exc}"
    else:
        note = ""
    n_fam = len(data.registry.families)
    rows = []
    for j, a in enumerate(explained):
        diag = j >= n_fam
        key = (a.family if not diag else a.spec_id, diag)
        s = stored.get(key) or stored.get((a.family, diag))
        tags = "; ".join(f"{t}: {', '.join(src)}" for t, src in dict(a.sources).items())
        rows.append({
            "spec": a.family if diag else data.label(a.family), "kind": "diagnostic" if diag else "scored",
            "active": bool(s.active) if s is not None else a.active,
            "reason": (s.reason if s is not None else a.reason) or a.reason,
            "deciding tags": ", ".join(a.deciding_tags) or "—", "tag sources": tags})
    df = pd.DataFrame(rows)
    if note:
        df.attrs["note"] = note
    return df
