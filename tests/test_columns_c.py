"""The C module scoring._columns: number conversion, contact arrays, vectors.

Numbers are checked bit for bit against Python's float() (correctly rounded, as orjson
and msgspec are); arrays against the msgspec-struct path they replace. Every layout the
module does not take must come back as None, never as a guess.
"""

import json
import math
import random
import struct
from fractions import Fraction
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring import json_fast
from scoring.io import record_from_json, record_to_json
from scoring.synthetic import make_record

_columns = pytest.importorskip("scoring._columns", reason="built only where a C compiler was found at install")

ROOT = Path(__file__).resolve().parent.parent


def test_the_power_table_is_the_generators_output():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "gen_pow5_table.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (ROOT / "scoring" / "_pow5_table.h").read_text() == gen.header()
    # spot checks against the definition: 5^q scaled into [2^127, 2^128)
    assert gen.power_of_five_128(0) == 1 << 127
    assert gen.power_of_five_128(1) == 5 << 125
    assert gen.power_of_five_128(-1) == (1 << 130) // 5 + 1


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


NUMBERS = [  # text, expected (None: not a finite double, the caller declines)
    ("0", 0.0), ("-0", 0.0),  # a JSON integer zero is orjson's int 0: +0.0
    ("-0.0", -0.0), ("-0e5", -0.0), ("0.0", 0.0),
    ("1", 1.0), ("-17", -17.0), ("0.1", 0.1), ("0.8368620276451111", 0.8368620276451111),
    ("9007199254740993", 9007199254740992.0),  # 2^53 + 1: a tie, to even
    ("9007199254740995", 9007199254740996.0),
    ("12345678901234567890", 12345678901234567890.0),  # 20 digits: the slow path
    ("123456789012345678901234567890", 1.2345678901234568e29),
    ("1.7976931348623157e308", 1.7976931348623157e308), ("1.7976931348623159e308", None),
    ("2.2250738585072014e-308", 2.2250738585072014e-308),  # the smallest normal
    ("4.9e-324", 5e-324), ("2.5e-324", 5e-324), ("2.4e-324", 0.0), ("1e-400", 0.0), ("-1e-400", -0.0),
    ("1e400", None), ("-1e400", None), ("1E+2", 100.0), ("1e22", 1e22), ("1e23", 1e23), ("5e-22", 5e-22),
    ("0.000000000000000000000000000001", 1e-30),
    ("1.00000000000000000000000000001", 1.0),
    # not JSON numbers: digits are required before the point, after it and after the exponent
    ("", None), ("-", None), (".", None), ("1e", None), ("1e+", None), ("1E-", None), ("1.", None),
    (".5", None), ("-.5", None), ("-e1", None), ("e5", None),
]


@pytest.mark.parametrize("text,expected", NUMBERS, ids=[t for t, _ in NUMBERS])
def test_number_edge_rows(text, expected):
    got = _columns.number(text.encode())
    if expected is None:
        assert got is None
    else:
        assert got is not None and bits(got) == bits(expected)


def _decimal_of(value: Fraction) -> str:
    """The exact decimal text of a dyadic rational."""
    if value.denominator == 1:
        return str(value.numerator)
    k = value.denominator.bit_length() - 1
    digits = str(value.numerator * 5 ** k).rjust(k + 1, "0")
    return digits[:-k] + "." + digits[-k:]


def _reference(text: str) -> float | None:
    value = float(text)
    if not math.isfinite(value):
        return None
    return 0.0 if value == 0 and text.lstrip("-").isdigit() else value


def test_numbers_equal_floats_bit_for_bit():
    rng = random.Random(5)
    texts = []
    for _ in range(20000):
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(x):
            texts += [repr(x), "%.17g" % x, f"%.{rng.randint(0, 20)}e" % x]
    for _ in range(20000):  # significands of 1-22 digits, exponents across the whole range
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 22))).lstrip("0") or "0"
        k = rng.randint(1, len(digits))
        text = digits[:k] + ("." + digits[k:] if k < len(digits) else "")
        exponent = rng.choice(["", f"e{rng.randint(-350, 320)}", f"E+{rng.randint(0, 30)}"])
        texts.append(rng.choice(["", "-"]) + text + exponent)
    for _ in range(5000):  # exact midpoints between neighbouring doubles: ties must go to even
        mantissa = rng.getrandbits(53) | 1 << 52
        texts.append(_decimal_of(Fraction(2 * mantissa + 1) * Fraction(2) ** rng.randint(-80, 40)))
    for text in texts:
        expected, got = _reference(text), _columns.number(text.encode())
        assert (got is None) == (expected is None), text
        assert got is None or bits(got) == bits(expected), (text, got, expected)


