"""The work of `score_archive`: the engine that runs jobs, and what a job returns.

A job is a batch of archive items (`.npz`/`.json` files, or JSONL lines as byte ranges;
`scoring.store.job_plan` cuts them). A worker loads them, scores them together
(`scoring.evaluate.score.score_outcomes`), writes the trajectories the store keeps, and returns
Parquet columns, so the parent only concatenates. `local_engine` runs jobs in this
process or a fork pool; `scoring.store.ray_score.ray_engine` runs the same jobs as Ray tasks.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import math
import os
import re
import shutil
import threading
from collections.abc import Iterator
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pyarrow as pa

from scoring.errors import RecordError
from scoring.evaluate.clauses import clause_plan
from scoring.evaluate.score import SCORER_VERSION, EpisodeOutcome, score_outcomes
from scoring.evaluate.channels import scored_channels
from scoring.records.archive import read_span
from scoring.records.io import load_record, record_from_npz, record_to_npz_bytes, resolve_mjcf
from scoring.records.json_fast import record_from_json_bytes
from scoring.records.schema import EpisodeRecord
from scoring.registry.lookup import Registry, load_registry
from scoring.store.job_plan import _Job, _relpath, _store_relative

TRAJECTORIES = "trajectories"
# Workers write converted trajectories here under a name unique to their source; the
# parent moves each into place only once it has accepted the episode (not a duplicate
# id), so a rejected duplicate never overwrites the accepted episode's trajectory.
STAGING = os.path.join(TRAJECTORIES, ".staging")

EPISODE_COLUMNS = {
    "episode_id": pa.string(), "model": pa.string(), "benchmark": pa.string(), "suite": pa.string(),
    "task_id": pa.string(), "seed": pa.int64(), "init_state": pa.int64(), "language": pa.string(),
    "success": pa.bool_(), "safe": pa.bool_(), "sbu": pa.bool_(), "vsi": pa.float64(),
    "worst_spec": pa.string(), "violating_step": pa.int64(), "first_violation_step": pa.int64(),
    "n_active": pa.int64(), "n_steps": pa.int64(), "dt": pa.float64(), "trajectory": pa.string(),
    "source": pa.string(), "registry_hash": pa.string(), "scorer_version": pa.int64(),
    # what the force signals held ("substep_peak" or "control"), and the --force-sampling
    # option scored under ("peak" or "control"): a store re-scores rows of another option
    "force_sampling": pa.string(), "force_sampling_option": pa.string(),
    # provenance (record meta.policy): how the model was served, so comparisons stay honest
    "policy_adapter": pa.string(), "policy_model_id": pa.string(), "replan_steps": pa.int64(),
    "image_size": pa.string(),
    # a safe episode's closest call (score.EpisodeOutcome); null when unsafe
    "closest_spec": pa.string(), "closest_margin": pa.float64(), "closest_step": pa.int64(),
    # settled start (replay.record.settle): null when the record does not say (older or other hosts)
    "settled": pa.bool_(), "settle_steps": pa.int64(),
    # the rollout protocol (record meta.protocol): its name, and whether the run was that
    # harness's own (no preset value overridden); null for records that do not say
    "protocol": pa.string(), "protocol_native": pa.bool_(),
}
SPEC_COLUMNS = {
    "episode_id": pa.string(), "family": pa.string(), "spec_id": pa.string(), "report_only": pa.bool_(),
    "active": pa.bool_(), "reason": pa.string(), "rho": pa.float64(), "extreme": pa.float64(),
    "extreme_step": pa.int64(), "first_violation_step": pa.int64(), "depth": pa.float64(),
    "threshold": pa.float64(), "op": pa.string(), "signal": pa.string(), "unit": pa.string(),
}


# ----------------------------------------------------------------------------- rows

_CLAUSE_FIELDS = ("active", "reason", "rho", "extreme", "extreme_step", "first_violation_step", "depth",
                  "threshold")


class _Columns:
    """Scored episodes of one job gathered as Parquet columns (no per-row dicts)."""

    def __init__(self, reg: Registry, force_sampling: str = "peak"):
        self.plan = clause_plan(reg)
        self.registry_hash = reg.hash
        self.force_sampling = force_sampling
        self.episode = {name: [] for name in EPISODE_COLUMNS}
        self.clause = {name: [] for name in _CLAUSE_FIELDS}
        self.origins: list[str] = []  # each row's source as given (for error messages)
        self.staged: list[str | None] = []  # each row's staged trajectory, None when referenced in place

    def add(self, rec, out: EpisodeOutcome, *, source: str, trajectory: str, origin: str,
            staged: str | None) -> None:
        self.origins.append(origin)
        self.staged.append(staged)
        meta = rec.meta
        row = (rec.episode_id, rec.model, rec.benchmark, rec.suite, rec.task_id, _int_or_none(meta.get("seed")),
               _int_or_none(meta.get("init_state")), meta.get("language"), rec.success, out.safe, out.sbu,
               out.vsi, out.worst_spec, out.violating_step, out.episode_first_violation_step, out.n_active,
               rec.n_steps, rec.dt, trajectory, source, self.registry_hash, SCORER_VERSION,
               scored_channels(rec, self.force_sampling).sampling, self.force_sampling,
               *_provenance(meta.get("policy")),
               out.closest_spec, out.closest_margin, out.closest_step, _bool_or_none(meta.get("settled")),
               _int_or_none(meta.get("settle_steps")), *_protocol(meta.get("protocol")))
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


def _provenance(policy) -> tuple:
    """(adapter, model id, replan steps, 'HxW') from a record's `meta.policy`; nulls if absent or odd."""
    if not isinstance(policy, dict):
        return None, None, None, None
    size = policy.get("image_size")
    size = f"{int(size[0])}x{int(size[1])}" if isinstance(size, (list, tuple)) and len(size) == 2 else None
    text = [v if isinstance(v, str) else None for v in (policy.get("adapter"), policy.get("model_id"))]
    return text[0], text[1], _int_or_none(policy.get("replan_steps")), size


