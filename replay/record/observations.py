"""What a vision-language-action policy sees: camera images, proprioception, the instruction.

LIBERO's observation dict (robosuite's) already carries proprioception in every mode:
`robot0_eef_pos` (3), `robot0_eef_quat` (4, xyzw), `robot0_gripper_qpos` (2) and
`robot0_gripper_qvel`, `robot0_joint_pos`, `robot0_joint_vel`. LeRobot's LIBERO env also
gives its policies the arm controller's end-effector rotation (`robot_state.eef.mat`, which
XVLA reads), which robosuite's observation lacks: the LIBERO host adds it as `EEF_MAT`,
from `controller_eef_mat(env)`. Camera
images are there only when the env renders them (`use_camera_obs=True`), which costs
tens of milliseconds per frame on CPU, so a host renders only the cameras its policy
asks for (`ObservationSpec`); scripted profiles ask for none and run at full speed.

Camera names here are the short, host-independent ones: `agentview` (the third-person
view LIBERO's demonstrations were rendered from) and `wrist` (robosuite's
`robot0_eye_in_hand`). Images are HxWx3 uint8 as the renderer returns them: OpenGL's
bottom-up row order, which is why OpenPI's LIBERO example rotates them by 180 degrees.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# short name -> robosuite camera; the image arrives as obs[f"{robosuite name}_image"]
CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}
DEFAULT_IMAGE_SIZE = (256, 256)  # LIBERO's standard evaluation resolution (height, width)
EEF_MAT = "robot0_eef_mat"  # the host's key for `controller_eef_mat`


@dataclasses.dataclass(frozen=True)
class ObservationSpec:
    """Which cameras to render and at what size.

    Attributes:
      cameras: short camera names (keys of `CAMERAS`); empty renders nothing.
      image_size: (height, width) in pixels of every rendered camera.
    """

    cameras: tuple[str, ...] = ()
    image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE

    def __post_init__(self):
        unknown = [c for c in self.cameras if c not in CAMERAS]
        if unknown:
            raise ValueError(f"unknown camera {unknown[0]!r}; valid cameras: {', '.join(CAMERAS)}")
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras listed twice: {', '.join(self.cameras)}")
        h, w = self.image_size
        if not (isinstance(h, int) and isinstance(w, int) and 8 <= h <= 4096 and 8 <= w <= 4096):
            raise ValueError(f"image_size expects (height, width) of 8..4096 pixels, got {self.image_size!r}")

    @property
    def renders(self) -> bool:
        return bool(self.cameras)

    def host_options(self) -> dict:
        """Keyword arguments for `LiberoHost` (empty when nothing is rendered)."""
        return {"cameras": self.cameras, "image_size": self.image_size} if self.cameras else {}


def parse_cameras(text: str) -> tuple[str, ...]:
    """'agentview,wrist' -> ('agentview', 'wrist'); 'none' or '' -> ()."""
    if text.strip().lower() in ("", "none"):
        return ()
    names = tuple(c.strip() for c in text.split(",") if c.strip())
    ObservationSpec(cameras=names)  # validates the names
    return names


def parse_image_size(text: str | int) -> tuple[int, int]:
    """'256' -> (256, 256); '224x256' -> (224, 256) as height x width."""
    try:
        if isinstance(text, int):
            size = (text, text)
        elif "x" in text.lower():
            h, w = text.lower().split("x", 1)
            size = (int(h), int(w))
        else:
            size = (int(text), int(text))
    except ValueError:
        raise ValueError(f"image size expects N or HxW in pixels, got {text!r}") from None
    ObservationSpec(image_size=size)
    return size


def requested_spec(policy_or_factory: Any, *, image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE,
                   cameras: Sequence[str] | None = None) -> ObservationSpec:
    """The observations a policy asks for: its `cameras` attribute unless `cameras` overrides it."""
    if cameras is None:
        cameras = tuple(getattr(policy_or_factory, "cameras", ()) or ())
    return ObservationSpec(cameras=tuple(cameras), image_size=tuple(int(x) for x in image_size))


def camera_image(obs: Mapping[str, np.ndarray], camera: str) -> np.ndarray:
    """The rendered image of `camera` (short name) from a LIBERO observation, HxWx3 uint8."""
    key = f"{CAMERAS[camera]}_image"
    if key not in obs:
        raise KeyError(f"observation has no {key!r}: the host was not asked to render camera {camera!r} "
                       "(give the policy a `cameras` attribute, or pass --cameras)")
    return obs[key]


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """Axis-angle (3,) of a unit quaternion in robosuite's (x, y, z, w) order, angle in [0, 2pi]."""
    q = np.asarray(quat_xyzw, dtype=np.float64)
    w = min(max(float(q[3]), -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(w) / den


def proprio_state(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """End-effector position (3), orientation as axis-angle (3) and gripper qpos (2): 8 float64s."""
    return np.concatenate([np.asarray(obs["robot0_eef_pos"], dtype=np.float64),
                           quat_to_axis_angle(obs["robot0_eef_quat"]),
                           np.asarray(obs["robot0_gripper_qpos"], dtype=np.float64)])


def controller_eef_mat(env: Any) -> np.ndarray:
    """LeRobot's `robot_state.eef.mat` of a robosuite env: its arm controller's `ee_ori_mat` (3, 3).

    That is the grip site's rotation at the controller's last update, which LeRobot's
    `LiberoEnv` reads. It is not `robot0_eef_quat` as a matrix: that quaternion is the hand
    body's, turned 90 degrees about z from the grip site, and after LIBERO's
    `set_init_state` robosuite's observation of it lags the simulator's state (by up to 2e-3
    in the matrix entries, besides the turn).
    """
    return np.array(env.robots[0].controller.ee_ori_mat, dtype=np.float64)


def rotate_180(image: np.ndarray) -> np.ndarray:
    """The image turned upright (OpenGL rows are bottom-up), contiguous as a network copy needs."""
    return np.ascontiguousarray(image[::-1, ::-1])


def axis_angle_to_quat(axis_angle: np.ndarray) -> np.ndarray:
    """Unit quaternion (x, y, z, w) of an axis-angle vector: the inverse of `quat_to_axis_angle`
    (for angles in [0, pi], where robosuite's quaternions keep w >= 0)."""
    v = np.asarray(axis_angle, dtype=np.float64)
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.array([0.0, 0.0, 0.0, 1.0])
    return np.concatenate([v / angle * math.sin(angle / 2), [math.cos(angle / 2)]])
