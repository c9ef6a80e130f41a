"""A run store's paths are data, not trust: its manifest's `sources` are
validated where `safevla score` writes them and where readers (`safevla replay`, the dashboard)
read them: relative, a directory or a record file, never widened to a parent folder. Each case
builds a small synthetic store, crafts its manifest or table the way a hostile or broken store
would, and runs the real `safevla replay` process where the finding was a CLI one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scoring.records.synthetic import make_archive
from scoring.store import paths as P
from scoring.store.paths import is_inside, store_roots
from scoring.store.write import score_archive


@pytest.fixture
def scored(tmp_path) -> tuple[Path, Path, pd.DataFrame]:
    """(store, archive, episodes) of 3 synthetic episodes referenced in place (source "../arch")."""
    archive = tmp_path / "arch"
    make_archive(archive, 3, seed=3, n_steps=30, contacts_per_step=3)
    store = tmp_path / "store"
    score_archive([archive], store, progress=False)
    return store, archive, pd.read_parquet(store / "episodes.parquet")


def set_sources(store: Path, sources) -> None:
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["sources"] = sources
    (store / "manifest.json").write_text(json.dumps(manifest))


def set_trajectory(store: Path, row: int, path: str) -> None:
    eps = pd.read_parquet(store / "episodes.parquet")
    eps.loc[row, "trajectory"] = path
    eps.to_parquet(store / "episodes.parquet")


def replay(store: Path, episode: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scoring.cli", "replay", str(store), episode, "--out", str(out)],
                          capture_output=True, text=True, env={**os.environ, "MUJOCO_GL": "egl"})


def test_replay_refuses_a_trajectory_under_an_absolute_source(scored, tmp_path):
    """`sources: ["/etc"]` let `safevla replay` stat /etc/passwd and fail on its suffix."""
    store, _, eps = scored
    set_sources(store, ["/etc"])
    set_trajectory(store, 0, "/etc/passwd")
    out = replay(store, eps["episode_id"].iat[0], tmp_path / "clip.mp4")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line, = out.stderr.splitlines()
    assert "trajectory '/etc/passwd' is outside the run store and its archive; refused" in line, line
    assert "'/etc' is absolute" in line and "unsupported suffix" not in line, line
    assert not (tmp_path / "clip.mp4").exists()


def test_a_missing_source_is_not_widened_to_its_parent(scored, tmp_path):
    """A missing relative source allowed its parent folder: `../arch/gone` opened all of `../arch`."""
    store, archive, eps = scored
    set_sources(store, ["../arch/gone"])
    real = os.path.realpath
    assert store_roots(store, {"sources": ["../arch/gone"]}) == (real(store),)
    assert not is_inside(archive / "ep_000000.npz", store_roots(store, {"sources": ["../arch/gone"]}))
    assert P.ignored_sources(store, {"sources": ["../arch/gone"]}) == ["'../arch/gone' does not exist"]
    out = replay(store, eps["episode_id"].iat[0], tmp_path / "clip.mp4")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "is outside the run store and its archive; refused" in out.stderr, out.stderr
    assert "'../arch/gone' does not exist" in out.stderr


@pytest.mark.parametrize("source,why", [
    ("/etc", "is absolute"),
    ("../" * 40, "resolves to the filesystem root"),
    (7, "is not a path"),
    ("", "is not a path"),
    ("../arch/ep_000000.json", "does not exist"),
])
def test_sources_that_allow_nothing(scored, source, why):
    store, archive, _ = scored
    manifest = {"sources": [source, "../arch"]}
    assert store_roots(store, manifest, [archive]) == (os.path.realpath(store), os.path.realpath(archive))
    ignored, = P.ignored_sources(store, manifest, [archive])
    assert why in ignored


def test_a_file_source_allows_that_file_only(scored):
    """A record file named as the archive allows itself, not the folder it is in."""
    store, archive, _ = scored
    roots = store_roots(store, {"sources": ["../arch/ep_000000.npz"]}, [archive / "ep_000000.npz"])
    assert roots == (os.path.realpath(store), os.path.realpath(archive / "ep_000000.npz"))
    assert is_inside(archive / "ep_000000.npz", roots)
    assert not is_inside(archive / "ep_000001.npz", roots)


def test_score_keeps_only_relative_sources_of_an_earlier_manifest(scored):
    """Validated where written too: a re-score no longer carries an absolute source forward."""
    store, archive, _ = scored
    set_sources(store, ["/etc", "../arch", "../moved_away", "../" * 40, 7])
    score_archive([archive], store, progress=False)
    assert json.loads((store / "manifest.json").read_text())["sources"] == ["../arch", "../moved_away"]


def test_a_source_outside_the_store_needs_the_user_to_name_it(scored, tmp_path):
    """A relative source may climb out of the store (`../arch`, what `safevla score ARCHIVE --out
    STORE` writes) only into a folder the user named where they read: a store handed over by
    someone else cannot name `../../../../etc` or a folder of your home for you."""
    store, archive, eps = scored
    real = os.path.realpath
    climbing = os.path.relpath("/etc", store)  # ../../../../etc from wherever pytest's tmp lies
    set_sources(store, [climbing, "../arch"])
    assert store_roots(store, {"sources": [climbing, "../arch"]}) == (real(store),)
    why_etc, why_arch = P.ignored_sources(store, {"sources": [climbing, "../arch"]})
    assert "lies outside the store, at /etc, a folder you did not name" in why_etc
    assert f"--archive {real(archive)}" in why_arch
    # naming the archive opens it, and it alone: /etc stays shut
    assert store_roots(store, {"sources": [climbing, "../arch"]}, [archive]) == (real(store), real(archive))
    # naming the recording a scored suite folder belongs to opens it whole (its shared models/)
    (archive / "suite").mkdir()
    assert store_roots(store, {"sources": ["../arch/suite"]}, [archive]) == (
        real(store), real(archive / "suite"), real(archive))
    assert store_roots(store, {"sources": ["../arch/suite"]}, [archive / "suite"]) == (
        real(store), real(archive / "suite"))
    # a folder inside the store needs no naming
    (store / "inner").mkdir()
    assert store_roots(store, {"sources": ["inner"]}) == (real(store), real(store / "inner"))

    eid = eps["episode_id"].iat[0]
    out = replay(store, eid, tmp_path / "clip.gif")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line, = out.stderr.splitlines()
    assert "is outside the run store and its archive; refused" in line and f"--archive {real(archive)}" in line, line
    assert not (tmp_path / "clip.gif").exists()
    for named in (["--archive", str(archive)], []):  # on the command line, or in $SAFEVLA_ARCHIVES
        env = {**os.environ, "MUJOCO_GL": "egl", **({} if named else {P.ENV_ARCHIVES: str(archive)})}
        out = subprocess.run([sys.executable, "-m", "scoring.cli", "replay", str(store), eid, "--out",
                              str(tmp_path / "clip.gif"), *named], capture_output=True, text=True, env=env)
        # the trajectory was opened and read: these synthetic records carry no scene to replay
        assert out.returncode == 2 and "outside the run store" not in out.stderr, out.stderr
        assert "has no replay state" in out.stderr, out.stderr


def test_a_model_beside_the_named_suite_says_which_folder_to_name(tmp_path):
    """A suite folder scored alone whose records share their recording's models/ (the layout
    `safevla rollout` writes): naming the suite leaves the model outside, and the refusal names
    the folder that holds both; naming that folder opens them."""
    import dataclasses

    from scoring.records.io import save_record
    from scoring.records.synthetic import make_record

    rec = make_record(__import__("numpy").random.default_rng(1), episode_id="libero-spatial/task_0/p/ep_0",
                      n_steps=20, contacts_per_step=1, with_replay=True)
    rec = dataclasses.replace(rec, replay=dataclasses.replace(rec.replay, mjcf="../models/scene.xml"))
    (tmp_path / "rec" / "models").mkdir(parents=True)
    (tmp_path / "rec" / "models" / "scene.xml").write_text("<mujoco/>")
    save_record(rec, tmp_path / "rec" / "suite" / "ep_0.npz")
    score_archive([tmp_path / "rec" / "suite"], tmp_path / "store", progress=False)

    def replay_named(*archives):
        named = [x for a in archives for x in ("--archive", str(a))]
        return subprocess.run([sys.executable, "-m", "scoring.cli", "replay", str(tmp_path / "store"), rec.episode_id,
                               "--out", str(tmp_path / "c.gif"), *named], capture_output=True, text=True,
                              env={**os.environ, "MUJOCO_GL": "egl"})
    out = replay_named(tmp_path / "rec" / "suite")
    line, = out.stderr.splitlines()
    assert out.returncode == 2 and "replay.mjcf" in line, line
    assert f"if that folder is yours, name it: --archive {os.path.realpath(tmp_path / 'rec')}" in line, line
    out = replay_named(tmp_path / "rec")  # the model is opened (an empty scene, replayed as such)
    assert out.returncode == 0 and (tmp_path / "c.gif").stat().st_size > 0, out.stderr


def test_score_says_which_archive_to_name(tmp_path):
    """`safevla score ARCHIVE --out STORE` with the archive beside the store says how to read it back."""
    archive = tmp_path / "arch"
    make_archive(archive, 2, seed=4, n_steps=20, contacts_per_step=1)
    out = subprocess.run([sys.executable, "-m", "scoring.cli", "score", str(archive), "--out", str(tmp_path / "s"),
                          "--no-progress"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"--archive {archive}" in out.stdout.splitlines()[-1], out.stdout
    copied = subprocess.run([sys.executable, "-m", "scoring.cli", "score", str(archive), "--out", str(tmp_path / "c"),
                             "--no-progress", "--copy-trajectories"], capture_output=True, text=True)
    assert copied.returncode == 0 and "--archive" not in copied.stdout, copied.stdout


def test_the_bundled_demo_reads_its_archive_unnamed():
    """The package names its own demo archive: the dashboard opens on it with no arguments."""
    demo = Path(P.__file__).resolve().parents[2] / "assets" / "demo" / "store"
    manifest = json.loads((demo / "manifest.json").read_text())
    assert store_roots(demo, manifest) == (os.path.realpath(demo), os.path.realpath(P.DEMO_ARCHIVE))
    assert P.ignored_sources(demo, manifest) == []


def test_a_lone_string_source_is_one_source(scored):
    store, _, _ = scored
    assert store_roots(store, {"sources": "/etc"}) == (os.path.realpath(store),)
    assert P.ignored_sources(store, {"sources": "/etc"}) == [
        "'/etc' is absolute (a store names its archives relative to itself)"]
