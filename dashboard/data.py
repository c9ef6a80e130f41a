"""The dashboard's data layer: load a run store once, re-score it under what-if thresholds,
filter it, and shape `scoring`'s numbers for the pages and charts.

Every number comes from `scoring` (`load_store`, `WhatIf`, `aggregate`, `spec_rates`,
`sbu_composition`, `outcome_class`, `main_table`, signal derivation); this module only
selects, joins and reshapes. The functions here are pure (no Streamlit), so tests and
the benchmark call them directly; `dashboard.cache` wraps them in Streamlit caches.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd

from scoring.display import display_unit, format_quantity, object_phrase, unit_label
from scoring.errors import SafeVLAError
from scoring.metrics import aggregate, outcome_class, sbu_composition_matrix, spec_rates_matrix, unsettled_mask
from scoring.registry import Registry, load_registry
from scoring.store import load_store
from scoring.store_paths import is_inside, store_roots
from scoring.whatif import WhatIf

OUTCOMES = ("SBU", "safe success", "unsafe failure", "safe failure")
BY = ("model", "suite")
REQUIRED_EPISODE_COLUMNS = ("episode_id", "model", "suite", "task_id", "success", "safe", "sbu", "vsi")
REQUIRED_SPEC_COLUMNS = ("episode_id", "family", "report_only", "active", "rho", "extreme", "extreme_step")
# the registry's human name of each family, the one name the dashboard, clips and figures show
SHORT = {spec.family: spec.name for spec in load_registry().specs}


class StoreProblem(SafeVLAError):
    """A run store the dashboard cannot show; the message says what is wrong and what to do."""


# ----------------------------------------------------------------------------- knobs

@dataclasses.dataclass(frozen=True)
class Knob:
    """One what-if slider: a user-facing unit over one or more families' thresholds.

    threshold = sign * value / per (division keeps decimal values exact: 5 mm -> 0.005).
    """

    name: str
    label: str
    families: tuple[str, ...]
    unit: str
    lo: float
    hi: float
    step: float
    per: float = 1.0
    sign: float = 1.0

    def threshold(self, value: float) -> float:
        return self.sign * float(value) / self.per

    def value(self, threshold: float) -> float:
        return float(round(self.sign * float(threshold) * self.per, 9))


KNOBS = (
    Knob("force", "Contact force", ("arm_furniture_force", "target_furniture_force", "max_contact_force"),
         "N", 25.0, 1000.0, 5.0),
    Knob("disp", "Bystander displacement", ("non_target_max_disp",), "mm", 1.0, 100.0, 0.5, per=1000.0),
    Knob("tilt", "Held-object tilt", ("held_object_tilt_world",), "deg", 5.0, 90.0, 1.0),
    Knob("slip", "Grasp slip", ("stable_grasp_maintained",), "cm", 0.5, 10.0, 0.25, per=100.0, sign=-1.0),
    Knob("torque", "Torque scale", ("joint_torque",), "x limit", 0.5, 3.0, 0.05),
)
KNOB_BY_NAME = {k.name: k for k in KNOBS}


def knob_defaults(registry: Registry) -> dict[str, float]:
    """Knob value of each knob at the registry's default thresholds."""
    out = {}
    for k in KNOBS:
        fams = [f for f in k.families if f in registry.families]
        if fams:
            out[k.name] = k.value(registry.spec(fams[0]).threshold)
    return out


def knob_overrides(registry: Registry, values: Mapping[str, float]) -> dict[str, float]:
    """Family threshold overrides for knob values; knobs at their default add nothing,
    so the default setting re-scores with the registry's exact thresholds."""
    defaults = knob_defaults(registry)
    out: dict[str, float] = {}
    for name, value in values.items():
        k = KNOB_BY_NAME.get(name)
        if k is None or name not in defaults or value is None:
            continue
        if math.isclose(float(value), defaults[name], rel_tol=0, abs_tol=1e-12):
            continue
        for fam in k.families:
            if fam in registry.families:
                out[fam] = k.threshold(value)
    return out


def preset_knobs(registry: Registry, preset: str) -> dict[str, float]:
    """Knob values of a registry preset (the paper's threshold tiers, Table 9)."""
    over = dict(registry.preset(preset).overrides)
    vals = knob_defaults(registry)
    for k in KNOBS:
        hit = [over[f] for f in k.families if f in over]
        if hit and k.name in vals:
            vals[k.name] = k.value(hit[0])
    return vals


# ----------------------------------------------------------------------------- store

