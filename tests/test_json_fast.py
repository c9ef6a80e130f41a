"""The msgspec decode path against the reference `record_from_json(loads(line))`.

Every comparison runs both paths on the same JSON text: records must agree field by
field (arrays bit for bit, with dtypes), errors in message, file, episode and field.
`fast=True` cases also check that the fast path took them, not the fallback.
"""

import copy
import dataclasses
import json

import numpy as np
import pytest
from conftest import APPENDIX_B
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_schema import BAD_INPUT

from scoring.errors import RecordError
from scoring.records import json_fast
from scoring.records.archive import iter_archive
from scoring.records.io import loads, record_from_json, record_to_json
from scoring.records.json_fast import fast_record, record_from_json_bytes
from scoring.records.synthetic import make_record

SOURCE = "runs/a.jsonl:7"


@pytest.fixture(autouse=True)
def fresh_decoders():
    """Each test builds its own cached decoders, so no test depends on another's."""
    json_fast._decoder.cache_clear()
    yield
    json_fast._decoder.cache_clear()


def reference(data, source=SOURCE):
    """What `_iter_jsonl` did before the fast path: the contract."""
    try:
        obj = loads(data)
    except ValueError as exc:
        raise RecordError(f"line is not valid JSON ({exc})", file=source) from None
    return record_from_json(obj, source=source)


def outcome(fn, data):
    try:
        return "record", fn(data, source=SOURCE)
    except RecordError as exc:
        return "error", (str(exc), exc.file, exc.episode, exc.field, exc.detail)
    except Exception as exc:  # the reference's own crashes must be reproduced too
        return "crash", (type(exc), str(exc))


