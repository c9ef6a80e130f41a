import io
import struct

import numpy as np
import pytest

from scoring.records.npz_format import read_npz, write_npz_stored
from scoring.records.synthetic import make_record


def test_stored_npz_is_a_checked_zip_numpy_reads_and_the_same_bytes_every_time():
    import io
    import zipfile

    from scoring.records.io import _ARRAYS, record_to_npz_bytes
    rec = make_record(np.random.default_rng(6), episode_id="s", n_steps=40, contacts_per_step=0, with_replay=True)
    raw = record_to_npz_bytes(rec)
    assert raw == record_to_npz_bytes(rec)
    assert zipfile.ZipFile(io.BytesIO(raw)).testzip() is None  # every CRC right
    loaded = np.load(io.BytesIO(raw))
    for name, get in _ARRAYS.items():
        if get(rec) is not None:
            assert loaded[name].dtype == get(rec).dtype and np.array_equal(loaded[name], get(rec)), name


def test_read_span_into_a_reused_buffer(tmp_path):
    from scoring.records.archive import jsonl_spans, read_span
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"long": "' + b"x" * 5000 + b'"}\n{"b": 2}\n')
    buffer = bytearray()
    spans = list(jsonl_spans(path))
    assert [bytes(read_span(path, off, n, into=buffer)) for off, n, _ in spans] == \
        [read_span(path, off, n) for off, n, _ in spans]
    assert len(buffer) >= 5000


ARRAYS = {"f8": np.arange(12.0).reshape(4, 3), "f4": np.float32([1.5, -2.0]), "i2": np.int16([3, -4, 5]),
          "b": np.array([True, False]), "empty": np.zeros((0, 3)), "fortran": np.asfortranarray(np.eye(3)[:, :2])}


@pytest.mark.parametrize("writer", ["ours", "np.savez", "np.savez_compressed"])
def test_read_npz_equals_np_load_on_what_either_writes(writer):
    if writer == "ours":
        raw = write_npz_stored(ARRAYS)
    else:
        buf = io.BytesIO()
        getattr(np, writer.split(".")[1])(buf, **ARRAYS)
        raw = buf.getvalue()
    ours, theirs = read_npz(raw), np.load(io.BytesIO(raw))
    assert set(ours) == set(theirs.files) == set(ARRAYS)
    for name, value in ARRAYS.items():
        assert ours[name].dtype == value.dtype and np.array_equal(ours[name], value), name


def test_stored_members_are_the_bytes_np_savez_writes():
    """Each member, .npy header included (cached per dtype and shape), as numpy writes it."""
    import zipfile
    arrays = {**ARRAYS, "fortran": np.ascontiguousarray(ARRAYS["fortran"]), "be": np.arange(3, dtype=">f8"),
              "same_shape": np.arange(12.0).reshape(4, 3) + 1}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    ours, theirs = (zipfile.ZipFile(io.BytesIO(raw)) for raw in (write_npz_stored(arrays), buf.getvalue()))
    assert ours.namelist() == theirs.namelist()
    for name in theirs.namelist():
        assert ours.read(name) == theirs.read(name), name


def test_truncated_and_foreign_bytes_are_refused():
    raw = write_npz_stored(ARRAYS)
    with pytest.raises(ValueError, match="end-of-central-directory"):
        read_npz(b"not a zip at all")
    with pytest.raises((ValueError, struct.error)):  # record_from_npz turns both into a RecordError
        read_npz(raw[: len(raw) // 2] + raw[-22:])  # central directory points past the data


def _deflated_npz(values: np.ndarray) -> bytearray:
    buf = io.BytesIO()
    np.savez_compressed(buf, x=values)
    return bytearray(buf.getvalue())


def _set_sizes(raw: bytearray, *, usize: int | None = None, csize: int | None = None) -> bytearray:
    """Rewrites the one member's declared sizes in its local and central headers (a lying zip)."""
    local, central = raw.find(b"PK\x03\x04"), raw.find(b"PK\x01\x02")
    for at, off in ((local, 18), (central, 20)):
        if csize is not None:
            struct.pack_into("<I", raw, at + off, csize)
        if usize is not None:
            struct.pack_into("<I", raw, at + off + 4, usize)
    return raw


def test_a_member_inflates_at_most_to_its_declared_size():
    from scoring.records.npz_format import NpzTooLarge
    raw = _deflated_npz(np.zeros(1_000_000))  # 8 MB of zeros, ~8 KB deflated
    assert read_npz(bytes(raw))["x"].shape == (1_000_000,)
    with pytest.raises(NpzTooLarge, match="inflates past its declared size of 4,096 bytes"):
        read_npz(bytes(_set_sizes(raw, usize=4096)))  # declares 4 KB: inflation stops there


def test_declared_sizes_are_capped_before_anything_is_inflated(monkeypatch):
    import scoring.records.npz_format as npz
    raw = _deflated_npz(np.zeros(1_000_000))
    monkeypatch.setattr(npz, "MAX_RECORD_BYTES", 1_000_000)
    with pytest.raises(npz.NpzTooLarge, match="more than 1,000,000 bytes uncompressed"):
        npz.read_npz(bytes(raw))
    monkeypatch.undo()
    # more than deflate can produce from its compressed size: a lie, refused up front
    with pytest.raises(npz.NpzTooLarge, match="more than deflate can produce"):
        npz.read_npz(bytes(_set_sizes(raw, usize=200_000_000)))


@pytest.mark.parametrize("case", ["list header", "short member", "unknown dtype", "object dtype"])
def test_malformed_members_are_value_errors_not_crashes(case):
    rec = make_record(np.random.default_rng(0), episode_id="e", n_steps=5, contacts_per_step=1)
    from scoring.records.io import record_to_npz_bytes
    raw = bytearray(record_to_npz_bytes(rec))
    if case == "short member":
        raw = bytearray(write_npz_stored({"a": np.zeros(3)}))
        at = raw.find(b"\x93NUMPY")
        raw[at + 6:at + 8] = b"\xff\xff"  # a header length beyond the member
    elif case == "unknown dtype":
        at = raw.find(b"'<f8'")
        raw[at + 1:at + 4] = b"<q9"
    elif case == "object dtype":
        at = raw.find(b"'<f8'")
        raw[at + 1:at + 4] = b"|O8"
    if case == "list header":
        from scoring.errors import RecordError
        from scoring.records.io import record_from_npz
        buf = io.BytesIO()
        np.savez(buf, __header__=np.frombuffer(b"[1, 2]", np.uint8))
        with pytest.raises(RecordError, match="expected the header to be a JSON object, got list"):
            record_from_npz(buf.getvalue(), source="bad.npz")
        return
    with pytest.raises(ValueError):
        read_npz(bytes(raw))
