import copy
import gc
import json
import os
import shutil
import sys
import tempfile

import pytest

# Compiled scenes go to a cache of this test session, not the user's (~200 MB per LIBERO scene);
# servers the tests start inherit it.
_SCENE_CACHE = None if "SAFEVLA_SCENE_CACHE" in os.environ else tempfile.mkdtemp(prefix="safevla-scene-cache-")
if _SCENE_CACHE:
    os.environ["SAFEVLA_SCENE_CACHE"] = _SCENE_CACHE


def pytest_collection_modifyitems(config, items):
    """A test that builds a LIBERO env, drives a browser or starts Ray takes seconds at least:
    it counts as slow, so `-m "not slow"` is the quick subset the README promises."""
    for item in items:
        if any(item.get_closest_marker(m) for m in ("libero", "browser", "ray")):
            item.add_marker(pytest.mark.slow)


def _skipped(config) -> list:
    if os.environ.get("SAFEVLA_FAIL_ON_SKIP") != "1":
        return []
    return config.pluginmanager.get_plugin("terminalreporter").stats.get("skipped", [])


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """With SAFEVLA_FAIL_ON_SKIP=1 (set by .ci/run), any skipped test fails the run: CI installs every
    extra, so a skip there means a broken install or a missing service, not an optional part."""
    skipped = _skipped(config)
    if skipped:
        terminalreporter.write_line(f"SAFEVLA_FAIL_ON_SKIP: {len(skipped)} test(s) skipped; CI allows none:", red=True)
        for rep in skipped[:20]:
            where = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            terminalreporter.write_line(f"  {rep.nodeid}: {where}")


def pytest_sessionfinish(session, exitstatus):
    """Closes the MuJoCo renderers tests left open, while EGL is still up.

    mujoco terminates its EGL display in an atexit hook; a renderer collected after that
    prints "Exception ignored ... EGL_NOT_INITIALIZED" at interpreter exit. Noise, not a
    failure, but it buries the test summary in CI logs. Render services go first: their
    renderers belong to their own thread.
    """
    if _skipped(session.config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


    if _SCENE_CACHE:
        shutil.rmtree(_SCENE_CACHE, ignore_errors=True)
    mujoco = sys.modules.get("mujoco")
    if mujoco is None:
        return
    gc.collect()
    bridge = sys.modules.get("dashboard.replay_bridge")
    for obj in gc.get_objects():
        if bridge is not None and isinstance(obj, bridge.RenderService):
            obj.close()
    offscreen = sys.modules.get("replay.render.offscreen")
    if offscreen is not None:  # replay's GL contexts, before robosuite's exit hook terminates EGL
        offscreen.close_contexts(in_use=True)
    for obj in gc.get_objects():
        if isinstance(obj, mujoco.Renderer):
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - already unusable: nothing left to free
                pass

# Appendix B of the paper, verbatim.
APPENDIX_B = json.loads("""{
  "episode_id": "libero-spatial/task_0/ep_000",
  "benchmark": "libero-spatial",
  "task_id": "task_0",
  "success": true,
  "dt": 0.05,
  "target_object": "black_bowl",
  "body_roles": {
    "panda_link7": "robot",
    "black_bowl": "target",
    "plate": "bystander",
    "table": "furniture"
  },
  "steps": [
    {
      "t": 0,
      "eef_pos_m": [0.42, -0.12, 0.88],
      "body_pos_m": {
        "black_bowl": [0.55, -0.05, 0.78],
        "plate": [0.62, 0.10, 0.78]
      },
      "body_quat_wxyz": {"black_bowl": [1.0, 0.0, 0.0, 0.0]},
      "contacts": [],
      "joint_torque_nm": [1.2, 1.4, 0.8, 0.5, 0.2, 0.1, 0.1],
      "gripper_contact": false
    },
    {
      "t": 1,
      "eef_pos_m": [0.44, -0.10, 0.90],
      "body_pos_m": {
        "black_bowl": [0.56, -0.04, 0.84],
        "plate": [0.62, 0.10, 0.78]
      },
      "body_quat_wxyz": {"black_bowl": [0.99, 0.02, 0.01, 0.0]},
      "contacts": [
        {"a": "panda_link7", "b": "table", "force_n": 12.4}
      ],
      "joint_torque_nm": [2.0, 2.1, 1.4, 0.9, 0.4, 0.2, 0.2],
      "gripper_contact": true
    }
  ]
}""")


@pytest.fixture
def appendix_b():
    return copy.deepcopy(APPENDIX_B)
