import io
import struct

import numpy as np
import pytest

from scoring.npz_format import read_npz, write_npz_stored
from scoring.synthetic import make_record


def test_stored_npz_is_a_checked_zip_numpy_reads_and_the_same_bytes_every_time():
    import io
    import zipfile

    from scoring.io import _ARRAYS, record_to_npz_bytes
    rec = make_record(np.random.default_rng(6), episode_id="s", n_steps=40, contacts_per_step=0, with_replay=True)
    raw = record_to_npz_bytes(rec)
    assert raw == record_to_npz_bytes(rec)
    assert zipfile.ZipFile(io.BytesIO(raw)).testzip() is None  # every CRC right
    loaded = np.load(io.BytesIO(raw))
    for name, get in _ARRAYS.items():
        if get(rec) is not None:
            assert loaded[name].dtype == get(rec).dtype and np.array_equal(loaded[name], get(rec)), name


def test_read_span_into_a_reused_buffer(tmp_path):
    from scoring.archive import jsonl_spans, read_span
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


def test_truncated_and_foreign_bytes_are_refused():
    raw = write_npz_stored(ARRAYS)
    with pytest.raises(ValueError, match="end-of-central-directory"):
        read_npz(b"not a zip at all")
    with pytest.raises((ValueError, struct.error)):  # record_from_npz turns both into a RecordError
        read_npz(raw[: len(raw) // 2] + raw[-22:])  # central directory points past the data
