"""A run store loaded once for the dashboard (`StoreData`, `open_store`) and the checks that make a
bad store one clear error.
Imports scoring only.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd

from scoring.errors import SafeVLAError
from scoring.evaluate.whatif import WhatIf
from scoring.registry.lookup import Registry, load_registry
from scoring.stats.metrics import outcome_class
from scoring.store.paths import (folder_to_name, ignored_sources, is_inside, model_file_outside, store_roots,
                                 trajectory_file)
from scoring.store.write import load_store


OUTCOMES = ("SBU", "safe success", "unsafe failure", "safe failure")
BY = ("model", "suite")
REQUIRED_EPISODE_COLUMNS = ("episode_id", "model", "suite", "task_id", "success", "safe", "sbu", "vsi")
REQUIRED_SPEC_COLUMNS = ("episode_id", "family", "report_only", "active", "rho", "extreme", "extreme_step")
# the registry's human name of each family, the one name the dashboard, clips and figures show
SHORT = {spec.family: spec.name for spec in load_registry().specs}


class StoreProblem(SafeVLAError):
    """A run store the dashboard cannot show; the message says what is wrong and what to do."""



@dataclasses.dataclass(eq=False)
class StoreData:
    """A loaded run store with what the pages need precomputed.

    Attributes:
      path: the store directory.  key: path plus file stamps (cache key).
      manifest, episodes, spec_results: as `scoring.store.write.load_store` returns them;
        `episodes` gains `outcome` (the 2x2 class) and `row` (position).
      scored: the scored (non report-only) spec rows with `_row`/`_col` indices into
        the (episodes x families) matrices.
      rho: (N, F) stored robustness, NaN where inactive.  active: (N, F) bool.
      whatif: `scoring.evaluate.whatif.WhatIf` over the store.
      warnings: problems that do not stop the dashboard (registry mismatch, missing
        trajectories, synthetic data, scoring errors).
      missing_trajectory: (N,) bool: the file is absent, or refused (outside `roots`).
      roots: the resolved directories trajectory and MJCF paths may point into
        (`scoring.store.paths.store_roots`: the store and its archive).
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
        from dashboard.timeline_spec import spec_colors
        return spec_colors([self.label(f) for f in self.families])

    def index_of(self, episode_id: str) -> int | None:
        hit = np.flatnonzero(self.episodes["episode_id"].to_numpy() == episode_id)
        return int(hit[0]) if hit.size else None

    def trajectory_path(self, i: int) -> Path | None:
        """The episode's trajectory file; None when the store has none for it.

        Raises StoreProblem when the path points outside the store and its archive.
        """
        p = trajectory_file(self.path, self.episodes["trajectory"].iat[i] if "trajectory" in self.episodes
                            else None)
        if p is not None and not is_inside(p, self.roots):
            raise StoreProblem(f"the trajectory of episode {self.episodes['episode_id'].iat[i]!r} points to "
                               f"{str(p)!r}, outside the run store and its archive; refused (a store may only "
                               "point at its own files)")
        return p


