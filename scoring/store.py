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
most one checkpoint and resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import gc
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (registers pa.compute)
import pyarrow.parquet as pq

from scoring.errors import RecordError, SafeVLAError
from scoring.io import archive_files, atomic_write_bytes, jsonl_spans, load_record, read_span, record_from_npz, \
    record_to_npz_bytes
from scoring.json_fast import record_from_json_bytes
from scoring.registry import Registry, load_registry
from scoring.schema import EpisodeRecord
from scoring.clauses import clause_plan
from scoring.score import EpisodeOutcome, score_outcomes

EPISODES = "episodes.parquet"
SPEC_RESULTS = "spec_results.parquet"
MANIFEST = "manifest.json"
ERRORS = "errors.json"
TRAJECTORIES = "trajectories"
PARTS = ".parts"

EPISODE_COLUMNS = {
    "episode_id": pa.string(), "model": pa.string(), "benchmark": pa.string(), "suite": pa.string(),
    "task_id": pa.string(), "seed": pa.int64(), "init_state": pa.int64(), "language": pa.string(),
    "success": pa.bool_(), "safe": pa.bool_(), "sbu": pa.bool_(), "vsi": pa.float64(),
    "worst_spec": pa.string(), "violating_step": pa.int64(), "first_violation_step": pa.int64(),
    "n_active": pa.int64(), "n_steps": pa.int64(), "dt": pa.float64(), "trajectory": pa.string(),
    "source": pa.string(), "registry_hash": pa.string(),
}
SPEC_COLUMNS = {
    "episode_id": pa.string(), "family": pa.string(), "spec_id": pa.string(), "report_only": pa.bool_(),
    "active": pa.bool_(), "reason": pa.string(), "rho": pa.float64(), "extreme": pa.float64(),
    "extreme_step": pa.int64(), "first_violation_step": pa.int64(), "depth": pa.float64(),
    "threshold": pa.float64(), "op": pa.string(), "signal": pa.string(), "unit": pa.string(),
}


@dataclasses.dataclass(frozen=True)
class ScoreSummary:
    """What one `score_archive` run did."""

    store: Path
    scored: int
    skipped: int
    errors: tuple[dict, ...]
    total: int


# ----------------------------------------------------------------------------- rows

_CLAUSE_FIELDS = ("active", "reason", "rho", "extreme", "extreme_step", "first_violation_step", "depth",
                  "threshold")


class _Columns:
    """Scored episodes of one job gathered as Parquet columns (no per-row dicts)."""

    def __init__(self, reg: Registry):
        self.plan = clause_plan(reg)
        self.registry_hash = reg.hash
        self.episode = {name: [] for name in EPISODE_COLUMNS}
        self.clause = {name: [] for name in _CLAUSE_FIELDS}

    def add(self, rec, out: EpisodeOutcome, *, source: str, trajectory: str) -> None:
        meta = rec.meta
        row = (rec.episode_id, rec.model, rec.benchmark, rec.suite, rec.task_id, _int_or_none(meta.get("seed")),
               _int_or_none(meta.get("init_state")), meta.get("language"), rec.success, out.safe, out.sbu,
               out.vsi, out.worst_spec, out.violating_step, out.episode_first_violation_step, out.n_active,
               rec.n_steps, rec.dt, trajectory, source, self.registry_hash)
        for column, value in zip(self.episode.values(), row):
            column.append(value)
        for name, column in self.clause.items():
            column.extend(getattr(out, name))

    def tables(self) -> tuple[pa.Table, pa.Table]:
        episodes = pa.table({name: pa.array(values, type=EPISODE_COLUMNS[name])
                             for name, values in self.episode.items()})
        n, per = len(self.episode["episode_id"]), len(self.plan)
        c = self.clause
        specs = {
            "episode_id": pa.array([e for e in self.episode["episode_id"] for _ in range(per)], type=pa.string()),
            "family": pa.array([k.label for k in self.plan] * n, type=pa.string()),
            "spec_id": pa.array([k.spec.spec_id for k in self.plan] * n, type=pa.string()),
            "report_only": pa.array([k.report_only for k in self.plan] * n, type=pa.bool_()),
            "active": pa.array(c["active"], type=pa.bool_()),
            "reason": pa.array(c["reason"], type=pa.string()),
            # inactive clauses: NaN (not null) in the float columns, null in the step columns
            "rho": pa.array(np.array(c["rho"], dtype=np.float64)),
            "extreme": pa.array(np.array(c["extreme"], dtype=np.float64)),
            "extreme_step": pa.array(c["extreme_step"], type=pa.int64()),
            "first_violation_step": pa.array(c["first_violation_step"], type=pa.int64()),
            "depth": pa.array(np.array(c["depth"], dtype=np.float64)),
            "threshold": pa.array(c["threshold"], type=pa.float64()),
            "op": pa.array([k.spec.op for k in self.plan] * n, type=pa.string()),
            "signal": pa.array([k.spec.signal for k in self.plan] * n, type=pa.string()),
            "unit": pa.array([k.spec.unit for k in self.plan] * n, type=pa.string()),
        }
        return episodes, pa.table({name: specs[name] for name in SPEC_COLUMNS})