def _protocol(protocol) -> tuple:
    """(name, native) from a record's `meta.protocol`; nulls if absent or odd."""
    if not isinstance(protocol, dict) or not isinstance(protocol.get("name"), str):
        return None, None
    return protocol["name"], _bool_or_none(protocol.get("native"))


def _bool_or_none(x) -> bool | None:
    return x if isinstance(x, bool) else None


def _int_or_none(x) -> int | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def trajectory_name(episode_id: str) -> str:
    """A file name for an episode id: readable, filesystem-safe and collision-free."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "__", episode_id).strip("_")[:120]
    return f"{slug}-{hashlib.sha1(episode_id.encode()).hexdigest()[:8]}.npz"


_SPAN_BUFFERS = threading.local()  # one buffer per thread: a line is decoded before the next is read


def _span_buffer() -> bytearray:
    buffer = getattr(_SPAN_BUFFERS, "buffer", None)
    if buffer is None:
        buffer = _SPAN_BUFFERS.buffer = bytearray()
    return buffer


def _load_item(kind: str, payload, source: str) -> tuple[EpisodeRecord, bool]:
    """(record, converted) of one job item; `converted` when it did not come from `.npz`.

    Raises RecordError for bad input, and turns any other exception into one too: a
    reader bug on one odd file must not sink the archive (DESIGN.md, "Bad input").
    """
    try:
        return _read_item(kind, payload, source)
    except RecordError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported per item; the message asks for a bug report
        raise RecordError(f"unexpected {type(exc).__name__} while reading ({exc}); this record was skipped, "
                          "please report it as a bug", file=source) from None


def _read_item(kind: str, payload, source: str) -> tuple[EpisodeRecord, bool]:
    if kind == "span":
        try:
            line = read_span(*payload, into=_span_buffer())
        except OSError as exc:
            raise RecordError(f"cannot read ({exc.strerror})", file=source) from None
        return record_from_json_bytes(line, source=source), True
    if payload.endswith(".npz"):
        return record_from_npz(payload, source=payload), False
    return load_record(payload), True


def _trajectory(rec: EpisodeRecord, payload, converted: bool, store: str, copy: bool, source: str
                ) -> tuple[str, str | None]:
    """(store-relative trajectory path, staged file or None) of the episode's columnar record.

    A record the store keeps (converted from JSON, or copied) is written to the staging
    area; `commit_trajectory` moves it to the returned path once the episode is accepted.
    """
    if not (converted or copy):
        return _relpath(payload, store), None
    name = trajectory_name(rec.episode_id)
    dest = Path(store) / TRAJECTORIES / name
    unique = hashlib.sha1(source.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    staged = Path(store) / STAGING / f"{name[:-4]}.{unique}.npz"
    if converted:
        _write_staged(staged, record_to_npz_bytes(_relocated(rec, dest)))
    else:
        staged.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(payload, staged)
    return os.path.relpath(dest, store), str(staged)


def _write_staged(path: Path, data: bytes) -> None:
    """Writes a staged trajectory in place, creating the staging area on first use.

    No temp file and rename: the name is unique to its source, and `commit_trajectory`'s
    rename is what puts it where readers look, so a half-written staged file (a killed
    worker) is never committed, and the next run removes it. Mode 0644 under the usual umask.
    """
    try:
        fh = open(path, "wb")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "wb")
    with fh:
        fh.write(data)


def commit_trajectory(store: str | os.PathLike, staged: str | None, trajectory: str, *, accept: bool) -> None:
    """Moves an accepted episode's staged trajectory into place, or drops a rejected one's."""
    if staged is None:
        return
    if accept:
        os.replace(staged, Path(store) / trajectory)
    else:
        Path(staged).unlink(missing_ok=True)


def _relocated(rec, dest: Path):
    """`rec` with a relative MJCF path rewritten so it still resolves from `dest`."""
    if rec.replay is None or rec.replay.mjcf_is_xml:
        return rec
    mjcf = resolve_mjcf(rec)
    return dataclasses.replace(rec, replay=dataclasses.replace(
        rec.replay, mjcf=os.path.relpath(os.path.abspath(mjcf), os.path.abspath(dest.parent))))


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
    origins: list[str] = dataclasses.field(default_factory=list)  # per row: the source as given
    staged: list[str | None] = dataclasses.field(default_factory=list)  # per row: see commit_trajectory


_LOAD_CHUNK = 64  # items loaded at once: enough to batch numpy calls, few enough to bound memory
# ...and at most this many bytes of arrays: 64 records near MAX_RECORD_BYTES (crafted, or
# very long episodes) would otherwise be held at once. Real chunks are ~15 MB.
_LOAD_BYTES = 256 * 2**20


def _record_bytes(rec: EpisodeRecord) -> int:
    """Bytes of the record's arrays (what holding it costs)."""
    parts = [rec.eef_pos, rec.body_pos, rec.body_quat, rec.joint_torque, rec.joint_torque_peak, rec.gripper_contact,
             rec.actions, rec.t]
    if rec.contacts is not None:
        parts += [rec.contacts.step, rec.contacts.a, rec.contacts.b, rec.contacts.force, rec.contacts.force_peak]
    if rec.replay is not None:
        parts += [rec.replay.qpos, rec.replay.qvel, rec.replay.mocap_pos, rec.replay.mocap_quat, rec.replay.ctrl]
    return sum(a.nbytes for a in parts if a is not None)