def check_mjcf_path(data: StoreData, rec) -> None:
    """Refuses a record whose `replay.mjcf` file lies outside the store and its archive.

    (The MJCF's own asset references are resolved against registered asset roots by
    `replay.render.replayer`; this guards the path the record itself names.)
    """
    mjcf = model_file_outside(rec, data.roots)
    if mjcf is not None:
        both = folder_to_name(mjcf, rec.source) if rec.source else ""
        hint = f"; if {both} is yours, start the dashboard with --archive {both}" if both else ""
        raise StoreProblem(f"episode {rec.episode_id!r}: replay.mjcf points to {mjcf!r}, outside the run store and "
                           f"its archive; refused (a record may only name model files of its own archive{hint})")


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
    ignored = ignored_sources(path, manifest)
    missing, outside = _missing_trajectories(path, episodes, roots)
    if ignored and outside.any():  # said only where it costs a trajectory (JSON records live in the store)
        warnings.append(f"Ignored archive sources: {len(ignored)} of the manifest's sources allow no file "
                        f"({'; '.join(ignored)}); trajectories there are refused.")
    if outside.any():
        refused = pd.unique(episodes["trajectory"].to_numpy(object)[outside]).size
        warnings.append(f"Refused trajectories: {refused} trajectory path(s) point outside the run store "
                        "and its archive; those episodes show scores only.")
    absent = missing & ~outside
    if absent.all():
        warnings.append(f"Missing trajectories: none of the {n} trajectory files referenced by the store exist "
                        "(moved or deleted archive?). Scores, tables and what-if work; robustness traces and "
                        "replays do not.")
    elif absent.any():
        warnings.append(f"Missing trajectories: {int(absent.sum())} of {n} trajectory files do not exist; "
                        "those episodes show scores only.")
    if manifest.get("synthetic"):
        warnings.append("Synthetic store: these are generated trajectories, not rollouts.")
    if manifest.get("n_errors"):
        warnings.append(f"{manifest['n_errors']} episode(s) could not be scored (see errors.json in the store).")
    return StoreData(path=path, key=key, manifest=manifest, episodes=episodes, spec_results=spec_results,
                     scored=scored, registry=reg, whatif=whatif, rho=rho, active=active, warnings=tuple(warnings),
                     missing_trajectory=missing, registry_matches=registry_matches, roots=roots)


def provenance_text(episode: Mapping[str, Any]) -> str | None:
    """How the episode's model was served and under which rollout protocol, as one line
    ("openpi · openpi://h:8000 · replan 5 · 256x256 images · protocol openpi"), or None for
    stores and records that say neither."""
    def present(key):
        v = episode.get(key)
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else v
    adapter, model_id = present("policy_adapter"), present("policy_model_id")
    protocol = present("protocol")
    if adapter is None and model_id is None and protocol is None:
        return None
    parts = []
    if adapter is not None or model_id is not None:
        parts = [str(adapter or "unknown adapter"), str(model_id or "unknown model")]
        if present("replan_steps") is not None:
            parts.append(f"replan {int(episode['replan_steps'])}")
        parts.append(f"{episode['image_size']} images" if present("image_size") else "no camera images")
    if protocol is not None:
        native = present("protocol_native")
        parts.append(f"protocol {protocol}" + ("" if native is None or bool(native) else " (overridden: not native)"))
    return " · ".join(parts)


def _missing_trajectories(path: str, episodes: pd.DataFrame, roots: tuple[str, ...]
                          ) -> tuple[np.ndarray, np.ndarray]:
    """((N,) bool, (N,) bool): the episode's trajectory file does not exist or lies outside
    `roots`; it lies outside `roots` (refused: its folder, or the file itself through a symbolic
    link). One directory listing per folder; only the files that are links are resolved."""
    if "trajectory" not in episodes:
        return np.ones(len(episodes), dtype=bool), np.zeros(len(episodes), dtype=bool)
    rel = episodes["trajectory"].to_numpy(object)
    listing: dict[str, dict[str, bool]] = {}
    exists: dict[str, bool] = {}
    inside: dict[str, bool] = {}
    refused: set[str] = set()
    # os.path on strings, not pathlib: 20k Path objects cost ~1 s of the dashboard's cold start
    for p in pd.unique(rel):
        if not isinstance(p, str) or not p:
            continue
        full = p if os.path.isabs(p) else os.path.join(path, p)
        folder, name = os.path.split(full)
        if folder not in inside:
            inside[folder] = is_inside(folder, roots)
        if not inside[folder]:
            refused.add(p)
            continue
        if folder not in listing:  # file name -> whether it is a symbolic link
            try:
                listing[folder] = {e.name: e.is_symlink() for e in os.scandir(folder) if e.is_file()}
            except OSError:
                listing[folder] = {}
        link = listing[folder].get(name)
        if link and not is_inside(full, roots):
            refused.add(p)
            continue
        exists[p] = link is not None
    missing = np.array([not exists.get(p, False) if isinstance(p, str) else True for p in rel], dtype=bool)
    return missing, np.array([isinstance(p, str) and p in refused for p in rel], dtype=bool)