def assert_same_value(a, b, where):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert a.tobytes() == b.tobytes(), where  # bit for bit: -0.0 is not 0.0
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            assert_same_value(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b and repr(a) == repr(b), where  # repr: same order of keys, 1 is not 1.0


def assert_agree(data, *, fast=None):
    ref, got = outcome(reference, data), outcome(record_from_json_bytes, data)
    assert ref[0] == got[0], (ref, got)
    if ref[0] == "record":
        assert_same_value(ref[1], got[1], "record")
    else:
        assert ref[1] == got[1]
    if fast is not None:
        assert (fast_record(data, SOURCE) is not None) == fast
    return ref


def dumps(obj) -> bytes:
    return json.dumps(obj).encode()


def synthetic(**kw):
    return record_to_json(make_record(np.random.default_rng(7), episode_id="e/1", n_steps=40,
                                      contacts_per_step=6, **kw))


def edit_steps(rec, **fields):
    for i, step in enumerate(rec["steps"]):
        for key, value in fields.items():
            if value is None:
                step.pop(key, None)
            else:
                step[key] = value(i) if callable(value) else copy.deepcopy(value)
    return rec


# ----------------------------------------------------------------- records that load

def test_appendix_b_takes_the_fast_path():
    kind, rec = assert_agree(dumps(APPENDIX_B), fast=True)
    assert kind == "record" and rec.contacts.a.dtype == np.int32 and rec.contacts.force.tolist() == [12.4]


@pytest.mark.parametrize("with_replay", [False, True])
def test_synthetic_records_take_the_fast_path(with_replay):
    rec = synthetic(with_replay=with_replay)
    assert "synthetic" in rec  # an unknown top-level key: meta["extra"]
    assert_agree(dumps(rec), fast=True)


@pytest.mark.parametrize("with_replay", [False, True])
def test_records_with_substep_peaks_take_the_fast_path(with_replay):
    """Contacts with force_peak_n, and joint_torque_peak_nm: both paths read them."""
    rec = synthetic(with_replay=with_replay, substep_peaks=True)
    assert "force_peak_n" in rec["steps"][0]["contacts"][0] and "joint_torque_peak_nm" in rec["steps"][0]
    kind, got = assert_agree(dumps(rec), fast=True)
    assert kind == "record" and got.force_sampling == "substep_peak" and got.contacts.force_peak is not None
    assert (got.replay is not None and got.replay.ctrl is not None) == with_replay


def test_peaks_first_seen_late_in_the_line_take_the_fast_path():
    """Lines are decoded without force_peak_n first; one met only at a late step is read again with it."""
    rec = synthetic(substep_peaks=True)
    for step in rec["steps"][:-3]:
        step["contacts"] = []
    kind, got = assert_agree(dumps(rec), fast=True)
    assert kind == "record" and got.contacts.force_peak is not None
    assert set(got.contacts.step.tolist()) == {37, 38, 39}


def test_peaks_at_some_contacts_only_get_the_reference_error():
    rec = synthetic(substep_peaks=True)
    del rec["steps"][2]["contacts"][1]["force_peak_n"]
    kind, (message, *_rest) = assert_agree(dumps(rec))
    assert kind == "error" and "force_peak_n" in message and "every contact or none" in message


@pytest.mark.parametrize("collecting", [True, False])
@pytest.mark.parametrize("line", ["good", "fallback", "not json"])
def test_the_garbage_collector_is_left_as_it_was(collecting, line):
    """The fast path pauses the collector while its decoded tree lives, whatever the line gives."""
    import gc
    text = {"good": dumps(synthetic()), "fallback": dumps(edit_steps(synthetic(), action=None, t=lambda i: -i)),
            "not json": b'{"episode_id": '}[line]
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        fast_record(text, SOURCE)
        assert gc.isenabled() == collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_str_lines_and_trailing_newlines_agree():
    line = json.dumps(synthetic())
    assert_agree(line, fast=True)
    assert_agree(line.encode() + b"\n", fast=True)


FAST_CASES = {
    "extra top-level keys": lambda r: r.update(policy_commit="abc", notes={"k": [1, 2.5, None]}, tags=["a"]),
    "meta keys": lambda r: r.update(model="m", suite="s", seed=3, language="pick", signal_tags=["contacts"],
                                    joint_torque_limit_nm=[87] * 7, success_step=1, schema_version=1),
    "float t": lambda r: edit_steps(r, t=lambda i: 0.05 * i),
    "mixed int and float t": lambda r: edit_steps(r, t=lambda i: i if i % 2 else i + 0.5),
    "gripper as 0/1": lambda r: edit_steps(r, gripper_contact=lambda i: i % 2),
    "no contacts": lambda r: edit_steps(r, contacts=None),
    "no torque, gripper or t": lambda r: edit_steps(r, joint_torque_nm=None, gripper_contact=None, t=None),
    "no quaternions": lambda r: edit_steps(r, body_quat_wxyz=None),
    "no poses": lambda r: edit_steps(r, body_quat_wxyz=None, body_pos_m=None),
    "empty contact lists": lambda r: edit_steps(r, contacts=[]),
    "ints where floats are expected": lambda r: edit_steps(
        r, eef_pos_m=[0, -1, 2], joint_torque_nm=[1, 2, 3, 4, 5, 6, 7],
        contacts=lambda i: [{"a": "panda_link7", "b": "table", "force_n": 12}] if i else []),
    "actions": lambda r: edit_steps(r, action=lambda i: [0.1 * i, 0, 1]),
    "no torque columns": lambda r: edit_steps(r, joint_torque_nm=[]),
    "target list": lambda r: r.update(target_object=["black_bowl", "plate"]),
    "replay": lambda r: r.update(replay={"mjcf": "scene.xml", "qpos": [[0, 1.5], [2, 3]], "qvel": [[0], [1]],
                                         "camera": "agentview"}),
    "unicode names": lambda r: (r["body_roles"].update({"bol/\u00e9\u2603": "bystander"}),
                                edit_steps(r, contacts=[{"a": "bol/\u00e9\u2603", "b": "table", "force_n": 1.0}])),
    "body_roles after steps": lambda r: r.update(body_roles=r.pop("body_roles")),
    "-0 and tiny numbers": lambda r: edit_steps(r, eef_pos_m=[-0.0, 1e-320, 5e-324]),
    "forces of every form": lambda r: edit_steps(r, contacts=lambda i: [
        {"a": "panda_link7", "b": "table", "force_n": f} for f in (0, -0.0, 1e-320, 5e-324, 2 ** 53 + 1, 0.1,
                                                                    1.7976931348623157e308, 12.5e3, 3)] if i else []),
    "contact names escaped": lambda r: r.update(body_roles={**r["body_roles"], 'a"b\\c\u0001': "bystander"}) or edit_steps(
        r, contacts=[{"a": 'a"b\\c\u0001', "b": "table", "force_n": 1.0}]),
}


@pytest.mark.parametrize("case", FAST_CASES, ids=list(FAST_CASES))
def test_fast_path_matches_reference(appendix_b, case):
    FAST_CASES[case](appendix_b)
    assert_agree(dumps(appendix_b), fast=True)


@pytest.mark.parametrize("layout", [{"separators": (",", ":")}, {"indent": 2}, {"ensure_ascii": False},
                                    {"sort_keys": True}])
def test_other_json_writers_layouts_agree(layout):
    rec = synthetic()
    rec["body_roles"]["caf\u00e9"] = "bystander"
    rec["steps"][3]["contacts"].append({"a": "caf\u00e9", "b": rec["steps"][3]["contacts"][0]["b"], "force_n": 2.5})
    assert_agree(json.dumps(rec, **layout).encode(), fast=True)


# The reference accepts these too; the fast path hands them over rather than copy its rules.
FALLBACK_CASES = {
    "extra step keys": lambda r: edit_steps(r, rgb_path=lambda i: f"frames/{i}.png"),
    "extra contact keys": lambda r: r["steps"][1]["contacts"][0].update(pos=[0, 0, 0]),
    "bodies in another order": lambda r: r["steps"][1].update(
        body_pos_m=dict(reversed(list(r["steps"][1]["body_pos_m"].items())))),
    "integer wider than 64 bits": lambda r: r.update(frame_counter=2 ** 64),  # seed is int64, checked
    # (t itself is bounded to +-1e10, schema.T_LIMIT: a 64-bit-wide t is refused by both paths)
    "wide integer eef_pos_m": lambda r: edit_steps(r, eef_pos_m=lambda i: [2 ** 64 + 4096 * i, 0.0, 0.8]),
    "null replay": lambda r: r.update(replay=None),
    "null mocap in replay": lambda r: r.update(replay={"mjcf": "<mujoco/>", "qpos": [[0], [1]], "qvel": [[0], [1]],
                                                       "mocap_pos": None, "extra": 1}),
    "true as a coordinate": lambda r: edit_steps(r, eef_pos_m=[True, 0.0, 1.0]),
}


@pytest.mark.parametrize("case", FALLBACK_CASES, ids=list(FALLBACK_CASES))
def test_fallback_cases_match_reference(appendix_b, case):
    FALLBACK_CASES[case](appendix_b)
    kind, _ = assert_agree(dumps(appendix_b))
    assert kind == "record"


def test_a_misread_body_list_cannot_change_the_outcome(appendix_b):
    """The decoder is picked from the first `"body_roles"` in the text, which may not be the real one.

    The struct path types body names by that guess, so a wrong guess sends the line to the
    reference.
    """
    names = dict(appendix_b["body_roles"])
    superset = {"notes": {"body_roles": {**names, "ghost": "other"}}, **appendix_b}
    assert_agree(dumps(superset), fast=True)
    assert_agree(dumps({"notes": {"body_roles": {"mug": "target"}}, **appendix_b}),
                 fast=False)
    superset["steps"][1]["contacts"][0]["b"] = "ghost"  # known to the misread list only
    kind, (text, *_) = assert_agree(dumps(superset), fast=False)
    assert kind == "error" and "unknown body 'ghost'" in text


@pytest.mark.parametrize("value", [2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, 10 ** 30, -(2 ** 63),
                                   -(2 ** 63) - 1, 12345678901234567890123])
@pytest.mark.parametrize("where", ["eef", "force", "torque", "dt", "t"])
def test_huge_integers_agree(appendix_b, value, where):
    steps = appendix_b["steps"]
    if where == "eef":
        steps[1]["eef_pos_m"][0] = value
    elif where == "force":
        steps[1]["contacts"][0]["force_n"] = value
    elif where == "torque":
        steps[0]["joint_torque_nm"] = [value] * 7
    elif where == "dt":
        appendix_b["dt"] = value
    else:
        steps[1]["t"] = value
    assert_agree(dumps(appendix_b))


# ----------------------------------------------------------------- records that fail

@pytest.mark.parametrize("case,edit,field,message", BAD_INPUT, ids=[row[0] for row in BAD_INPUT])
def test_bad_input_errors_are_the_reference_ones(appendix_b, case, edit, field, message):
    edit(appendix_b)
    kind, (text, file, *_) = assert_agree(dumps(appendix_b))
    assert kind == "error" and file == SOURCE and message in text


VALID = json.dumps(APPENDIX_B)
BAD_TEXT = {
    "not JSON": "{not json",
    "empty": "",
    "array line": "[1, 2]",
    "number line": "3",
    "NaN literal in a str line": VALID.replace("0.42", "NaN"),
    "Infinity literal": VALID.replace("12.4", "Infinity"),
    "number out of double range": VALID.replace("12.4", "1e400"),
    "trailing garbage": VALID + " x",
    "trailing comma": VALID.replace("\"gripper_contact\": true", "\"gripper_contact\": true,"),
    "lone surrogate": VALID.replace("task_0", "task_\\ud800"),
    "byte order mark": "\ufeff" + VALID,
    "unknown body in a contact": VALID.replace("\"b\": \"table\"", "\"b\": \"sofa\""),
    "steps not a list": VALID.replace("\"steps\": [", "\"steps\": {\"x\": [") + "}",
    "dropped duplicate holds an out-of-range number": "{\"steps\": 1e400, " + VALID[1:],
    "dropped duplicate holds a big integer": "{\"steps\": 1" + "0" * 400 + ", " + VALID[1:],
}


@pytest.mark.parametrize("case", BAD_TEXT, ids=list(BAD_TEXT))
def test_bad_text_errors_are_the_reference_ones(case):
    text = BAD_TEXT[case]
    for data in (text, text.encode("utf-8", "surrogatepass")):
        kind, _ = assert_agree(data)
        assert kind in ("error", "crash")


def test_invalid_utf8_and_invalid_json_name_the_line():
    for data in (VALID.replace("task_0", "task_\udcff").encode("utf-8", "surrogateescape"), b"{not json"):
        kind, (text, file, episode, field, _) = assert_agree(data)
        assert kind == "error" and file == SOURCE and episode is None and field is None
        assert "line is not valid JSON" in text


def test_archive_reads_lines_through_the_fast_path(tmp_path):
    good = synthetic()
    lines = [json.dumps(good), "{oops", json.dumps(dict(good, dt=0))]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n\n")
    items = list(iter_archive([tmp_path]))
    assert [i.source for i in items] == [f"{tmp_path / 'a.jsonl'}:{n}" for n in (1, 2, 3)]
    assert_same_value(items[0].record, reference(lines[0], source=items[0].source), "record")
    assert "line is not valid JSON" in str(items[1].error) and items[2].error.field == "dt"


# ----------------------------------------------------------------- random perturbations

BODIES = list(APPENDIX_B["body_roles"])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4) | st.sampled_from(BODIES),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
KEYS = st.sampled_from(["t", "a", "b", "force_n", "eef_pos_m", "contacts", "steps", "replay", "seed", "x", "black_bowl"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_edits_of_the_record_agree(data):
    rec = copy.deepcopy(APPENDIX_B)
    node = rec
    while True:  # walk down to a random container
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        children = [(k, v) for k, v in children if isinstance(v, (dict, list)) and v]
        if not children or data.draw(st.booleans()):
            break
        node = data.draw(st.sampled_from(children))[1]
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    op = data.draw(st.sampled_from(["set", "delete", "add"] if keys else ["add"]))
    if op == "add":
        if isinstance(node, list):
            node.append(data.draw(JSON_VALUES))
        else:
            node[data.draw(KEYS)] = data.draw(JSON_VALUES)
    elif op == "delete":
        del node[data.draw(st.sampled_from(keys))]
    else:
        node[data.draw(st.sampled_from(keys))] = data.draw(JSON_VALUES)
    assert_agree(dumps(rec))


@settings(max_examples=300, deadline=None)
@given(pos=st.integers(0, len(VALID)), op=st.sampled_from(["insert", "replace", "delete"]),
       byte=st.sampled_from(list(b"0-+.eE\"\\{}[],: nt1\x00\xff")))
def test_random_byte_edits_agree(pos, op, byte):
    raw = VALID.encode()
    edited = {"insert": raw[:pos] + bytes([byte]) + raw[pos:], "replace": raw[:pos] + bytes([byte]) + raw[pos + 1:],
              "delete": raw[:pos] + raw[pos + 1:]}[op]
    assert_agree(edited)


@settings(max_examples=200, deadline=None)
@given(numbers=st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2 ** 70), 2 ** 70),
                        min_size=8, max_size=8))