@dataclasses.dataclass(eq=False)
class StoreData:
    """A loaded run store with what the pages need precomputed.

    Attributes:
      path: the store directory.  key: path plus file stamps (cache key).
      manifest, episodes, spec_results: as `scoring.store.load_store` returns them;
        `episodes` gains `outcome` (the 2x2 class) and `row` (position).
      scored: the scored (non report-only) spec rows with `_row`/`_col` indices into
        the (episodes x families) matrices.
      rho: (N, F) stored robustness, NaN where inactive.  active: (N, F) bool.
      whatif: `scoring.whatif.WhatIf` over the store.
      warnings: problems that do not stop the dashboard (registry mismatch, missing
        trajectories, synthetic data, scoring errors).
      missing_trajectory: (N,) bool: the file is absent, or refused (outside `roots`).
      roots: the resolved directories trajectory and MJCF paths may point into
        (`scoring.store_paths.store_roots`: the store and its archive).
    """

    path: str
    key: str
    manifest: dict
    episodes: pd.DataFrame
    spec_results: pd.DataFrame
    scored: pd.DataFrame
    registry: Registry
    whatif: WhatIf
    rho: np.ndarray
    active: np.ndarray
    warnings: tuple[str, ...]
    missing_trajectory: np.ndarray
    registry_matches: bool
    roots: tuple[str, ...] = ()

    @property
    def families(self) -> tuple[str, ...]:
        return self.whatif.families

    @property
    def synthetic(self) -> bool:
        return bool(self.manifest.get("synthetic"))

    def label(self, family: str) -> str:
        return SHORT.get(family, family)

    @functools.cached_property
    def choices(self) -> dict[str, frozenset]:
        """The values a link's model/suite/task filters may take (built once per store: a
        set of 20k strings per new session cost ~0.2 s)."""
        ep = self.episodes
        return {name: frozenset(str(x) for x in pd.unique(ep[col].to_numpy(object)))
                for name, col in (("models", "model"), ("suites", "suite"), ("tasks", "task_id"))}

    # (N, F) views of the scored spec rows, built on first use (what-if pages index them
    # instead of merging ~N x F spec rows on every threshold change)
    @functools.cached_property
    def present(self) -> np.ndarray:
        """(N, F) bool: the store has a scored row for (episode, family)."""
        out = np.zeros(self.rho.shape, dtype=bool)
        out[self.scored["_row"].to_numpy(), self.scored["_col"].to_numpy()] = True
        return out

    @functools.cached_property
    def depth(self) -> np.ndarray:
        """(N, F) stored VSI depth; NaN where there is no row."""
        return self._scatter("depth")

    @functools.cached_property
    def extreme_step(self) -> np.ndarray:
        """(N, F) step of each family's extreme; NaN where there is no row or no step."""
        return self._scatter("extreme_step")

    def _scatter(self, column: str) -> np.ndarray:
        out = np.full(self.rho.shape, np.nan)
        if column in self.scored:
            out[self.scored["_row"].to_numpy(), self.scored["_col"].to_numpy()] = \
                pd.to_numeric(self.scored[column]).to_numpy(float)
        return out

    def colors(self) -> dict[str, str]:
        """Spec label -> colour, the same in every chart (registry order)."""
        from dashboard.charts import spec_colors
        return spec_colors([self.label(f) for f in self.families])

    def index_of(self, episode_id: str) -> int | None:
        hit = np.flatnonzero(self.episodes["episode_id"].to_numpy() == episode_id)
        return int(hit[0]) if hit.size else None

    def trajectory_path(self, i: int) -> Path | None:
        """The episode's trajectory file; None when the store has none for it.

        Raises StoreProblem when the path points outside the store and its archive.
        """
        p = _trajectory_file(self.path, self.episodes["trajectory"].iat[i] if "trajectory" in self.episodes
                             else None)
        if p is not None and not is_inside(p, self.roots):
            raise StoreProblem(f"the trajectory of episode {self.episodes['episode_id'].iat[i]!r} points to "
                               f"{str(p)!r}, outside the run store and its archive; refused (a store may only "
                               "point at its own files)")
        return p


def check_mjcf_path(data: StoreData, rec) -> None:
    """Refuses a record whose `replay.mjcf` file lies outside the store and its archive.

    (The MJCF's own asset references are resolved against registered asset roots by
    `replay.render`; this guards the path the record itself names.)
    """
    if rec.replay is None or rec.replay.mjcf_is_xml:
        return
    from scoring.io import resolve_mjcf
    mjcf = resolve_mjcf(rec)
    if not is_inside(mjcf, data.roots):
        raise StoreProblem(f"episode {rec.episode_id!r}: replay.mjcf points to {mjcf!r}, outside the run store and "
                           "its archive; refused (a record may only name model files of its own archive)")


def _trajectory_file(store: str, rel) -> Path | None:
    if not isinstance(rel, str) or not rel:
        return None
    p = Path(rel)
    return p if p.is_absolute() else Path(store) / p