NAMES = ("robot0_link7", "gripper0_hand", "table", "bowl_1_main")
RAW = msgspec.json.Decoder(list[msgspec.Raw])


def raws(steps: list[list[dict]], **dumps_kw) -> list[msgspec.Raw]:
    return RAW.decode(json.dumps(steps, **dumps_kw))


def by_structs(steps: list[list[dict]]) -> dict:
    step = json_fast._step_type(Literal[NAMES])
    contact = step.__annotations__["contacts"].__args__[0].__args__[0]
    decoded = msgspec.json.decode(json.dumps(steps), type=list[list[contact]])
    return json_fast._contacts(decoded, dict.fromkeys(NAMES, "other"))


def contact_steps(rng, n_steps=30):
    return [[{"a": NAMES[rng.integers(4)], "b": NAMES[rng.integers(4)], "force_n": float(rng.exponential(50))}
             for _ in range(rng.integers(0, 6))] for _ in range(n_steps)]


@pytest.mark.parametrize("layout", [{}, {"separators": (",", ":")}, {"indent": 1}])
def test_contacts_equal_the_struct_path(layout):
    steps = contact_steps(np.random.default_rng(2))
    step, a, b, force, peak = _columns.contacts(raws(steps, **layout), tuple(n.encode() for n in NAMES))
    got = {"step": np.frombuffer(step, np.int32), "a": np.frombuffer(a, np.int32),
           "b": np.frombuffer(b, np.int32), "force": np.frombuffer(force, np.float64)}
    want = by_structs(steps)
    assert peak is None and "force_peak" not in want
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].tobytes() == want[key].tobytes(), key


@pytest.mark.parametrize("layout", [{}, {"separators": (",", ":")}, {"indent": 1}])
def test_contacts_with_substep_peaks_equal_the_struct_path(layout):
    rng = np.random.default_rng(3)
    steps = contact_steps(rng)
    for contact in (c for step in steps for c in step):
        contact["force_peak_n"] = contact["force_n"] * (1 + float(rng.exponential()))
    step, a, b, force, peak = _columns.contacts(raws(steps, **layout), tuple(n.encode() for n in NAMES))
    got = {"step": np.frombuffer(step, np.int32), "a": np.frombuffer(a, np.int32), "b": np.frombuffer(b, np.int32),
           "force": np.frombuffer(force, np.float64), "force_peak": np.frombuffer(peak, np.float64)}
    want = by_structs(steps)
    assert set(want) == set(got)
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].tobytes() == want[key].tobytes(), key


def test_no_contacts_at_all():
    step, a, b, force, peak = _columns.contacts(raws([[], [], []]), (b"table",))
    assert step == a == b == force == bytearray() and peak is None


ONE = {"a": "table", "b": "robot0_link7", "force_n": 1.5}
DECLINED = {
    "keys in another order": [[{"b": "table", "a": "robot0_link7", "force_n": 1.0}]],
    "an extra key": [[{**ONE, "pos": [0, 0, 0]}]],
    "a missing key": [[{"a": "table", "b": "table"}]],
    "an unknown body": [[{**ONE, "a": "ghost"}]],
    "a body that only starts like a known one": [[{**ONE, "a": "table_2"}]],
    "an escaped body name": '[[{"a": "\\u0074able", "b": "table", "force_n": 1}]]',
    "a string force": [[{**ONE, "force_n": "1.5"}]],
    "a list force": [[{**ONE, "force_n": [1.5]}]],
    "a boolean force": [[{**ONE, "force_n": True}]],
    "a null force": [[{**ONE, "force_n": None}]],
    "an infinite force": '[[{"a": "table", "b": "table", "force_n": 1e400}]]',
    "contacts as an object": [{"a": "table"}],
    "contacts as null": [None],
    "a contact as a list": [[["table", "table", 1.0]]],
    "a peak at some contacts only": [[{**ONE, "force_peak_n": 2.0}, ONE]],
    "a peak at later contacts only": [[ONE], [{**ONE, "force_peak_n": 2.0}]],
    "a null peak": [[{**ONE, "force_peak_n": None}]],
    "a peak before the force": [[{"a": "table", "b": "table", "force_peak_n": 2.0, "force_n": 1.0}]],
    "a key after the peak": [[{**ONE, "force_peak_n": 2.0, "pos": 1}]],
}


