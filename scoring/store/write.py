"""The Parquet run store: what `safevla score` writes and the dashboard loads.

    STORE/
      manifest.json          registry hash, thresholds, sources, created, tool version
      episodes.parquet       one row per episode
      spec_results.parquet   one row per (episode, spec), diagnostics included
      errors.json            episodes that could not be scored, by file, episode and field
      trajectories/          columnar records converted from JSON sources

Columnar (`.npz`) sources are referenced in place (the `trajectory` column holds a path
relative to STORE) rather than copied, so a 15k-episode archive is not written twice;
`copy_trajectories=True` makes the store self-contained. Every file is written
atomically, and progress is checkpointed into `.parts/` so an interrupted run loses at
most one checkpoint and resumes where it stopped. One run writes at a time (`.lock`,
`scoring.store.lock`); converted trajectories are staged in `trajectories/.staging/` and
moved into place only once their episode is accepted (not a duplicate id).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (registers pa.compute)
import pyarrow.parquet as pq

from scoring.errors import RecordError, SafeVLAError
from scoring.evaluate.score import SCORER_VERSION
from scoring.evaluate.channels import check_force_sampling
from scoring.records.archive import list_archive
from scoring.records.io import atomic_write_bytes
from scoring.registry.lookup import Registry, load_registry
from scoring.store.job_plan import _batch_size, _jobs, _store_relative
from scoring.store.jobs import (EPISODE_COLUMNS, SPEC_COLUMNS, STAGING, _error_row, _Run, commit_trajectory,
                                local_engine)
from scoring.store.lock import store_lock
from scoring.store.paths import malformed_source, manifest_sources
from scoring.store.read import (ERRORS, EPISODES, MANIFEST, PARTS, SPEC_RESULTS, _read_manifest,  # noqa: F401
                                load_store, read_table)


@dataclasses.dataclass(frozen=True)
class ScoreSummary:
    """What one `score_archive` run did."""

    store: Path
    scored: int
    skipped: int
    errors: tuple[dict, ...]
    total: int


def _table(rows: list[dict], columns: dict) -> pa.Table:
    data = {name: [r.get(name) for r in rows] for name in columns}
    return pa.table({name: pa.array(data[name], type=typ) for name, typ in columns.items()})


def _write_parquet(table: pa.Table, path: Path) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")  # 2x faster than zstd to write and read
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


# ----------------------------------------------------------------------------- store

def _current(episodes: pa.Table, reg: Registry, force_sampling: str = "peak") -> pa.ChunkedArray | pa.Array:
    """Rows scored with this registry, by this scorer version, under this force-sampling option
    (stores from before versions or options had none)."""
    same_registry = pa.compute.equal(episodes["registry_hash"], reg.hash)
    if "scorer_version" not in episodes.column_names or "force_sampling_option" not in episodes.column_names:
        return pa.compute.and_(same_registry, pa.scalar(False))
    same = pa.compute.and_(same_registry, pa.compute.equal(episodes["scorer_version"], SCORER_VERSION))
    return pa.compute.and_kleene(same, pa.compute.equal(episodes["force_sampling_option"], force_sampling))


def _with_columns(table: pa.Table, columns: dict) -> pa.Table:
    """`table` with `columns` selected and cast, columns it lacks (older stores) added as nulls."""
    for name, typ in columns.items():
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, type=typ))
    return table.select(list(columns)).cast(pa.schema(columns))


def _existing(store: Path) -> tuple[list[pa.Table], list[pa.Table]]:
    eps, specs = [], []
    for ep_path in [store / EPISODES, *sorted((store / PARTS).glob("episodes-*.parquet"))]:
        sp_path = ep_path.with_name(ep_path.name.replace("episodes", "spec_results"))
        if ep_path.exists() and sp_path.exists():
            for path, tables in ((ep_path, eps), (sp_path, specs)):  # the error names the file that is corrupt
                try:
                    tables.append(pq.read_table(path))
                except (pa.ArrowException, OSError) as exc:
                    raise RecordError(f"corrupt Parquet file ({exc}); delete it to re-score",
                                      file=str(path)) from None
    return eps, specs


def score_archive(paths: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                  workers: int = 1, registry: Registry | None = None, registry_path=None,
                  copy_trajectories: bool = False, progress: bool | None = None, checkpoint_every: int = 5000,
                  batch: int | None = None, synthetic: bool = False, engine: Callable | None = None,
                  force_sampling: str = "peak", wait_for_lock: bool = False,
                  extra_problems: Iterable[RecordError] = ()) -> ScoreSummary:
    """Scores every episode of the archives into the run store `out`.

    `force_sampling` is "peak" (substep peaks where records hold them) or "control" (the
    paper's per-step samples); see `scoring.evaluate.signals`. Episodes already in the store with
    the same registry hash, scorer version and force sampling are skipped; an episode
    that fails validation is reported (errors.json and the summary) and the rest are
    still scored. `workers > 1` scores in a process pool. `engine(jobs, run)` may replace
    the local engine: a generator yielding each job's `_Batch` in submission order
    (`scoring.store.ray_score` runs them as Ray tasks); the store it gives is the same.
    `batch` is episodes per job (default: about 8 jobs per worker, see `_batch_size`).
    One run writes to a store at a time (`scoring.store.lock`): another run raises
    StoreBusy, or waits for the lock with `wait_for_lock`. `extra_problems` are items refused
    before this call (e.g. object keys `scoring.store.score_uri` would not download): reported like the rest.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    try:
        check_force_sampling(force_sampling)
    except ValueError as exc:
        raise SafeVLAError(str(exc)) from None
    listing = list_archive(paths)
    reg = registry or load_registry(registry_path)
    store = Path(out)
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SafeVLAError(f"cannot create the run store {str(store)!r} ({exc.strerror})") from None
    with store_lock(store, wait=wait_for_lock):
        shutil.rmtree(store / STAGING, ignore_errors=True)  # left by a run that was killed
        return _score_into(store, paths, listing.files, [*extra_problems, *listing.problems], reg, workers=workers,
                           registry_path=registry_path, copy_trajectories=copy_trajectories, progress=progress,
                           checkpoint_every=checkpoint_every, batch=batch, synthetic=synthetic, engine=engine,
                           force_sampling=force_sampling)


def _score_into(store: Path, paths: list, files: list[Path], problems: list[RecordError], reg: Registry, *,
                workers: int, registry_path, copy_trajectories: bool, progress: bool | None, checkpoint_every: int,
                batch: int | None, synthetic: bool, engine: Callable | None, force_sampling: str) -> ScoreSummary:
    """The body of `score_archive`, run while holding the store's lock."""
    old_eps, old_specs = _existing(store)
    done_ids: dict[str, str] = {}  # episode id -> store-relative source it was scored from
    done_sources: set[str] = set()
    for t in old_eps:
        cur = t.filter(_current(t, reg, force_sampling))
        done_ids.update(zip(cur["episode_id"].to_pylist(), cur["source"].to_pylist()))
        done_sources.update(cur["source"].to_pylist())

    has_lines = any(p.suffix == ".jsonl" for p in files)
    todo = None if has_lines else sum(_store_relative(str(p), str(store)) not in done_sources for p in files)
    bar = _progress_bar(todo, progress)
    errors: list[dict] = [{"file": p.file, "episode": None, "field": None, "message": str(p)} for p in problems]
    seen: dict[str, str] = {}
    skipped = 0
    scored = 0
    parts_written = len(list((store / PARTS).glob("episodes-*.parquet")))
    pending: list[tuple[pa.Table, pa.Table]] = []  # scored since the last checkpoint
    fresh: list[tuple[pa.Table, pa.Table]] = []  # scored in this run
    pending_rows = 0

    def flush():
        nonlocal parts_written, pending, pending_rows
        if not pending:
            return
        (store / PARTS).mkdir(exist_ok=True)
        _write_parquet(pa.concat_tables([sp for _, sp in pending]),
                       store / PARTS / f"spec_results-{parts_written:05d}.parquet")
        _write_parquet(pa.concat_tables([ep for ep, _ in pending]),
                       store / PARTS / f"episodes-{parts_written:05d}.parquet")
        parts_written += 1
        pending, pending_rows = [], 0

    skipped_files = [0]
    jobs = _jobs(files, done_sources, batch or _batch_size(files, workers), skipped_files, store, workers=workers)
    run = _Run(store=str(store), copy=copy_trajectories, registry=reg, registry_path=registry_path, workers=workers,
               force_sampling=force_sampling)
    results = (engine or local_engine)(jobs, run)
    try:
        for res in results:
            errors.extend(res.errors)
            accept = []
            for eid, origin, staged, trajectory, source in zip(
                    res.episodes["episode_id"].to_pylist(), res.origins, res.staged,
                    res.episodes["trajectory"].to_pylist(), res.episodes["source"].to_pylist()):
                earlier = seen.get(eid) or _other_scored_source(store, done_ids.get(eid), source)
                if earlier is not None:
                    dup = RecordError(f"duplicate episode_id; already scored from {earlier!r}, this one was "
                                      "not scored", file=origin, episode=eid, field="episode_id")
                    errors.append(_error_row(dup, origin))
                    accept.append(False)
                elif eid in done_ids:  # the same file, moved with its archive: already scored
                    skipped += 1
                    accept.append(False)
                else:
                    seen[eid] = origin
                    accept.append(True)
                commit_trajectory(store, staged, trajectory, accept=accept[-1])
            ep_tab, sp_tab = res.episodes, res.specs
            if not all(accept):
                ep_tab = ep_tab.filter(pa.array(accept, type=pa.bool_()))
                sp_tab = sp_tab.filter(pa.array(np.repeat(accept, res.spec_counts), type=pa.bool_()))
            if ep_tab.num_rows:
                pending.append((ep_tab, sp_tab))
                fresh.append((ep_tab, sp_tab))
                pending_rows += ep_tab.num_rows
                scored += ep_tab.num_rows
            if pending_rows >= checkpoint_every:
                flush()
            bar.update(res.n_items)
    finally:
        results.close()  # stops the engine: pool shut down, queued tasks cancelled
        bar.close()
    skipped += skipped_files[0]
    shutil.rmtree(store / STAGING, ignore_errors=True)  # only rejected or abandoned items are left there
    # the checkpoints only guard against a crash: consolidate from memory, not by re-reading them
    _consolidate(store, reg, [Path(p) for p in paths], errors, synthetic=synthetic, force_sampling=force_sampling,
                 tables=(old_eps + _concat([ep for ep, _ in fresh]), old_specs + _concat([sp for _, sp in fresh])))
    return ScoreSummary(store=store, scored=scored, skipped=skipped, errors=tuple(errors),
                        total=scored + skipped + len(errors))


def _other_scored_source(store: Path, done_source: str | None, source: str) -> str | None:
    """The path an episode id was already scored from, when that is another file that still exists.

    A source whose file is gone is the same archive, moved; another line of the same JSONL
    file is the same file, edited: both are skipped as already scored.
    """
    if done_source is None:
        return None
    path, new_path = _file_of(done_source), _file_of(source)
    if path == new_path:
        return None
    return os.path.normpath(store / path) if os.path.exists(store / path) else None


def _file_of(source: str) -> str:
    """The file part of a store-relative source ("path" or "path:line")."""
    path, sep, line = source.rpartition(":")
    return path if sep and line.isdigit() else source


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int | None, progress: bool | None):
    """A tqdm bar (shown on a terminal when `progress` is None), or nothing at all when False."""
    if progress is False:
        return _NoProgress()
    from tqdm.auto import tqdm
    return tqdm(total=total, unit="ep", desc="scoring", disable=None if progress is None else not progress)