def test_number_text_parses_identically(numbers):
    rec = copy.deepcopy(APPENDIX_B)
    step = rec["steps"][1]
    step["eef_pos_m"] = numbers[:3]
    step["contacts"][0]["force_n"] = abs(numbers[3])
    step["joint_torque_nm"] = [numbers[4]] * 7
    step["t"] = numbers[5]
    rec["seed"] = numbers[6]
    rec["dt"] = numbers[7]
    assert_agree(dumps(rec))


@pytest.mark.parametrize("case", ["valid", "NaN literal", "bad JSON", "unknown body in a contact"])
def test_buffer_views_agree_with_bytes(case):
    """The run store decodes lines from a reused buffer: memoryview and bytearray give the bytes' outcome."""
    text = {"valid": VALID, "NaN literal": VALID.replace("12.4", "NaN"), "bad JSON": "{not json",
            "unknown body in a contact": BAD_TEXT["unknown body in a contact"]}[case].encode()
    want = outcome(record_from_json_bytes, text)
    buffer = bytearray(text + b"trailing bytes of a longer, older line")
    for data in (memoryview(buffer)[:len(text)], bytearray(text)):
        got = outcome(record_from_json_bytes, data)
        assert got[0] == want[0]
        if want[0] == "record":
            assert_same_value(want[1], got[1], "record")
        else:
            assert got[1] == want[1]


def test_real_libero_records_agree_through_json():
    """Recorded LIBERO episodes (26 bodies, replay state, float32 signals) as JSONL lines."""
    from pathlib import Path

    from scoring.records.io import load_record
    archive = Path(__file__).resolve().parent.parent / "assets" / "demo" / "archive"
    files = sorted(archive.rglob("*.npz"))[::45]
    assert files, "the demo archive is missing"
    for path in files:
        line = json.dumps(record_to_json(load_record(path))).encode()
        assert_agree(line, fast=True)
