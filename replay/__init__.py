"""Everything that touches MuJoCo, in two rooms over a shared floor:

- `replay.record`: live LIBERO rollouts recorded as trajectory records (hosts, recorder, policies, Ray);
- `replay.render`: recorded episodes drawn offscreen, highlighted and exported;
- `replay.scene`: what both use of a scene (asset roots, contact forces).

The rooms never import each other; both import scoring, never dashboard.
"""

import os

# Replay renders offscreen. MuJoCo picks its GL backend at import time, so this must run
# before anything here (or robosuite) imports mujoco; GLFW would need a display.
os.environ.setdefault("MUJOCO_GL", "egl")

from scoring import moved  # noqa: E402

MOVED = {  # issue 17: old module path -> where it lives now (scoring.moved keeps the old one importing)
    "replay.adapters": "replay.record.adapters",
    "replay.adapters.lerobot": "replay.record.adapters.lerobot",
    "replay.adapters.msgpack_numpy": "replay.record.adapters.msgpack_numpy",
    "replay.adapters.openpi": "replay.record.adapters.openpi",
    "replay.cli": "replay.render.cli",
    "replay.contact_forces": "replay.scene.contact_forces",
    "replay.export": "replay.render.export",
    "replay.highlight": "replay.render.highlight",
    "replay.hosts": "replay.record.hosts",
    "replay.hosts.libero": "replay.record.hosts.libero",
    "replay.observations": "replay.record.observations",
    "replay.offscreen": "replay.render.offscreen",
    "replay.policies": "replay.record.policies",
    "replay.policy_api": "replay.record.policy_api",
    "replay.policy_files": "replay.record.policy_files",
    "replay.preview_scene": "replay.render.preview_scene",
    "replay.ray_driver": "replay.record.ray_driver",
    "replay.ray_engine": "replay.record.ray_engine",
    "replay.ray_transport": "replay.record.ray_transport",
    "replay.rollout": "replay.record.rollout",
    "replay.rollout_cli": "replay.record.rollout_cli",
    "replay.scene_assets": "replay.scene.assets",
    "replay.scene_cache": "replay.render.scene_cache",
    "replay.scripted": "replay.record.scripted",
    "replay.serve": "replay.record.serve",
    "replay.settle": "replay.record.settle",
    "replay.triptych_vector": "replay.render.triptych_vector",
}
moved.install(MOVED)
