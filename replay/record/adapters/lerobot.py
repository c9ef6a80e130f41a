"""Serving a LeRobot checkpoint (`safevla serve --policy lerobot:PATH`), in LeRobot's environment.

LeRobot needs torch and pins its own numpy and torch, which do not co-install with the
LIBERO stack here (docs/libero.md), so the checkpoint is served over OpenPI's protocol
(`replay.record.serve`) and scored with `--policy openpi://HOST:PORT`. This module runs in the
server's environment and imports only LeRobot, torch and numpy.

Loading is LeRobot's own: `PreTrainedConfig.from_pretrained`, the factory's
`get_policy_class(type).from_pretrained` and `make_pre_post_processors(..., pretrained_path=)`
(the normaliser statistics and tokeniser saved with the checkpoint). Observations are mapped
the way LeRobot's LIBERO environment does, with its own code: the request (OpenPI's LIBERO
keys, plus the `extra_observations` this server's metadata asks for) is turned back into the
raw observation `lerobot.envs.libero.LiberoEnv` returns with `obs_type="pixels_agent_pos"`
(`pixels.image` = agentview, `pixels.image2` = wrist, as rendered; `robot_state`: `eef.pos`,
`eef.quat`, `eef.mat` (the controller's rotation matrix), `gripper.qpos`, `gripper.qvel`,
`joints.pos`, `joints.vel`), then goes through `preprocess_observation`, the task string, and
the env processor `make_env_pre_post_processors` picks for the checkpoint (LIBERO's
`LiberoProcessorStep`: 180-degree flip, 8-float state from `eef.pos/quat` and
`gripper.qpos`; XVLA's own: agentview flip, 20-float state from `eef.pos/mat`), the policy's
preprocessor, `select_action` and its postprocessor, as `lerobot_eval` does.

Each request answers one chunk: the policy is reset and asked `n_action_steps` times (its
action queue), so `--replan-steps` up to that number executes LeRobot's own chunking. The
policy's per-episode state (its observation and action queues) thus lives inside one
request, and `safevla serve` runs one request at a time: a connection never pops another
connection's actions, and each env worker's episode plan is its own client's.
"""

from __future__ import annotations

import numpy as np

from replay.record.observations import axis_angle_to_quat, rotate_180


# request key (the client's `EXTRA_OBSERVATIONS`) -> its place and shape in LiberoEnv's `robot_state`
ROBOT_STATE = {"observation/eef_quat": ("eef", "quat", (4,)), "observation/eef_mat": ("eef", "mat", (3, 3)),
               "observation/gripper_qvel": ("gripper", "qvel", (2,)),
               "observation/joint_pos": ("joints", "pos", (7,)), "observation/joint_vel": ("joints", "vel", (7,))}


def libero_raw_observation(request: dict) -> dict:
    """What `LiberoEnv` (obs_type pixels_agent_pos) returns through a one-env vector env, from a request.

    The `ROBOT_STATE` keys the request carries go in as sent; without `observation/eef_quat`
    the quaternion is rebuilt from the axis-angle of `observation/state`, and a value no key
    carries is left out (the processor that reads it says which).
    """
    state = np.asarray(request["observation/state"], dtype=np.float64)
    if state.shape != (8,):
        raise ValueError(f"observation/state has shape {state.shape}; expected (8,): eef pos, axis-angle, gripper")
    def batch(x):  # LeRobot evaluates through a vector env: every array has a leading env axis
        return np.array(x, dtype=np.float64)[None]  # a writable copy: torch.from_numpy warns on read-only buffers
    robot_state = {"eef": {"pos": batch(state[:3]), "quat": batch(axis_angle_to_quat(state[3:6]))},
                   "gripper": {"qpos": batch(state[6:8])}}
    for key, (group, name, shape) in ROBOT_STATE.items():
        if key in request:
            value = np.asarray(request[key], dtype=np.float64)
            if value.shape != shape:
                raise ValueError(f"{key} has shape {value.shape}; expected {shape} (LiberoEnv's robot_state.{group}.{name})")
            robot_state.setdefault(group, {})[name] = batch(value)
    return {
        # OpenPI's example turned the rendered images by 180 degrees; LeRobot turns them itself
        "pixels": {"image": batch_image(request["observation/image"]),
                   "image2": batch_image(request["observation/wrist_image"])},
        "robot_state": robot_state,
    }


def batch_image(upright: np.ndarray) -> np.ndarray:
    """A request's (upright) image as LiberoEnv renders it, with the vector env's leading axis."""
    return rotate_180(np.asarray(upright, dtype=np.uint8))[None].copy()


class LeRobotServedPolicy:
    """A LeRobot checkpoint behind OpenPI's `infer(obs) -> {"actions": (chunk, 7)}` interface."""

    def __init__(self, path: str, *, device: str | None = None):
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.envs.configs import LiberoEnv
        from lerobot.envs.factory import make_env_pre_post_processors
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors
        self.path = str(path)
        cfg = PreTrainedConfig.from_pretrained(self.path)
        if device:
            cfg.device = device
        self.policy = get_policy_class(cfg.type).from_pretrained(self.path, config=cfg)
        self.policy.eval()
        overrides = {"device_processor": {"device": str(cfg.device)}}
        self.preprocessor, self.postprocessor = make_pre_post_processors(
            cfg, pretrained_path=self.path, preprocessor_overrides=overrides)
        self.env_preprocessor, self.env_postprocessor = make_env_pre_post_processors(env_cfg=LiberoEnv(),
                                                                                     policy_cfg=cfg)
        self.n_action_steps = int(getattr(cfg, "n_action_steps", 1) or 1)
        self.metadata = {"adapter": "lerobot", "model_id": self.path, "policy_type": cfg.type,
                         "n_action_steps": self.n_action_steps, "extra_observations": list(ROBOT_STATE)}

    def infer(self, request: dict) -> dict:
        import torch
        from lerobot.envs.utils import preprocess_observation
        batch = preprocess_observation(libero_raw_observation(request))
        batch["task"] = [str(request.get("prompt", ""))]
        try:
            batch = self.env_preprocessor(batch)
        except KeyError as exc:  # a robot_state value the request did not carry
            raise ValueError(f"LeRobot's env processor for {self.metadata['policy_type']} reads robot_state "
                             f"{exc.args[0]!r}, which the request lacks; send {', '.join(ROBOT_STATE)} (this "
                             "server's metadata asks for them under extra_observations)") from None
        batch = self.preprocessor(batch)
        self.policy.reset()  # every request starts a fresh chunk (OpenPI's protocol has no episode reset)
        actions = []
        with torch.inference_mode():
            for _ in range(self.n_action_steps):
                action = self.postprocessor(self.policy.select_action(batch))
                action = self.env_postprocessor({"action": action})["action"]
                actions.append(np.asarray(action.to("cpu").numpy(), dtype=np.float32).reshape(-1))
        return {"actions": np.stack(actions)}

    def close(self) -> None:  # symmetry with the other adapters
        pass