def _int_or_none(x) -> int | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def _table(rows: list[dict], columns: dict) -> pa.Table:
    data = {name: [r.get(name) for r in rows] for name in columns}
    return pa.table({name: pa.array(data[name], type=typ) for name, typ in columns.items()})


def _write_parquet(table: pa.Table, path: Path) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")  # 2x faster than zstd to write and read
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def trajectory_name(episode_id: str) -> str:
    """A file name for an episode id: readable, filesystem-safe and collision-free."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "__", episode_id).strip("_")[:120]
    return f"{slug}-{hashlib.sha1(episode_id.encode()).hexdigest()[:8]}.npz"


# ----------------------------------------------------------------------------- workers

@dataclasses.dataclass(frozen=True)
class _Job:
    """A batch of work for one worker: npz/json files, or JSONL lines as byte ranges."""

    items: tuple  # ("file", path, path) or ("span", (path, offset, length), "path:line")


_SPAN_BUFFER = bytearray()  # one per process: a JSONL line is decoded before the next is read


def _load_item(kind: str, payload, source: str) -> tuple[EpisodeRecord, bool]:
    """(record, converted) of one job item; `converted` when it did not come from `.npz`."""
    if kind == "span":
        try:
            line = read_span(*payload, into=_SPAN_BUFFER)
        except OSError as exc:
            raise RecordError(f"cannot read ({exc.strerror})", file=source) from None
        return record_from_json_bytes(line, source=source), True
    if payload.endswith(".npz"):
        return record_from_npz(payload, source=payload), False
    return load_record(payload), True


def _trajectory(rec: EpisodeRecord, payload, converted: bool, store: str, copy: bool) -> str:
    """The store-relative path of the episode's columnar record, writing it first if the store keeps one."""
    if not (converted or copy):
        return _relpath(payload, store)
    dest = Path(store) / TRAJECTORIES / trajectory_name(rec.episode_id)
    if converted:
        atomic_write_bytes(dest, record_to_npz_bytes(_relocated(rec, dest), compress=False))
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(payload, dest)
    return os.path.relpath(dest, store)


def _relocated(rec, dest: Path):
    """`rec` with a relative MJCF path rewritten so it still resolves from `dest`."""
    from scoring.io import resolve_mjcf
    if rec.replay is None or rec.replay.mjcf_is_xml:
        return rec
    mjcf = resolve_mjcf(rec)
    return dataclasses.replace(rec, replay=dataclasses.replace(
        rec.replay, mjcf=os.path.relpath(os.path.abspath(mjcf), os.path.abspath(dest.parent))))


