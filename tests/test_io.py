import json

import numpy as np
import pytest
from test_schema import BAD_INPUT

from scoring.errors import RecordError
from scoring.records.io import (load_record, loads, record_from_json, record_from_npz, record_to_json,
                                record_to_npz_bytes, save_record)
from scoring.records.synthetic import make_record


def test_appendix_b_record_loads_as_written(appendix_b):
    rec = record_from_json(appendix_b)
    assert rec.n_steps == 2
    assert rec.targets == ("black_bowl",)
    assert rec.pose_bodies == ("black_bowl", "plate")
    assert rec.quat_bodies == ("black_bowl",)
    assert rec.contacts.force.tolist() == [12.4]
    assert rec.bodies[rec.contacts.a[0]] == "panda_link7" and rec.bodies[rec.contacts.b[0]] == "table"
    assert rec.gripper_contact.tolist() == [False, True]


def test_json_npz_json_round_trip_is_lossless(appendix_b):
    rec = record_from_json(appendix_b)
    assert record_to_json(rec) == appendix_b
    again = record_from_npz(record_to_npz_bytes(rec))
    assert record_to_json(again) == appendix_b


@pytest.mark.parametrize("compress", [False, True])
def test_npz_round_trip_keeps_every_array_and_dtype(tmp_path, compress):
    rec = make_record(np.random.default_rng(3), episode_id="a/b", n_steps=50, contacts_per_step=5, with_replay=True)
    path = save_record(rec, tmp_path / "ep.npz", compress=compress)
    back = load_record(path)
    for name in ("t", "eef_pos", "body_pos", "body_quat", "joint_torque", "gripper_contact"):
        a, b = getattr(rec, name), getattr(back, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    for name in ("step", "a", "b", "force"):
        assert np.array_equal(getattr(rec.contacts, name), getattr(back.contacts, name))
    assert np.array_equal(rec.replay.qpos, back.replay.qpos)
    assert back.meta == rec.meta and back.bodies == rec.bodies and back.roles == rec.roles
    assert json.dumps(record_to_json(back)) == json.dumps(record_to_json(rec))
    assert set(np.load(path)) >= {"contact_a", "eef_pos", "__header__"}  # a plain zip numpy reads too


def test_extra_fields_survive_the_round_trip(appendix_b):
    appendix_b["policy_commit"] = "abc123"
    appendix_b["steps"][0]["rgb_path"] = "frames/0.png"
    appendix_b["steps"][1]["rgb_path"] = "frames/1.png"
    rec = record_from_json(appendix_b)
    assert record_to_json(record_from_npz(record_to_npz_bytes(rec))) == appendix_b


def _load_by_reference(path):
    """What load_record did for .json before the fast path: the contract."""
    return record_from_json(loads(path.read_bytes()), source=str(path))


@pytest.mark.parametrize("case,edit,field,message", BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_json_files_fail_as_the_reference_fails(tmp_path, appendix_b, case, edit, field, message):
    edit(appendix_b)
    path = tmp_path / "ep.json"
    path.write_text(json.dumps(appendix_b))
    with pytest.raises(RecordError) as fast:
        load_record(path)
    with pytest.raises(RecordError) as ref:
        _load_by_reference(path)
    assert str(fast.value) == str(ref.value) and fast.value.field == field


def test_json_files_take_the_fast_path_and_keep_their_wording(tmp_path):
    rec = make_record(np.random.default_rng(5), episode_id="a/b", n_steps=30, contacts_per_step=4)
    path = tmp_path / "ep.json"
    path.write_text(json.dumps(record_to_json(rec)))
    got, want = load_record(path), _load_by_reference(path)
    for name in ("t", "eef_pos", "body_pos", "body_quat", "joint_torque"):
        assert getattr(got, name).tobytes() == getattr(want, name).tobytes(), name
    assert got.contacts.force.tobytes() == want.contacts.force.tobytes() and got.source == str(path)
    path.write_text("{not json")
    with pytest.raises(RecordError, match="not valid JSON") as info:
        load_record(path)
    assert info.value.file == str(path) and "line is" not in str(info.value)


@pytest.mark.parametrize("compress", [False, True])
def test_substep_peaks_and_replay_ctrl_round_trip_losslessly(tmp_path, compress):
    rec = make_record(np.random.default_rng(4), episode_id="a/p", n_steps=30, contacts_per_step=4,
                      with_replay=True, substep_peaks=True)
    assert rec.force_sampling == "substep_peak"
    for back in (load_record(save_record(rec, tmp_path / "ep.npz", compress=compress)),
                 load_record(save_record(rec, tmp_path / "ep.json"))):
        assert np.array_equal(back.contacts.force_peak, rec.contacts.force_peak)
        assert np.array_equal(back.joint_torque_peak, rec.joint_torque_peak)
        assert np.array_equal(back.replay.ctrl, rec.replay.ctrl)
        assert back.force_sampling == "substep_peak"
        assert record_to_json(back) == record_to_json(rec)
    assert {"contact_force_peak", "joint_torque_peak", "replay_ctrl"} <= set(np.load(tmp_path / "ep.npz"))


@pytest.mark.parametrize("edit, field, message", [
    (lambda r: r.update(force_sampling="substep"), "force_sampling", "expected one of control, substep_peak"),
    (lambda r: r.pop("force_sampling"), "force_sampling", 'expected force_sampling "substep_peak"'),
    (lambda r: r.update(force_sampling="control"), "force_sampling", "has substep peaks"),
    (lambda r: r["steps"][1]["contacts"][0].update(force_peak_n=-1.0), "contacts.force_peak_n",
     "peak >= the control-step force"),
    (lambda r: r["steps"][1].update(joint_torque_peak_nm=[1.0]), "joint_torque_peak_nm", r"shape \(5, 7\)"),
])
def test_bad_substep_peaks_name_the_field(edit, field, message):
    obj = record_to_json(make_record(np.random.default_rng(4), episode_id="a/p", n_steps=5, contacts_per_step=2,
                                     substep_peaks=True))
    edit(obj)
    with pytest.raises(RecordError, match=message) as err:
        record_from_json(obj, source="x.json")
    assert err.value.field == field and err.value.episode == "a/p"


def test_old_records_read_as_sampled_at_the_control_step(appendix_b):
    rec = record_from_json(appendix_b)
    assert rec.force_sampling == "control" and rec.contacts.force_peak is None and rec.joint_torque_peak is None
    assert "force_sampling" not in record_to_json(rec)  # nothing added on the way out: lossless
