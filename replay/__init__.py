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
