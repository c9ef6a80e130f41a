import json

import numpy as np
import pytest
from test_schema import BAD_INPUT

from scoring.errors import RecordError
from scoring.io import (iter_archive, load_record, loads, record_from_json, record_from_npz, record_to_json,
                        record_to_npz_bytes, save_record)
from scoring.synthetic import make_record


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


JSONL_ROWS = [
    ("plain", b'{"a":1}\n{"b":2}\n', [(b'{"a":1}\n', 1), (b'{"b":2}\n', 2)]),
    ("blank and whitespace lines keep their numbers", b'{"a":1}\n\n  \t\n{"b":2}\n', [(b'{"a":1}\n', 1), (b'{"b":2}\n', 4)]),
    ("no final newline", b'{"a":1}\n{"b":2}', [(b'{"a":1}\n', 1), (b'{"b":2}', 2)]),
    ("CRLF", b'{"a":1}\r\n{"b":2}\r\n', [(b'{"a":1}\r\n', 1), (b'{"b":2}\r\n', 2)]),
    ("empty file", b"", []),
    ("only blanks", b"\n \n", []),
]


@pytest.mark.parametrize("case,data,expected", JSONL_ROWS, ids=[r[0] for r in JSONL_ROWS])
def test_jsonl_spans_find_every_line(tmp_path, case, data, expected):
    from scoring.io import jsonl_spans, read_span
    path = tmp_path / "a.jsonl"
    path.write_bytes(data)
    spans = list(jsonl_spans(path))
    assert [(read_span(path, off, n), line) for off, n, line in spans] == expected


def _spans_by_splitting(data: bytes) -> list[tuple[int, int, int]]:
    """The obviously correct reference: split the whole file at its newlines."""
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]  # the text after the last newline has none
    spans, offset = [], 0
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            spans.append((offset, len(line), lineno))
        offset += len(line)
    return spans


def test_jsonl_spans_equal_splitting_the_file(tmp_path):
    from scoring.io import jsonl_spans
    rng = np.random.default_rng(11)
    pieces = [b"{}", b" ", b"\t", b"\n", b"\r\n", b"\x0b", b'{"k": [1, 2]}', b"x" * 5000]
    for trial in range(20):
        data = b"".join(pieces[k] for k in rng.integers(0, len(pieces), rng.integers(0, 60)))
        path = tmp_path / f"{trial}.jsonl"
        path.write_bytes(data)
        assert list(jsonl_spans(path)) == _spans_by_splitting(data), data[:200]


def test_extra_fields_survive_the_round_trip(appendix_b):
    appendix_b["policy_commit"] = "abc123"
    appendix_b["steps"][0]["rgb_path"] = "frames/0.png"
    appendix_b["steps"][1]["rgb_path"] = "frames/1.png"
    rec = record_from_json(appendix_b)
    assert record_to_json(record_from_npz(record_to_npz_bytes(rec))) == appendix_b


def test_archive_keeps_going_past_a_broken_episode(tmp_path, appendix_b):
    good = json.dumps(appendix_b)
    bad = dict(appendix_b, dt=-1, episode_id="broken")
    lines = [good.replace("ep_000", "ep_001"), "{not json", json.dumps(bad), good.replace("ep_000", "ep_002")]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04garbage")
    items = list(iter_archive([tmp_path]))
    ok = [i.record.episode_id for i in items if i.record]
    errors = [i.error for i in items if i.error]
    assert ok == ["libero-spatial/task_0/ep_001", "libero-spatial/task_0/ep_002"]
    assert len(errors) == 3
    by_file = {str(e) for e in errors}
    assert any("a.jsonl:2" in m and "not valid JSON" in m for m in by_file)
    assert any("a.jsonl:3" in m and "'broken'" in m and "'dt'" in m for m in by_file)
    assert any("corrupt.npz" in m for m in by_file)


def test_missing_path_and_wrong_suffix_are_named(tmp_path):
    with pytest.raises(RecordError, match="no such file"):
        list(iter_archive([tmp_path / "nope"]))
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(RecordError, match=r"x\.csv.*expected \.json, \.jsonl, \.npz"):
        list(iter_archive([tmp_path / "x.csv"]))


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
