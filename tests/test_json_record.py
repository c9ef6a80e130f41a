"""scoring.records.json_record.loads: msgspec's reading of JSON text, and the two rules it adds."""

import json

import pytest
from conftest import APPENDIX_B

from scoring.errors import RecordError
from scoring.records import json_record
from scoring.records.json_record import loads, record_from_json

VALID = json.dumps(APPENDIX_B)


@pytest.mark.parametrize("make", [str, str.encode, lambda s: bytearray(s.encode()), lambda s: memoryview(s.encode())])
def test_every_text_type_reads_the_same_values(make):
    assert loads(make(VALID)) == APPENDIX_B


@pytest.mark.parametrize("text,value", [
    ("18446744073709551615", 2 ** 64 - 1), ("-9223372036854775808", -(2 ** 63)),  # 64 bits: exact ints
    ("18446744073709551616", float(2 ** 64)),  # beyond 64 bits: a double, as the arrays hold it
    ("-9223372036854775809", float(-(2 ** 63) - 1)),
    ("1" + "0" * 308, 1e308),  # 309 digits, still below the largest double (1.8e308)
    ("1234567890123456789", 1234567890123456789),
    ("0.00012345678901234567", 0.00012345678901234567), ("1.5e-0000000000000000000001", 0.15),
    ("1234567890123456789012.5", 1234567890123456789012.5),
    ("-0", 0), ("-0.0", -0.0), ("5e-324", 5e-324),
])
def test_numbers_within_double_range_load(text, value):
    got = loads(f'{{"a": [{text}]}}'.encode())["a"][0]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ["2" + "0" * 308, "-" + "9" * 400, "1e400", "-1e309", "1" + "0" * 400 + ".0"])
@pytest.mark.parametrize("where", ["{{\"a\": {}}}", "{{\"k\": {{\"n\": [1, [{}]]}}}}",
                                   "{{\"steps\": {}, \"steps\": []}}"])  # a dropped duplicate too
def test_numbers_beyond_double_range_are_invalid_json(text, where):
    for data in (where.format(text), where.format(text).encode()):
        with pytest.raises(ValueError):
            loads(data)


@pytest.mark.parametrize("text,holds", [
    ("[1234567890123456789]", True), ("[-1234567890123456789]", True), ("1234567890123456789", True),
    ("{\"a\":  99999999999999999999}", True), ("[123456789012345678]", False),
    ("[0.00012345678901234567]", False), ("[1e-0000000000000000000005]", False), ("[1E+00000000000000000001]", False),
    ("[12345678901234567890.5]", False), ("[12345678901234567890e3]", False), ("[0.5, 1234567890123456789]", True),
])
def test_the_long_integer_scan(text, holds):
    for data in (text, text.encode(), memoryview(text.encode())):
        assert json_record._may_hold_long_integer(data) is holds


@pytest.mark.parametrize("make", [str, str.encode, lambda s: memoryview(s.encode())])
def test_digits_inside_strings_are_not_numbers(make):
    obj = {"id": "9" * 400, "n": [1, 2.5, -3], "s": "\u00e9\u2603"}
    assert loads(make(json.dumps(obj))) == obj


def test_nan_and_infinity_bytes_load_so_validation_names_the_field():
    data = VALID.replace("0.42", "NaN").encode()
    obj = loads(data)
    with pytest.raises(RecordError) as info:
        record_from_json(obj, source="a.jsonl:1")
    assert info.value.field == "eef_pos_m" and "expected finite numbers" in str(info.value)
    with pytest.raises(ValueError):  # the range rule holds on that path too
        loads(VALID.replace("0.42", "NaN").replace("12.4", "1" + "0" * 400).encode())
    with pytest.raises(ValueError):  # a str line is not retried: only bytes are
        loads(VALID.replace("0.42", "NaN"))


@pytest.mark.parametrize("text", ["{not json", "", "[1,", VALID + " x", "\ufeff" + VALID])
def test_malformed_text_is_a_value_error(text):
    with pytest.raises(ValueError):
        loads(text.encode())


def test_invalid_utf8_is_a_value_error():
    with pytest.raises(ValueError):
        loads(b'{"a": "\xff"}')