def _concat(tables: list[pa.Table]) -> list[pa.Table]:
    """One table instead of many batches (their episode ids are distinct), so consolidation filters once."""
    return [pa.concat_tables(tables)] if tables else []


def _consolidate(store: Path, reg: Registry, files: list[Path], errors: list[dict], *, synthetic: bool,
                 tables: tuple[list[pa.Table], list[pa.Table]], force_sampling: str = "peak") -> None:
    eps, specs = tables
    # Later tables (checkpoints of this run) supersede earlier ones episode by episode,
    # so an episode re-scored under a new registry keeps only its new rows.
    claimed: set[str] = set()
    ep_parts, sp_parts = [], []
    for ep, sp in zip(reversed(eps), reversed(specs)):
        ep = _with_columns(ep, EPISODE_COLUMNS)
        sp = _with_columns(sp, SPEC_COLUMNS)
        if claimed:
            fresh = pa.array(sorted(claimed), type=pa.string())
            ep = ep.filter(pa.compute.invert(pa.compute.is_in(ep["episode_id"], value_set=fresh)))
            sp = sp.filter(pa.compute.invert(pa.compute.is_in(sp["episode_id"], value_set=fresh)))
        claimed.update(ep["episode_id"].to_pylist())
        ep_parts.append(ep)
        sp_parts.append(sp)
    ep_tab = pa.concat_tables(ep_parts) if ep_parts else _table([], EPISODE_COLUMNS)
    sp_tab = pa.concat_tables(sp_parts) if sp_parts else _table([], SPEC_COLUMNS)
    # sorted by episode id, so the same archive always gives the same bytes
    ep_tab = ep_tab.take(pa.compute.sort_indices(ep_tab, [("episode_id", "ascending")]))
    order = pa.compute.sort_indices(sp_tab, [("episode_id", "ascending")])
    sp_tab = sp_tab.take(order)
    _write_parquet(sp_tab, store / SPEC_RESULTS)
    _write_parquet(ep_tab, store / EPISODES)
    shutil.rmtree(store / PARTS, ignore_errors=True)
    old_errors = []
    if (store / ERRORS).exists():
        try:
            old_errors = json.loads((store / ERRORS).read_text())
        except ValueError:
            old_errors = []
    scored_ids = set(ep_tab["episode_id"].to_pylist())
    merged = {(e["file"], e.get("episode")): e for e in old_errors if e.get("episode") not in scored_ids}
    merged.update({(e["file"], e.get("episode")): e for e in errors})
    atomic_write_bytes(store / ERRORS, json.dumps(list(merged.values()), indent=1).encode())
    manifest = _read_manifest(store)
    sources = sorted(set(_kept_sources(store, manifest)) | {os.path.relpath(os.path.abspath(p), os.path.abspath(store))
                                                            for p in files})
    from scoring import __version__
    manifest.update({
        "schema_version": 1, "tool_version": __version__, "registry_hash": reg.hash,
        "scorer_version": SCORER_VERSION, "force_sampling": force_sampling,
        "thresholds": {f: reg.spec(f).threshold for f in reg.families},
        "sources": sources, "created": manifest.get("created") or _now(), "updated": _now(),
        "n_episodes": ep_tab.num_rows, "n_errors": len(merged),
        "synthetic": bool(manifest.get("synthetic", False) or synthetic),
    })
    atomic_write_bytes(store / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())


def _kept_sources(store: Path, manifest: dict) -> list[str]:
    """The sources of an earlier run's manifest that stay: relative paths (`safevla score` writes each
    archive named on its command line relative to the store). An absolute one, one resolving to the
    filesystem root or one that is not a path came from elsewhere and is dropped; a relative one
    whose archive is gone for now is kept (readers ignore it while it is missing, `scoring.store.paths`)."""
    return [source for source in manifest_sources(manifest) if not malformed_source(store, source)]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
