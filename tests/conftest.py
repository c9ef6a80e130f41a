import copy
import json

import pytest

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