def store_stamp(path: str | os.PathLike) -> str:
    """path|mtime:size of the manifest and tables: changes when the store is re-scored."""
    parts = [str(Path(path).resolve())]
    for name in ("manifest.json", "episodes.parquet", "spec_results.parquet"):
        try:
            st = os.stat(Path(path) / name)
            parts.append(f"{name}:{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append(f"{name}:-")
    return "|".join(parts)


def open_store(path: str | os.PathLike, *, registry: Registry | None = None) -> StoreData:
    """Loads and checks a run store; raises StoreProblem with a readable cause.

    Fatal: not a directory, no manifest, corrupt manifest or Parquet, missing columns,
    no episodes. Warnings: registry hash differs from the current registry, trajectory
    files missing, synthetic store, episodes that failed scoring.
    """
    path = str(path)
    key = store_stamp(path)
    try:
        manifest, episodes, spec_results = load_store(path, allow_incomplete=True)
    except SafeVLAError as exc:
        raise StoreProblem(f"cannot open the run store {path!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - anything else from a damaged store
        raise StoreProblem(f"cannot open the run store {path!r}: {type(exc).__name__}: {exc}") from None
    if episodes.empty:
        raise StoreProblem(f"the run store {path!r} has no scored episodes; score an archive into it with "
                           "`safevla score ARCHIVE --out STORE`")
    for cols, name, df in ((REQUIRED_EPISODE_COLUMNS, "episodes.parquet", episodes),
                           (REQUIRED_SPEC_COLUMNS, "spec_results.parquet", spec_results)):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise StoreProblem(f"{name} in {path!r} lacks the column(s) {', '.join(missing)}; "
                               "re-score the archive with this version of `safevla score`")
    if episodes["episode_id"].duplicated().any():
        dup = episodes.loc[episodes["episode_id"].duplicated(), "episode_id"].iloc[0]
        raise StoreProblem(f"episodes.parquet in {path!r} lists episode {dup!r} twice; re-score the store")
    reg = registry or load_registry()
    warnings = []
    if manifest.get("incomplete"):
        warnings.append(f"Incomplete store: the `safevla score` run that wrote it stopped before its manifest. "
                        f"Complete it with `{manifest['complete_with']}`.")
    registry_matches = manifest.get("registry_hash") == reg.hash
    if not registry_matches:
        warnings.append(f"Registry mismatch: this store was scored with registry {str(manifest.get('registry_hash'))[:12]}, "
                        f"the current registry is {reg.hash[:12]}. Stored verdicts are shown as scored; what-if "
                        "re-scores use the current registry. Re-run `safevla score` to bring the store up to date.")
    episodes = episodes.reset_index(drop=True)
    episodes["outcome"] = pd.Categorical(outcome_class(episodes), categories=list(OUTCOMES))
    episodes["row"] = np.arange(len(episodes))
    try:
        whatif = WhatIf(episodes, spec_results, registry=reg)
    except Exception as exc:  # noqa: BLE001
        raise StoreProblem(f"cannot index spec_results of {path!r} against the registry: {exc}") from None
    scored = spec_results.loc[~spec_results["report_only"].to_numpy(bool)].copy()
    row = pd.Index(episodes["episode_id"]).get_indexer(scored["episode_id"])
    col = pd.Index(whatif.families).get_indexer(scored["family"])
    scored["_row"], scored["_col"] = row, col
    scored = scored[(row >= 0) & (col >= 0)]
    n, f = len(episodes), len(whatif.families)
    rho = np.full((n, f), np.nan)
    active = np.zeros((n, f), dtype=bool)
    r, c = scored["_row"].to_numpy(), scored["_col"].to_numpy()
    act = scored["active"].to_numpy(bool)
    active[r, c] = act
    rho[r[act], c[act]] = scored["rho"].to_numpy(float)[act]
    roots = store_roots(path, manifest)
    missing, outside = _missing_trajectories(path, episodes, roots)
    if outside:
        warnings.append(f"Refused trajectories: {outside} trajectory path(s) point outside the run store and its "
                        "archive; those episodes show scores only.")
    if missing.all():
        warnings.append(f"Missing trajectories: none of the {n} trajectory files referenced by the store exist "
                        "(moved or deleted archive?). Scores, tables and what-if work; robustness traces and "
                        "replays do not.")
    elif missing.any():
        warnings.append(f"Missing trajectories: {int(missing.sum())} of {n} trajectory files do not exist; "
                        "those episodes show scores only.")
    if manifest.get("synthetic"):
        warnings.append("Synthetic store: these are generated trajectories, not rollouts.")
    if manifest.get("n_errors"):
        warnings.append(f"{manifest['n_errors']} episode(s) could not be scored (see errors.json in the store).")
    return StoreData(path=path, key=key, manifest=manifest, episodes=episodes, spec_results=spec_results,
                     scored=scored, registry=reg, whatif=whatif, rho=rho, active=active, warnings=tuple(warnings),
                     missing_trajectory=missing, registry_matches=registry_matches, roots=roots)


def provenance_text(episode: Mapping[str, Any]) -> str | None:
    """How the episode's model was served, as one line ("openpi · openpi://h:8000 · replan 5 ·
    256x256 images"), or None for stores and records without provenance."""
    def present(key):
        v = episode.get(key)
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else v
    adapter, model_id = present("policy_adapter"), present("policy_model_id")
    if adapter is None and model_id is None:
        return None
    parts = [str(adapter or "unknown adapter"), str(model_id or "unknown model")]
    if present("replan_steps") is not None:
        parts.append(f"replan {int(episode['replan_steps'])}")
    parts.append(f"{episode['image_size']} images" if present("image_size") else "no camera images")
    return " · ".join(parts)


def _missing_trajectories(path: str, episodes: pd.DataFrame, roots: tuple[str, ...]) -> tuple[np.ndarray, int]:
    """((N,) bool, refused): the episode's trajectory file does not exist or lies outside
    `roots` (one directory listing per folder); how many distinct paths were refused."""
    if "trajectory" not in episodes:
        return np.ones(len(episodes), dtype=bool), 0
    rel = episodes["trajectory"].to_numpy(object)
    listing: dict[str, set] = {}
    exists: dict[str, bool] = {}
    inside: dict[str, bool] = {}
    refused = 0
    # os.path on strings, not pathlib: 20k Path objects cost ~1 s of the dashboard's cold start
    for p in pd.unique(rel):
        if not isinstance(p, str) or not p:
            continue
        folder, name = os.path.split(p if os.path.isabs(p) else os.path.join(path, p))
        if folder not in inside:  # the file's own symlink is checked when it is opened
            inside[folder] = is_inside(folder, roots)
        if not inside[folder]:
            refused += 1
            continue
        if folder not in listing:
            try:
                listing[folder] = {e.name for e in os.scandir(folder) if e.is_file()}
            except OSError:
                listing[folder] = set()
        exists[p] = name in listing[folder]
    return np.array([not exists.get(p, False) if isinstance(p, str) else True for p in rel], dtype=bool), refused


# ----------------------------------------------------------------------------- verdicts

@dataclasses.dataclass(eq=False)
class Verdicts:
    """Per-episode verdicts under one threshold setting.

    frame: `episodes` with safe/sbu/vsi/outcome/worst_spec under the setting.
    rho: (N, F) robustness; violated: (N, F) bool; overrides: family -> threshold.
    """

    overrides: dict[str, float]
    thresholds: dict[str, float]
    frame: pd.DataFrame
    rho: np.ndarray
    violated: np.ndarray

    @property
    def is_default(self) -> bool:
        return not self.overrides


def verdicts(data: StoreData, overrides: Mapping[str, float] | None = None) -> Verdicts:
    """The store's verdicts (no overrides) or `WhatIf.rescore(overrides)`'s."""
    overrides = {k: float(v) for k, v in (overrides or {}).items()}
    if not overrides:
        frame = data.episodes
        rho = data.rho
        thresholds = data.whatif.thresholds()
    else:
        r = data.whatif.rescore(overrides)
        frame = data.episodes.copy()
        frame["safe"], frame["sbu"], frame["vsi"] = r.safe, r.sbu, r.vsi
        frame["outcome"] = pd.Categorical(outcome_class(frame), categories=list(OUTCOMES))
        fams = np.array(data.families, dtype=object)
        frame["worst_spec"] = np.where(r.worst >= 0, fams[np.maximum(r.worst, 0)], None)
        frame["closest_spec"] = np.where(r.closest >= 0, fams[np.maximum(r.closest, 0)], None)
        frame["closest_margin"] = r.closest_margin
        rho, thresholds = r.rho, dict(r.thresholds)
    with np.errstate(invalid="ignore"):
        violated = rho < 0
    return Verdicts(overrides=overrides, thresholds=thresholds, frame=frame, rho=rho, violated=violated)


def spec_results_under(data: StoreData, v: Verdicts) -> pd.DataFrame:
    """The scored spec rows with `rho` under the setting (depth dropped when re-scored)."""
    cols = ["episode_id", "family", "report_only", "active", "rho", "depth"]
    sr = data.scored[cols]
    if v.is_default:
        return sr
    sr = sr.copy()
    sr["rho"] = v.rho[data.scored["_row"].to_numpy(), data.scored["_col"].to_numpy()]
    sr["depth"] = np.nan
    return sr


# ----------------------------------------------------------------------------- filters

@dataclasses.dataclass(frozen=True)
class Filters:
    """Episode filters; an empty tuple means "all". `spec_mode`: "violated" or "active".
    `scene`: one of `SCENES` (whether the scene was at rest at step 0, `replay.settle`)."""

    models: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    specs: tuple[str, ...] = ()
    spec_mode: str = "violated"
    outcomes: tuple[str, ...] = ()
    vsi: tuple[float, float] = (0.0, 1.0)
    scene: str = "all"


# scene filter -> which episodes pass: every one, settled starts only, unsettled only
SCENES = ("all", "at rest", "not at rest")
UNSETTLED_MARK = "⚠ not at rest"


def filter_mask(data: StoreData, v: Verdicts, f: Filters) -> np.ndarray:
    """(N,) bool: episodes passing every filter, under the verdicts `v`."""
    ep = v.frame
    mask = np.ones(len(ep), dtype=bool)
    for col, values in (("model", f.models), ("suite", f.suites), ("task_id", f.tasks)):
        if values:
            mask &= ep[col].isin(list(values)).to_numpy()
    if f.specs:
        cols = [data.families.index(s) for s in f.specs if s in data.families]
        matrix = v.violated if f.spec_mode == "violated" else data.active
        mask &= matrix[:, cols].any(axis=1) if cols else False
    if f.outcomes:
        mask &= ep["outcome"].isin(list(f.outcomes)).to_numpy()
    if f.scene != "all":
        unsettled = unsettled_mask(ep)
        mask &= unsettled if f.scene == "not at rest" else ~unsettled
    lo, hi = f.vsi
    if lo > 0.0 or hi < 1.0:
        vsi = ep["vsi"].to_numpy(float)
        mask &= (vsi >= lo - 1e-12) & (vsi <= hi + 1e-12)
    return mask


def outcome_counts(v: Verdicts, mask: np.ndarray | None = None) -> dict[str, int]:
    oc = v.frame["outcome"] if mask is None else v.frame["outcome"][mask]
    counts = oc.value_counts()
    return {o: int(counts.get(o, 0)) for o in OUTCOMES}


SORTS = {  # ties in VSI (it saturates at 1) go to the deeper normalised margin (`normalised_depth`)
    "VSI (worst first)": (["vsi", "_depth", "episode_id"], [False, True, True]),
    "SBU first, then VSI": (["_sbu_rank", "vsi", "_depth", "episode_id"], [True, False, True, True]),
    "episode id": (["episode_id"], [True]),
    "violating step": (["violating_step", "episode_id"], [True, True]),
    "model, suite, task": (["model", "suite", "task_id", "episode_id"], [True, True, True, True]),
}
TABLE_COLUMNS = ["episode_id", "scene", "outcome", "vsi", "worst_spec", "violating_step", "closest_call", "model",
                 "suite", "task_id", "success", "safe", "n_active", "n_steps", "language"]


def episode_table(data: StoreData, v: Verdicts, mask: np.ndarray, *, sort: str = "SBU first, then VSI",
                  limit: int | None = 2000) -> pd.DataFrame:
    """The filtered episodes, sorted, as the display table (first `limit` rows)."""
    cols, asc = SORTS.get(sort, SORTS["SBU first, then VSI"])
    ep = v.frame.loc[mask]
    keep = [c for c in TABLE_COLUMNS if c in ep.columns]
    df = ep[keep].copy()
    if unsettled_mask(v.frame).any():  # a visible marker on scenes that never came to rest
        df.insert(1, "scene", np.where(unsettled_mask(ep), UNSETTLED_MARK, ""))
    if "closest_spec" in ep.columns:  # the texts are filled in for the rows kept, below
        df.insert(df.columns.get_loc("violating_step") + 1 if "violating_step" in df else len(df.columns),
                  "closest_call", None)
    if "_sbu_rank" in cols:
        df["_sbu_rank"] = (ep["outcome"] != "SBU").to_numpy(int)
    if "_depth" in cols:
        df["_depth"] = normalised_depth(data, v, np.flatnonzero(mask))
    df = df.sort_values(cols, ascending=asc, kind="stable", na_position="last")
    if limit is not None:
        df = df.head(limit)
    if "closest_call" in df:  # only for the rows shown: a text per row of 20k cost ~50 ms a rerun
        df["closest_call"] = pd.Series(closest_call_texts(data, ep.loc[df.index]), index=df.index, dtype=object)
    df = df.drop(columns=[c for c in ("_sbu_rank", "_depth") if c in df])
    if "worst_spec" in df:
        safe = df["safe"].to_numpy(bool) if "safe" in df else np.zeros(len(df), bool)
        df["worst_spec"] = [None if s else data.label(w) if isinstance(w, str) else None
                            for w, s in zip(df["worst_spec"], safe)]
    if "violating_step" in df and not v.is_default:
        # the stored violating frame belongs to the stored verdict; re-derive it under the setting
        df["violating_step"] = violating_steps(data, v, df.index.to_numpy())
    return df.reset_index(drop=True)


def closest_call_text(label: str, margin: float) -> str:
    """How a safe episode's closest call reads: a spec and the share of its threshold left."""
    return f"{label}: closest call, {margin:.0%} of threshold left"


def closest_call_texts(data: StoreData, frame: pd.DataFrame) -> list[str | None]:
    """`closest_call_text` per row of `frame` (None for unsafe rows or when there is none)."""
    margins = frame["closest_margin"].to_numpy(float) if "closest_margin" in frame else np.full(len(frame), np.nan)
    safe = frame["safe"].to_numpy(bool)
    return [closest_call_text(data.label(s), m) if ok and isinstance(s, str) and m == m else None
            for s, m, ok in zip(frame["closest_spec"], margins, safe)]


def unsettled_note(frame: pd.DataFrame) -> str | None:
    """A one-line note when the frame holds episodes whose scene never came to rest."""
    n = int(unsettled_mask(frame).sum())
    if not n:
        return None
    return (f"{n} episode(s) started from a scene that never came to rest (marked {UNSETTLED_MARK}); "
            "the overview and `safevla report` leave them out of every cell (docs/scoring.md).")


def violating_steps(data: StoreData, v: Verdicts, rows: np.ndarray) -> np.ndarray:
    """Step of the worst spec's extreme for each row under the setting (NaN if safe)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.full(len(rows), np.nan)
    worst = v.frame["worst_spec"].to_numpy(object)[rows]
    col = pd.Index(data.families).get_indexer(pd.Index(worst, dtype=object))
    hit = (col >= 0) & ~v.frame["safe"].to_numpy(bool)[rows]
    out[hit] = data.extreme_step[rows[hit], col[hit]]
    return out


# ----------------------------------------------------------------------------- overview

def settled_frame(v: Verdicts) -> pd.DataFrame:
    """The verdict frame without unsettled-start episodes: what the report's cells count."""
    drop = unsettled_mask(v.frame)
    return v.frame[~drop] if drop.any() else v.frame


def cell_aggregates(v: Verdicts, *, by: Sequence[str] = BY, ci: bool = False, n_resamples: int = 10_000,
                    seed: int = 0) -> pd.DataFrame:
    return aggregate(settled_frame(v), by=by, ci=ci, n_resamples=n_resamples, seed=seed)


def cell_spec_rates(data: StoreData, v: Verdicts, *, by: Sequence[str] = BY) -> pd.DataFrame:
    """`spec_rates` of the settled episodes under the setting, from the (N, F) matrices
    (`spec_rates_matrix`; depth, hence NSV, is unknown once re-scored)."""
    frame = settled_frame(v)
    rows = frame["row"].to_numpy()
    depth = data.depth[rows] if v.is_default else np.full((len(rows), len(data.families)), np.nan)
    return spec_rates_matrix(frame, families=data.families, present=data.present[rows], active=data.active[rows],
                             violated=v.violated[rows], depth=depth, by=by)


def cell_composition(data: StoreData, v: Verdicts, *, by: Sequence[str] = BY) -> pd.DataFrame:
    """`sbu_composition` of the settled episodes under the setting (`sbu_composition_matrix`)."""
    frame = settled_frame(v)
    return sbu_composition_matrix(frame, families=data.families, violated=v.violated[frame["row"].to_numpy()], by=by)


CELL = ("model", "suite", "task_id")


def top_sbu(data: StoreData, v: Verdicts, n: int = 10, *, per_cell: int = 2) -> pd.DataFrame:
    """The `n` successful-but-unsafe episodes with the deepest violations: VSI first, ties
    (VSI saturates at 1) broken by the deepest threshold-normalised margin, and spread over
    cells (`spread_over_cells`) so one task cannot fill the list."""
    mask = (v.frame["outcome"] == "SBU").to_numpy()
    ranked = episode_table(data, v, mask, sort="VSI (worst first)", limit=None)
    return spread_over_cells(ranked, per_cell=per_cell).head(n).reset_index(drop=True)


def spread_over_cells(ranked: pd.DataFrame, *, per_cell: int = 2, cell: Sequence[str] = CELL) -> pd.DataFrame:
    """`ranked` reordered so that no (model, suite, task) cell gives more than `per_cell`
    rows before every cell has given its first `per_cell`: round k takes each cell's rows
    k*per_cell .. (k+1)*per_cell - 1, in rank order within a round."""
    if ranked.empty or per_cell < 1:
        return ranked
    cols = [c for c in cell if c in ranked]
    rounds = ranked.groupby(cols, sort=False, observed=True).cumcount().to_numpy() // per_cell if cols else 0
    order = np.lexsort((np.arange(len(ranked)), rounds))
    return ranked.iloc[order]


def normalised_depth(data: StoreData, v: Verdicts, rows: np.ndarray | None = None) -> np.ndarray:
    """(N,) the most negative margin over the active scored specs, each divided by its
    |threshold| (1 for a zero threshold): the tie-break under a saturated VSI. +inf when no
    spec is active."""
    thr = np.array([abs(v.thresholds.get(f, 1.0)) or 1.0 for f in data.families], dtype=float)
    rho = v.rho if rows is None else v.rho[rows]
    with np.errstate(invalid="ignore"):
        norm = np.where(np.isfinite(rho), rho / thr, np.inf)
    return norm.min(axis=1) if norm.shape[1] else np.full(len(norm), np.inf)


# ----------------------------------------------------------------------------- what-if

def base_aggregates(v: Verdicts, *, by: Sequence[str] = BY) -> dict:
    """`aggregate` per cell and overall (ci off): the reference side of `whatif_summary`."""
    frame = settled_frame(v)
    return {"cells": aggregate(frame, by=by, ci=False), "all": aggregate(frame, by=(), ci=False)}


def whatif_summary(data: StoreData, v: Verdicts, base: Verdicts | dict, *, by: Sequence[str] = BY) -> pd.DataFrame:
    """Per cell (plus "all"): SR, Safety, SBU, P[U|S], VSI under `v`, and deltas against `base`
    (verdicts, or their `base_aggregates`)."""
    ref_aggs = base if isinstance(base, dict) else base_aggregates(base, by=by)
    rows = []
    for b, name in ((by, "cells"), ((), "all")):
        cur = aggregate(settled_frame(v), by=b, ci=False)
        ref = ref_aggs[name]
        for (_, c), (_, r) in zip(cur.iterrows(), ref.iterrows()):
            row = {col: c[col] for col in by} if b else {col: "all" for col in by}
            row["n"] = int(c["n"])
            for name_ in ("sr", "safety", "sbu", "p_unsafe_given_success", "vsi"):
                row[name_] = c[name_]
                row[f"d_{name_}"] = c[name_] - r[name_]
            rows.append(row)
    return pd.DataFrame(rows)


def flipped(data: StoreData, overrides: Mapping[str, float], *, limit: int | None = 1000) -> pd.DataFrame:
    """Episodes whose safety verdict differs from the default (`WhatIf.flips`), with context."""
    fl = data.whatif.flips(dict(overrides))
    if fl.empty:
        return fl.assign(model=[], suite=[], task_id=[], change=[])
    ctx = data.episodes.set_index("episode_id").loc[fl["episode_id"], ["model", "suite", "task_id"]]
    fl = fl.assign(model=ctx["model"].to_numpy(), suite=ctx["suite"].to_numpy(), task_id=ctx["task_id"].to_numpy())
    fl["change"] = np.where(fl["safe_after"], "unsafe → safe", "safe → unsafe")
    fl["sbu_change"] = np.where(fl["success"], np.where(fl["safe_after"], "leaves SBU", "becomes SBU"), "")
    fl = fl.sort_values(["success", "vsi_after", "vsi_before"], ascending=[False, False, False], kind="stable")
    return fl.head(limit).reset_index(drop=True) if limit else fl.reset_index(drop=True)


def knob_active_count(data: StoreData, knob: Knob) -> int:
    """How many episodes of the store have at least one of the knob's families active: 0
    means its slider can change nothing (tilt on the demo store: no task holds an object
    that tilt applies to)."""
    cols = [j for j, f in enumerate(data.families) if f in knob.families]
    return int(data.active[:, cols].any(axis=1).sum()) if cols else 0


def knob_grid(knob: Knob, *, current: float | None, default: float | None, n: int = 21,
              extra: Sequence[float] = ()) -> np.ndarray:
    grid = np.linspace(knob.lo, knob.hi, n)
    pts = [x for x in (current, default, *extra) if x is not None and knob.lo <= x <= knob.hi]
    return np.unique(np.round(np.concatenate([grid, pts]), 9))


def sensitivity_curve(data: StoreData, knob: Knob, values: Mapping[str, float] | None = None, *,
                      n: int = 21) -> pd.DataFrame:
    """Safety, SBU and P[U|S] over all episodes as `knob` sweeps its range, every other
    threshold at `values` (default: the registry defaults, as Table 9 varies one family
    at a time): the continuous version of Table 9, re-scored by `WhatIf.rescore`."""
    values = dict(values or {})
    default = knob_defaults(data.registry).get(knob.name)
    tiers = []
    for fam in knob.families[:1]:
        if fam in data.registry.families:
            tiers = [knob.value(t.threshold) for t in data.registry.spec(fam).alternates]
    grid = knob_grid(knob, current=values.get(knob.name), default=default, n=n, extra=tiers)
    settled = ~unsettled_mask(data.episodes)  # as every cell: unsettled starts are left out
    rows = []
    for x in grid:
        over = knob_overrides(data.registry, {**values, knob.name: float(x)})
        r = data.whatif.rescore(over)
        frame = pd.DataFrame({"success": data.whatif.success, "safe": r.safe, "vsi": r.vsi})[settled]
        agg = aggregate(frame, by=(), ci=False).iloc[0]
        for metric, col in (("Safety", "safety"), ("SBU", "sbu"), ("P[U|S]", "p_unsafe_given_success")):
            rows.append({"value": float(x), "threshold": knob.threshold(x), "metric": metric, "rate": agg[col]})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- episode detail

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
    """A readable quantity in its one display unit (`scoring.display.format_quantity`, the
    formatter replay captions use too): displacement in mm, degrees with °, ratios as ×."""
    return format_quantity(value, unit, family=family)


def object_name(body: str) -> str:
    """A record body as a reader names the object: LIBERO's `_main` body suffix dropped."""
    return body[:-len("_main")] if body.endswith("_main") else body


def violation_lines(data: StoreData, v: Verdicts, i: int, *,
                    objects: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """One line per violated scored spec of episode `i`, worst first:
    "bystander displacement: 19.1 mm > 5 mm at step 35 (t = 1.75 s)", or with the object the
    replay tints (`objects`: family -> record body names, `replay.highlight.bodies_for`):
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


def robustness_traces(record, registry: Registry, thresholds: Mapping[str, float],
                      families: Sequence[str], *, force_sampling: str = "peak") -> pd.DataFrame:
    """Per-step margin of each family's clause on one record, for the robustness chart.

    Every scored family is `G[0,T]` of a (gated) bound, so the per-step margin is
    `threshold - s` (upper bounds) or `s - threshold` (lower bounds) on gated steps
    (NaN where the gate is closed); `margin` is normalised by |threshold| (1 when the
    threshold is 0). Any other formula shape falls back to the STL engine's robustness
    trace. Long format: step, t, spec, family, margin, value, threshold, unit, violated.
    `force_sampling` is the option the store was scored under (its manifest says), so the
    traces show the values the verdicts came from.
    """
    from scoring import stl
    from scoring.signals import derive_signals

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
        with np.errstate(invalid="ignore"):
            frames.append(pd.DataFrame({
                "step": steps, "t": steps * record.dt, "spec": SHORT.get(fam, fam), "family": fam,
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


# ----------------------------------------------------------------------------- paired comparison (issue 7)

COMPARE_METRICS = ("safety", "sr", "sbu")  # binary outcomes a discordant list can follow
COMPARE_LABELS = {"safety": "Safety", "sr": "SR", "sbu": "SBU"}


def comparison(v: Verdicts, models: Sequence[str], *, n_resamples: int = 10_000, seed: int = 0):
    """`scoring.compare.compare_models` of `models` on the verdicts (per suite and overall)."""
    from scoring.compare import compare_models
    return compare_models(v.frame, list(models), by="suite", n_resamples=n_resamples, seed=seed)


def key_label(row: Mapping, key_columns: Sequence[str]) -> str:
    """A pairing key as one string, e.g. "libero_goal/task_1/3/3" (suite/task/init state/seed);
    the value of the `key` link parameter."""
    return "/".join(str(row[c]) for c in key_columns)


def discordant(data: StoreData, v: Verdicts, cmp, model_a: str, model_b: str, metric: str = "safety") -> pd.DataFrame:
    """`scoring.compare.discordant_episodes` of the pair on the comparison's keys, with a `key`
    label, the store rows (`row_a`, `row_b`), each side's `n_steps`, `outcome`, and violating
    steps re-derived under the thresholds (the stored ones belong to the stored verdicts)."""
    from scoring.compare import discordant_episodes

    d = discordant_episodes(cmp.pairing, model_a, model_b, metric=metric)
    d.insert(0, "key", [key_label(r, cmp.pairing.key_columns) for r in d.to_dict("records")])
    ids = pd.Index(data.episodes["episode_id"])
    for s in ("a", "b"):
        rows = ids.get_indexer(d[f"episode_id_{s}"])
        d[f"row_{s}"] = rows
        d[f"n_steps_{s}"] = v.frame["n_steps"].to_numpy()[rows] if "n_steps" in v.frame else np.nan
        d[f"outcome_{s}"] = v.frame["outcome"].astype(str).to_numpy()[rows]
        if not v.is_default:
            d[f"violating_step_{s}"] = violating_steps(data, v, rows)
    return d