def _run_job(job: _Job, store: str, copy: bool, registry: Registry | None = None,
             force_sampling: str = "peak") -> _Batch:
    reg = registry or _WORKER_STATE["registry"]
    columns = _Columns(reg, force_sampling)
    errors = []
    items = job.items
    start = 0
    while start < len(items):
        loaded, chunk_errors, held, taken = [], {}, 0, 0
        for k, (kind, payload, source) in enumerate(items[start:start + _LOAD_CHUNK]):
            taken = k + 1
            if kind == "error":  # found while planning (an unreadable file)
                chunk_errors[k] = payload
                continue
            try:
                loaded.append((k, *_load_item(kind, payload, source)))
            except RecordError as exc:
                chunk_errors[k] = _error_row(exc, source)
                continue
            held += _record_bytes(loaded[-1][1])
            if held > _LOAD_BYTES:
                break
        # values far outside physical ranges overflow the signals' arithmetic: no numpy warnings on
        # stderr, and an episode whose robustness came out infinite is refused (`_unphysical`)
        with np.errstate(all="ignore"):
            outcomes = score_outcomes([rec for _, rec, _ in loaded], registry=reg, force_sampling=force_sampling)
        for (k, rec, converted), out in zip(loaded, outcomes):
            kind, payload, source = items[start + k]
            if not isinstance(out, RecordError):
                out = _unphysical(rec, out, columns.plan) or out
            if isinstance(out, RecordError):
                chunk_errors[k] = _error_row(out, source)
                continue
            trajectory, staged = _trajectory(rec, payload, converted, store, copy, source)
            columns.add(rec, out, source=_store_relative(source, store), trajectory=trajectory, origin=source,
                        staged=staged)
        errors.extend(chunk_errors[k] for k in sorted(chunk_errors))
        start += taken
    episodes, specs = columns.tables()
    return _Batch(episodes, specs, [len(columns.plan)] * episodes.num_rows, errors, len(job.items),
                  columns.origins, columns.staged)


