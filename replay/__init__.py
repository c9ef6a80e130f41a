"""Everything that touches MuJoCo: LIBERO recording, scripted policies, rollouts, replay."""

import os

# Replay renders offscreen. MuJoCo picks its GL backend at import time, so this must run
# before anything here (or robosuite) imports mujoco; GLFW would need a display.
os.environ.setdefault("MUJOCO_GL", "egl")
