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
    store, _, _ = scored
    manifest = {"sources": [source, "../arch"]}
    assert store_roots(store, manifest) == (os.path.realpath(store), os.path.realpath(store.parent / "arch"))
    ignored, = P.ignored_sources(store, manifest)
    assert why in ignored


def test_a_file_source_allows_that_file_only(scored):
    """A record file named as the archive allows itself, not the folder it is in."""
    store, archive, _ = scored
    roots = store_roots(store, {"sources": ["../arch/ep_000000.npz"]})
    assert roots == (os.path.realpath(store), os.path.realpath(archive / "ep_000000.npz"))
    assert is_inside(archive / "ep_000000.npz", roots)
    assert not is_inside(archive / "ep_000001.npz", roots)


def test_score_keeps_only_relative_sources_of_an_earlier_manifest(scored):
    """Validated where written too: a re-score no longer carries an absolute source forward."""
    store, archive, _ = scored
    set_sources(store, ["/etc", "../arch", "../moved_away", "../" * 40, 7])
    score_archive([archive], store, progress=False)
    assert json.loads((store / "manifest.json").read_text())["sources"] == ["../arch", "../moved_away"]


def test_a_lone_string_source_is_one_source(scored):
    store, _, _ = scored
    assert store_roots(store, {"sources": "/etc"}) == (os.path.realpath(store),)
    assert P.ignored_sources(store, {"sources": "/etc"}) == [
        "'/etc' is absolute (a store names its archives relative to itself)"]
