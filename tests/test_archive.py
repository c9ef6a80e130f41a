"""scoring.records.archive: archives of records, JSONL line spans, one broken episode never sinks the rest."""

import json

import numpy as np
import pytest

from scoring.errors import RecordError
from scoring.records.archive import iter_archive, jsonl_spans, read_span


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
    rng = np.random.default_rng(11)
    pieces = [b"{}", b" ", b"\t", b"\n", b"\r\n", b"\x0b", b'{"k": [1, 2]}', b"x" * 5000]
    for trial in range(20):
        data = b"".join(pieces[k] for k in rng.integers(0, len(pieces), rng.integers(0, 60)))
        path = tmp_path / f"{trial}.jsonl"
        path.write_bytes(data)
        assert list(jsonl_spans(path)) == _spans_by_splitting(data), data[:200]


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


def test_unlistable_items_are_problems_naming_them_and_the_rest_are_listed(tmp_path):
    import os

    from scoring.records.archive import list_archive
    (tmp_path / "a.npz").write_bytes(b"x")
    odd = tmp_path / os.fsdecode(b"caf\xe9.npz")
    odd.write_bytes(b"x")
    listing = list_archive([tmp_path])
    assert listing.files == [tmp_path / "a.npz"]
    assert len(listing.problems) == 1 and "caf\\xe9.npz" in listing.problems[0].file
    assert "not valid UTF-8" in str(listing.problems[0])
    items = list(iter_archive([tmp_path]))  # iter_archive yields the problem as an error item
    assert items[0].error is listing.problems[0] or "not valid UTF-8" in str(items[0].error)