def _unphysical(rec: EpisodeRecord, out: EpisodeOutcome, plan) -> RecordError | None:
    """A RecordError when an active clause's robustness is not a number or infinite other than
    the vacuous +inf of a gate that never opened (no extreme step): the record holds values
    (positions, forces, dt) so far outside physical ranges that the arithmetic overflowed, and a
    store never holds such a rho."""
    for clause, active, rho, step in zip(plan, out.active, out.rho, out.extreme_step):
        if not active or rho is None or math.isfinite(rho) or (rho == math.inf and step is None):
            continue
        return RecordError(f"robustness of {clause.spec.spec_id} came out {rho} (its signal "
                           f"{clause.spec.signal} overflowed): the record holds values far outside physical "
                           "ranges; not scored", file=rec.source, episode=rec.episode_id)
    return None


@dataclasses.dataclass(frozen=True)
class _Run:
    """What an engine needs to score jobs for one `score_archive` call."""

    store: str
    copy: bool
    registry: Registry
    registry_path: object
    workers: int
    force_sampling: str = "peak"


def local_engine(jobs: Iterator[_Job], run: _Run) -> Iterator[_Batch]:
    """The default engine: in this process, or a process pool when `run.workers > 1`."""
    if run.workers <= 1:
        for job in jobs:
            yield _run_job(job, run.store, run.copy, run.registry, run.force_sampling)
        return
    _WORKER_STATE["registry"] = run.registry
    pool = get_context("fork" if os.name == "posix" else "spawn").Pool(
        run.workers, initializer=_worker_init, initargs=(run.registry_path, run.registry.hash))
    try:
        yield from pool.imap(_JobRunner(run.store, run.copy, run.force_sampling), jobs)
    finally:
        pool.close()
        pool.join()


class _JobRunner:
    """Picklable callable for the pool (closures are not)."""

    def __init__(self, store: str, copy: bool, force_sampling: str = "peak"):
        self.store, self.copy, self.force_sampling = store, copy, force_sampling

    def __call__(self, job: _Job):
        return _run_job(job, self.store, self.copy, force_sampling=self.force_sampling)