@pytest.mark.parametrize("case", DECLINED, ids=list(DECLINED))
def test_other_layouts_are_declined_not_guessed(case):
    steps = DECLINED[case]
    text = steps if isinstance(steps, str) else json.dumps(steps)
    assert _columns.contacts(RAW.decode(text), tuple(n.encode() for n in NAMES)) is None


VECTOR_ROWS = [[0.5, -1, 2e-3], [1e300, 0, -0.0], [3, 4, 5]]


@pytest.mark.parametrize("layout", [{}, {"separators": (",", ":")}, {"indent": 1}])
def test_vectors_equal_numpy(layout):
    values, width = _columns.vectors(raws(VECTOR_ROWS, **layout))
    assert width == 3
    assert np.frombuffer(values, np.float64).tobytes() == np.array(VECTOR_ROWS, np.float64).tobytes()
    assert _columns.vectors(raws([[], []])) == (bytearray(), 0)


@pytest.mark.parametrize("case,rows", [("ragged", [[1, 2], [1]]), ("a string", [[1, "2"]]), ("a boolean", [[True]]),
                                       ("null", [None]), ("nested", [[[1]]]), ("an object", [{"x": 1}]),
                                       ("too large", "[[1e400]]")])
def test_vectors_decline(case, rows):
    assert _columns.vectors(RAW.decode(rows if isinstance(rows, str) else json.dumps(rows))) is None


POSES = [{"table": [0, 0, 0.8], "bowl_1_main": [0.1, 0.2, 0.9]}, {"table": [0, 0, 0.8], "bowl_1_main": [0.1, 0.3, 1]}]


@pytest.mark.parametrize("layout", [{}, {"separators": (",", ":")}, {"indent": 1}])
def test_named_vectors_keep_the_first_steps_order(layout):
    order, values = _columns.named_vectors(raws(POSES, **layout), tuple(n.encode() for n in NAMES), 3)
    assert np.frombuffer(order, np.int32).tolist() == [NAMES.index("table"), NAMES.index("bowl_1_main")]
    want = np.array([list(step.values()) for step in POSES], np.float64)
    assert np.frombuffer(values, np.float64).tobytes() == want.tobytes()


NAMED_DECLINED = {
    "another order": [POSES[0], dict(reversed(list(POSES[1].items())))],
    "a body fewer": [POSES[0], {"table": [0, 0, 0]}],
    "a body more": [POSES[0], {**POSES[1], "gripper0_hand": [0, 0, 0]}],
    "a repeated body": '[{"table": [0, 0, 0], "table": [1, 1, 1]}]',
    "an unknown body": [{"ghost": [0, 0, 0]}],
    "the wrong width": [{"table": [0, 0]}],
    "an empty mapping": [{}],
    "null": [None],
    "a list of pairs": [[["table", [0, 0, 0]]]],
}


@pytest.mark.parametrize("case", NAMED_DECLINED, ids=list(NAMED_DECLINED))
def test_named_vectors_decline(case):
    rows = NAMED_DECLINED[case]
    text = rows if isinstance(rows, str) else json.dumps(rows)
    assert _columns.named_vectors(RAW.decode(text), tuple(n.encode() for n in NAMES), 3) is None


