"""scoring.json_accel: the Python face of the C module (declines, names, the off switch)."""

import json
import os
import subprocess
import sys

import msgspec
import numpy as np
import pytest

from scoring import json_accel

pytestmark = pytest.mark.skipif(not json_accel.AVAILABLE, reason="scoring._columns is not built")

RAW = msgspec.json.Decoder(list[msgspec.Raw])
ROLES = {"robot0_link7": "robot", "table": "furniture", "bowl": "target"}


def raws(rows) -> list[msgspec.Raw]:
    return RAW.decode(json.dumps(rows))


def test_matrix_checks_the_width_it_is_given():
    rows = raws([[1, 2, 3], [4, 5, 6]])
    assert json_accel.matrix(rows, 2, 3).tolist() == [[1, 2, 3], [4, 5, 6]]
    assert json_accel.matrix(rows, 2).shape == (2, 3)
    with pytest.raises(json_accel.NotCommonLayout):
        json_accel.matrix(rows, 2, 4)
    assert json_accel.matrix(None, 2) is None


def test_per_body_names_come_from_the_roles_in_the_first_steps_order():
    col = raws([{"bowl": [1, 2, 3], "table": [0, 0, 0]}, {"bowl": [1, 2, 4], "table": [0, 0, 1]}])
    names, values = json_accel.per_body(col, 2, 3, ROLES)
    assert names == ["bowl", "table"] and values.shape == (2, 2, 3) and values[1, 0, 2] == 4
    with pytest.raises(json_accel.NotCommonLayout):
        json_accel.per_body(raws([{"ghost": [0, 0, 0]}]), 1, 3, ROLES)


@pytest.mark.parametrize("name,encoded", [("table", b"table"), ("caf\u00e9", "caf\u00e9".encode()),
                                          ('a"b', None), ("a\\b", None), ("tab\x01", None)])
def test_names_that_json_may_escape_are_left_to_the_general_path(name, encoded):
    assert json_accel.encoded_names((name,)) == (None if encoded is None else (encoded,))


def test_contacts_decline_raises():
    with pytest.raises(json_accel.NotCommonLayout):
        json_accel.contacts(raws([[{"b": "table", "a": "bowl", "force_n": 1}]]), ROLES)
    got = json_accel.contacts(raws([[{"a": "bowl", "b": "table", "force_n": 1}], []]), ROLES)
    assert got["a"].tolist() == [2] and got["step"].tolist() == [0] and got["force"].dtype == np.float64


def test_the_environment_switch_turns_the_c_module_off():
    code = "from scoring import json_accel; print(json_accel.AVAILABLE)"
    for value, expected in [("1", "False"), ("0", "True"), ("", "True")]:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "SAFEVLA_PURE_PYTHON": value})
        assert out.stdout.strip() == expected, value