def _store_relative(source: str, store: str) -> str:
    """`source` ("path" or "path:line") with the path relative to the store, so stores move."""
    path, sep, line = source.rpartition(":")
    if not (sep and line.isdigit()):
        path, sep, line = source, "", ""
    return _relpath(path, store) + sep + line


def _relpath(path: str, start: str) -> str:
    """os.path.relpath, with the directory part cached: it costs more than scoring otherwise."""
    head, tail = os.path.split(path)
    rel = _relpath_dir(head, start)
    return tail if rel == "." else os.path.join(rel, tail)


@functools.lru_cache(maxsize=4096)
def _relpath_dir(directory: str, start: str) -> str:
    return os.path.relpath(os.path.abspath(directory or "."), os.path.abspath(start))


def _error_row(exc: RecordError, source: str) -> dict:
    return {"file": exc.file or source, "episode": exc.episode, "field": exc.field, "message": str(exc)}


_WORKER_STATE: dict = {}


def _worker_init(registry_path, registry_hash: str):
    # a forked worker inherits the parent's registry: re-reading the YAML is the slowest part of start-up
    inherited = _WORKER_STATE.get("registry")
    if inherited is None or inherited.hash != registry_hash:
        _WORKER_STATE["registry"] = load_registry(registry_path)
    # everything inherited lives as long as the worker: keep the collector from re-scanning it
    # (and from touching, hence copying, the parent's pages) while records churn through
    gc.freeze()


@dataclasses.dataclass(frozen=True)
class _Batch:
    """A worker's scored batch, already columnar so the parent only concatenates."""

    episodes: pa.Table
    specs: pa.Table
    spec_counts: list[int]
    errors: list[dict]
    n_items: int


_LOAD_CHUNK = 64  # items loaded at once: enough to batch numpy calls, few enough to bound memory


def _run_job(job: _Job, store: str, copy: bool, registry: Registry | None = None) -> _Batch:
    reg = registry or _WORKER_STATE["registry"]
    columns = _Columns(reg)
    errors = []
    items = job.items
    for start in range(0, len(items), _LOAD_CHUNK):
        loaded, chunk_errors = [], {}
        for k, (kind, payload, source) in enumerate(items[start:start + _LOAD_CHUNK]):
            try:
                loaded.append((k, *_load_item(kind, payload, source)))
            except RecordError as exc:
                chunk_errors[k] = _error_row(exc, source)
        outcomes = score_outcomes([rec for _, rec, _ in loaded], registry=reg)
        for (k, rec, converted), out in zip(loaded, outcomes):
            kind, payload, source = items[start + k]
            if isinstance(out, RecordError):
                chunk_errors[k] = _error_row(out, source)
                continue
            columns.add(rec, out, source=_store_relative(source, store),
                        trajectory=_trajectory(rec, payload, converted, store, copy))
        errors.extend(chunk_errors[k] for k in sorted(chunk_errors))
    episodes, specs = columns.tables()
    return _Batch(episodes, specs, [len(columns.plan)] * episodes.num_rows, errors, len(job.items))