def test_a_real_line_takes_the_c_module(monkeypatch):
    rec = make_record(np.random.default_rng(4), episode_id="e/2", n_steps=20, contacts_per_step=8)
    line = json.dumps(record_to_json(rec)).encode()
    calls = []
    for name in ("contacts", "vectors", "named_vectors"):
        real = getattr(_columns, name)
        monkeypatch.setattr(_columns, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    got, want = json_fast.record_from_json_bytes(line), record_from_json(json.loads(line))
    assert set(calls) == {"contacts", "vectors", "named_vectors"}
    for field in ("eef_pos", "body_pos", "body_quat", "joint_torque", "actions"):
        a, b = getattr(got, field), getattr(want, field)
        assert (a is None and b is None) or (a.dtype == b.dtype and a.tobytes() == b.tobytes()), field
    for name in ("step", "a", "b", "force"):
        assert getattr(got.contacts, name).tobytes() == getattr(want.contacts, name).tobytes(), name


def test_a_real_line_with_substep_peaks_takes_the_c_module(monkeypatch):
    rec = make_record(np.random.default_rng(4), episode_id="e/3", n_steps=20, contacts_per_step=8,
                      substep_peaks=True, with_replay=True)
    line = json.dumps(record_to_json(rec)).encode()
    calls = []
    real = _columns.contacts
    monkeypatch.setattr(_columns, "contacts", lambda *a: calls.append(real(*a)) or calls[-1])
    got, want = json_fast.record_from_json_bytes(line), record_from_json(json.loads(line))
    assert calls and calls[0] is not None and calls[0][4] is not None  # taken, peaks included
    assert got.contacts.force_peak.tobytes() == want.contacts.force_peak.tobytes()
    assert got.joint_torque_peak.tobytes() == want.joint_torque_peak.tobytes()


VALID_CONTACTS = json.dumps([[{"a": "table", "b": "bowl_1_main", "force_n": 1.25},
                              {"a": "robot0_link7", "b": "table", "force_n": 3e-5}], [],
                             [{"a": "gripper0_hand", "b": "table", "force_n": 200}]]).encode()
VALID_PEAKS = json.dumps([[{"a": "table", "b": "bowl_1_main", "force_n": 1.25, "force_peak_n": 2},
                           {"a": "robot0_link7", "b": "table", "force_n": 0, "force_peak_n": 3e-5}], [],
                          [{"a": "gripper0_hand", "b": "table", "force_n": 200, "force_peak_n": 478.5}]]).encode()
EDIT_BYTES = b'[]{}",: \n0123456789.-+eEabtlx\\'


def _edited(text: bytes, edits) -> bytes:
    out = bytearray(text)
    for pos, op, byte in edits:
        pos = min(pos, len(out))
        if op == "insert":
            out.insert(pos, byte)
        elif pos < len(out):
            if op == "replace":
                out[pos] = byte
            else:
                del out[pos]
    return bytes(out)


@settings(max_examples=400, deadline=None)
@given(valid=st.sampled_from([VALID_CONTACTS, VALID_PEAKS]),
       edits=st.lists(st.tuples(st.integers(0, len(VALID_PEAKS)), st.sampled_from(["insert", "replace", "delete"]),
                                st.sampled_from(list(EDIT_BYTES))), min_size=1, max_size=3))
def test_edited_contact_text_is_taken_only_when_the_struct_path_reads_it_the_same(valid, edits):
    text = _edited(valid, edits)
    try:
        steps = RAW.decode(text)  # msgspec's check, as json_fast makes it
    except msgspec.DecodeError:
        return
    got = _columns.contacts(steps, tuple(n.encode() for n in NAMES))
    if got is None:
        return  # declined: the struct path decides
    want = by_structs(json.loads(text))  # raises if the struct path would not take it
    assert (got[4] is None) == ("force_peak" not in want)
    for value, (name, dtype) in zip(got, [("step", np.int32), ("a", np.int32), ("b", np.int32), ("force", np.float64),
                                          ("force_peak", np.float64)]):
        if value is not None:
            assert np.frombuffer(value, dtype).tobytes() == want[name].tobytes(), name


VALID_VECTORS = json.dumps([[1, 2.5, -3e10], [0, -0.0, 7]]).encode()
VALID_POSES = json.dumps(POSES).encode()


@settings(max_examples=300, deadline=None)
@given(which=st.sampled_from(["vectors", "poses"]),
       edits=st.lists(st.tuples(st.integers(0, 200), st.sampled_from(["insert", "replace", "delete"]),
                                st.sampled_from(list(EDIT_BYTES))), min_size=1, max_size=3))
def test_edited_vector_text_is_taken_only_when_the_struct_path_reads_it_the_same(which, edits):
    text = _edited(VALID_VECTORS if which == "vectors" else VALID_POSES, edits)
    try:
        steps = RAW.decode(text)
    except msgspec.DecodeError:
        return
    if which == "vectors":
        got = _columns.vectors(steps)
        if got is not None:
            rows = msgspec.json.decode(text, type=list[list[float]])  # raises if the struct path would not take it
            want = json_fast._matrix(rows, len(rows))
            assert got[1] == want.shape[1] and np.frombuffer(got[0], np.float64).tobytes() == want.tobytes()
        return
    got = _columns.named_vectors(steps, tuple(n.encode() for n in NAMES), 3)
    if got is not None:
        vec3 = tuple[float, float, float]
        col = msgspec.json.decode(text, type=list[dict[Literal[NAMES], vec3]])
        names, want = json_fast._per_body(col, len(col), 3)
        assert [NAMES[i] for i in np.frombuffer(got[0], np.int32)] == names
        assert np.frombuffer(got[1], np.float64).tobytes() == want.tobytes()
