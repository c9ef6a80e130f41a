"""The bad-input list of the record schema, one row at a time, each with its exact error."""

import math

import numpy as np
import pytest

from scoring.errors import RecordError, SafeVLAError
from scoring.records.io import record_from_json

EP = "libero-spatial/task_0/ep_000"


def _set(path, value):
    def edit(rec):
        *head, last = path
        node = rec
        for key in head:
            node = node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return edit


_DELETE = object()

BAD_INPUT = [
    # (case, edit, field, message)
    ("missing episode_id", _set(["episode_id"], _DELETE), "episode_id",
     "missing; expected a non-empty string"),
    ("mistyped benchmark", _set(["benchmark"], 3), "benchmark", "expected a non-empty string, got int 3"),
    ("mistyped success", _set(["success"], "yes"), "success", "expected true or false, got 'yes'"),
    ("missing success", _set(["success"], _DELETE), "success", "expected true or false, got None"),
    ("dt zero", _set(["dt"], 0), "dt", "expected a finite number > 0 (seconds per step), got 0.0"),
    ("dt negative", _set(["dt"], -0.05), "dt", "expected a finite number > 0 (seconds per step), got -0.05"),
    ("dt string", _set(["dt"], "0.05"), "dt",
     "expected the control-step duration in seconds (a number > 0), got '0.05'"),
    ("zero steps", _set(["steps"], []), "steps", "expected at least one step, got an empty episode"),
    ("steps missing", _set(["steps"], _DELETE), "steps",
     "missing or not a list; expected one object per control step"),
    ("NaN position", _set(["steps", 1, "eef_pos_m", 0], math.nan), "eef_pos_m",
     "expected finite numbers, found nan at index (1, 0) (step 1)"),
    ("inf torque", _set(["steps", 0, "joint_torque_nm", 3], math.inf), "joint_torque_nm",
     "expected finite numbers, found inf at index (0, 3) (step 0)"),
    ("ragged eef", _set(["steps", 1, "eef_pos_m"], [0.4, 0.1]), "eef_pos_m",
     "expected an array of shape (*, 3); got ragged data: step 1 has 2 values, step 0 has 3"),
    ("short eef everywhere", lambda r: [s.update(eef_pos_m=[0.4, 0.1]) for s in r["steps"]], "eef_pos_m",
     "expected shape (*, 3), got (2, 2)"),
    ("ragged torque", _set(["steps", 1, "joint_torque_nm"], [1.0, 2.0]), "joint_torque_nm",
     "expected an array of shape (2, *); got ragged data: step 1 has 2 values, step 0 has 7"),
    ("field at some steps only", _set(["steps", 1, "joint_torque_nm"], _DELETE), "steps[1].joint_torque_nm",
     "missing at this step but present at others; expected it at every step"),
    ("body set changes", _set(["steps", 1, "body_pos_m"], {"black_bowl": [0.5, 0.0, 0.8]}), "steps[1].body_pos_m",
     "expected the same bodies at every step (black_bowl, plate), got black_bowl"),
    ("unnormalised quaternion", _set(["steps", 1, "body_quat_wxyz", "black_bowl"], [2.0, 0.0, 0.0, 0.0]),
     "body_quat_wxyz.black_bowl", "expected a unit quaternion (w, x, y, z), got norm 2 at step 1"),
    ("unknown role", _set(["body_roles", "plate"], "obstacle"), "body_roles.plate",
     "unknown role 'obstacle'; valid roles: robot, gripper, target, bystander, furniture, other"),
    ("unknown body in contacts", _set(["steps", 1, "contacts", 0, "b"], "sofa"), "steps[1].contacts",
     "unknown body 'sofa': every contact body must have a role in body_roles; known bodies: "
     "panda_link7, black_bowl, plate, table"),
    ("unknown posed body", _set(["steps", 0, "body_pos_m", "cup"], [0, 0, 0]), "steps[1].body_pos_m",
     "expected the same bodies at every step (black_bowl, plate, cup)"),
    ("unknown target", _set(["target_object"], "mug"), "target_object",
     "target 'mug' is not in body_roles; known bodies: panda_link7, black_bowl, plate, table"),
    ("negative force", _set(["steps", 1, "contacts", 0, "force_n"], -3.0), "contacts.force_n",
     "expected a non-negative force norm, got -3.0 at step 1"),
    ("mistyped force", _set(["steps", 1, "contacts", 0, "force_n"], "12"), "steps[1].contacts.force_n",
     "expected a number in newtons, got '12'"),
    ("gripper contact not boolean", _set(["steps", 1, "gripper_contact"], 0.5), "gripper_contact",
     "expected true/false (or 0/1) per step"),
    ("times not increasing", _set(["steps", 1, "t"], 0), "t", "expected strictly increasing step times"),
    ("empty body_roles", _set(["body_roles"], {}), "body_roles", "expected a non-empty mapping"),
]


@pytest.mark.parametrize("case,edit,field,message", BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_names_file_episode_and_field(appendix_b, case, edit, field, message):
    edit(appendix_b)
    with pytest.raises(RecordError) as info:
        record_from_json(appendix_b, source="runs/a.jsonl:7")
    err = info.value
    assert err.file == "runs/a.jsonl:7"
    assert err.field == field
    assert message in err.detail, err.detail
    if case != "missing episode_id":
        assert err.episode == EP
        assert str(err).startswith(f"file 'runs/a.jsonl:7', episode '{EP}', field '{field}': ")


def test_record_error_is_the_package_error():
    assert issubclass(RecordError, SafeVLAError) and issubclass(RecordError, ValueError)


def test_appendix_b_rounded_quaternion_is_accepted_but_a_scaled_one_is_not(appendix_b):
    rec = record_from_json(appendix_b)  # [0.99, 0.02, 0.01, 0.0] has norm 0.9903
    assert np.isclose(np.linalg.norm(rec.body_quat[1, 0]), 0.990252, atol=1e-6)
    appendix_b["steps"][1]["body_quat_wxyz"]["black_bowl"] = [0.9, 0.1, 0.0, 0.0]
    with pytest.raises(RecordError, match="norm 0.905539"):
        record_from_json(appendix_b)


def test_missing_optional_families_stay_missing(appendix_b):
    for step in appendix_b["steps"]:
        del step["contacts"], step["joint_torque_nm"], step["gripper_contact"]
    rec = record_from_json(appendix_b)
    assert rec.contacts is None and rec.joint_torque is None and rec.gripper_contact is None


@pytest.mark.parametrize("values", [
    [0.0, -1.5, 2.0],
    [],
    [1e308, 1e308],  # the sum overflows, the numbers are finite (inf once cast to float32)
    [-1e308, -1e308, 5.0],
    [1.0, np.nan],
    [np.inf, 0.0],
    [0.0, -np.inf],
    [np.nan, np.inf, -np.inf],
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_finite_check_equals_the_elementwise_one(values, dtype):
    from scoring.records.field_checks import _all_finite
    with np.errstate(over="ignore"):
        arr = np.array(values, dtype=np.float64).astype(dtype).reshape(-1, 1)
    assert _all_finite(arr) == all(math.isfinite(x) for x in arr.ravel().tolist())