def _batch_size(files: list[Path], workers: int) -> int:
    """Episodes per job: ~8 jobs per worker, within [16, 256].

    Each job costs the parent a few ms of pool bookkeeping, so jobs are as large as
    load balance at the end of the run allows. JSONL lines are not counted up front;
    each costs ~10x a columnar episode, so their jobs are small.
    """
    n = sum(p.suffix != ".jsonl" for p in files)
    if not n:
        return 16
    return max(16, min(256, -(-n // (max(workers, 1) * 8))))


def _jobs(paths: list[Path], done_sources: set[str], batch: int, skipped: list[int], store: Path) -> Iterator[_Job]:
    items = []
    for path in paths:
        if _store_relative(str(path), str(store)) in done_sources:
            skipped[0] += 1
            continue
        if path.suffix == ".jsonl":
            for offset, length, lineno in jsonl_spans(path):
                items.append(("span", (str(path), offset, length), f"{path}:{lineno}"))
                if len(items) >= batch:
                    yield _Job(tuple(items))
                    items = []
        else:
            items.append(("file", str(path), str(path)))
        if len(items) >= batch:
            yield _Job(tuple(items))
            items = []
    if items:
        yield _Job(tuple(items))


# ----------------------------------------------------------------------------- store

def read_table(store: str | os.PathLike, name: str) -> pd.DataFrame:
    """Loads one of the store's Parquet tables with a clear error when absent or corrupt."""
    path = Path(store) / name
    if not path.exists():
        raise RecordError(f"missing {name}; expected a run store written by `safevla score`", file=str(path))
    try:
        return pq.read_table(path).to_pandas()
    except (pa.ArrowException, OSError) as exc:
        raise RecordError(f"corrupt Parquet file ({exc})", file=str(path)) from None


def _existing(store: Path) -> tuple[list[pa.Table], list[pa.Table]]:
    eps, specs = [], []
    for ep_path in [store / EPISODES, *sorted((store / PARTS).glob("episodes-*.parquet"))]:
        sp_path = ep_path.with_name(ep_path.name.replace("episodes", "spec_results"))
        if ep_path.exists() and sp_path.exists():
            try:
                eps.append(pq.read_table(ep_path))
                specs.append(pq.read_table(sp_path))
            except (pa.ArrowException, OSError) as exc:
                raise RecordError(f"corrupt Parquet file ({exc}); delete it to re-score", file=str(ep_path)) from None
    return eps, specs


def score_archive(paths: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                  workers: int = 1, registry: Registry | None = None, registry_path=None,
                  copy_trajectories: bool = False, progress: bool | None = None, checkpoint_every: int = 5000,
                  batch: int | None = None, synthetic: bool = False, engine: Callable | None = None) -> ScoreSummary:
    """Scores every episode of the archives into the run store `out`.

    Episodes already in the store with the same registry hash are skipped; an episode
    that fails validation is reported (errors.json and the summary) and the rest are
    still scored. `workers > 1` scores in a process pool. `engine(jobs, run)` may replace
    the local engine: a generator yielding each job's `_Batch` in submission order
    (`scoring.ray_score` runs them as Ray tasks); the store it gives is the same.
    `batch` is episodes per job (default: about 8 jobs per worker, see `_batch_size`).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    files = archive_files(paths)
    reg = registry or load_registry(registry_path)
    store = Path(out)
    store.mkdir(parents=True, exist_ok=True)
    old_eps, old_specs = _existing(store)
    done_ids: set[str] = set()
    done_sources: set[str] = set()
    for t in old_eps:
        cur = t.filter(pa.compute.equal(t["registry_hash"], reg.hash))
        done_ids.update(cur["episode_id"].to_pylist())
        done_sources.update(cur["source"].to_pylist())

    has_lines = any(p.suffix == ".jsonl" for p in files)
    todo = None if has_lines else sum(_store_relative(str(p), str(store)) not in done_sources for p in files)
    bar = _progress_bar(todo, progress)
    errors: list[dict] = []
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
    jobs = _jobs(files, done_sources, batch or _batch_size(files, workers), skipped_files, store)
    run = _Run(store=str(store), copy=copy_trajectories, registry=reg, registry_path=registry_path, workers=workers)
    results = (engine or local_engine)(jobs, run)
    try:
        for res in results:
            errors.extend(res.errors)
            accept = []
            for eid, src in zip(res.episodes["episode_id"].to_pylist(), res.episodes["source"].to_pylist()):
                if eid in done_ids:
                    skipped += 1
                    accept.append(False)
                elif eid in seen:
                    errors.append({"file": src, "episode": eid, "field": "episode_id",
                                   "message": f"duplicate episode_id; already scored from {seen[eid]}"})
                    accept.append(False)
                else:
                    seen[eid] = src
                    accept.append(True)
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
    # the checkpoints only guard against a crash: consolidate from memory, not by re-reading them
    _consolidate(store, reg, [Path(p) for p in paths], errors, synthetic=synthetic,
                 tables=(old_eps + _concat([ep for ep, _ in fresh]), old_specs + _concat([sp for _, sp in fresh])))
    return ScoreSummary(store=store, scored=scored, skipped=skipped, errors=tuple(errors),
                        total=scored + skipped + len(errors))


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


@dataclasses.dataclass(frozen=True)
class _Run:
    """What an engine needs to score jobs for one `score_archive` call."""

    store: str
    copy: bool
    registry: Registry
    registry_path: object
    workers: int


def local_engine(jobs: Iterator[_Job], run: _Run) -> Iterator[_Batch]:
    """The default engine: in this process, or a process pool when `run.workers > 1`."""
    if run.workers <= 1:
        for job in jobs:
            yield _run_job(job, run.store, run.copy, run.registry)
        return
    _WORKER_STATE["registry"] = run.registry
    pool = get_context("fork" if os.name == "posix" else "spawn").Pool(
        run.workers, initializer=_worker_init, initargs=(run.registry_path, run.registry.hash))
    try:
        yield from pool.imap(_JobRunner(run.store, run.copy), jobs)
    finally:
        pool.close()
        pool.join()


class _JobRunner:
    """Picklable callable for the pool (closures are not)."""

    def __init__(self, store: str, copy: bool):
        self.store, self.copy = store, copy

    def __call__(self, job: _Job):
        return _run_job(job, self.store, self.copy)


def _concat(tables: list[pa.Table]) -> list[pa.Table]:
    """One table instead of many batches (their episode ids are distinct), so consolidation filters once."""
    return [pa.concat_tables(tables)] if tables else []


def _consolidate(store: Path, reg: Registry, files: list[Path], errors: list[dict], *, synthetic: bool,
                 tables: tuple[list[pa.Table], list[pa.Table]]) -> None:
    eps, specs = tables
    # Later tables (checkpoints of this run) supersede earlier ones episode by episode,
    # so an episode re-scored under a new registry keeps only its new rows.
    claimed: set[str] = set()
    ep_parts, sp_parts = [], []
    for ep, sp in zip(reversed(eps), reversed(specs)):
        ep = ep.select(list(EPISODE_COLUMNS)).cast(pa.schema(EPISODE_COLUMNS))
        sp = sp.select(list(SPEC_COLUMNS)).cast(pa.schema(SPEC_COLUMNS))
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
    sources = sorted(set(manifest.get("sources", [])) | {os.path.relpath(os.path.abspath(p), os.path.abspath(store))
                                                           for p in files})
    from scoring import __version__
    manifest.update({
        "schema_version": 1, "tool_version": __version__, "registry_hash": reg.hash,
        "thresholds": {f: reg.spec(f).threshold for f in reg.families},
        "sources": sources, "created": manifest.get("created") or _now(), "updated": _now(),
        "n_episodes": ep_tab.num_rows, "n_errors": len(merged),
        "synthetic": bool(manifest.get("synthetic", False) or synthetic),
    })
    atomic_write_bytes(store / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())


def _read_manifest(store: Path) -> dict:
    path = store / MANIFEST
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise RecordError(f"corrupt manifest ({exc})", file=str(path)) from None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def load_store(store: str | os.PathLike) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(manifest, episodes, spec_results) of a run store, validated."""
    store = Path(store)
    if not store.is_dir():
        raise SafeVLAError(f"run store {str(store)!r} does not exist or is not a directory")
    if not (store / MANIFEST).exists():
        raise RecordError("missing manifest.json; expected a run store written by `safevla score`",
                          file=str(store / MANIFEST))
    manifest = _read_manifest(store)
    if not isinstance(manifest, dict) or "registry_hash" not in manifest:
        raise RecordError("expected a JSON object with registry_hash (written by `safevla score`)",
                          file=str(store / MANIFEST), field="registry_hash")
    return manifest, read_table(store, EPISODES), read_table(store, SPEC_RESULTS)
