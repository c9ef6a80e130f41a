"""`.npz` bytes read and written directly, without numpy's per-call overhead.

`np.load` parses each member's header with `ast.literal_eval` and `np.savez` goes through
`zipfile`; on a 300-step episode either costs more than scoring it. These functions
handle exactly what numpy writes (stored or deflated members, zip64 when reading) and
fall back to numpy for anything else, so every file they write numpy reads, and the
other way round.
"""

from __future__ import annotations

import functools
import io as _io
import math
import re
import struct
import zlib

import numpy as np

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_CENTRAL_HEADER = struct.Struct("<4sHHHHHHIIIHHHHHII")
_END_OF_CENTRAL = struct.Struct("<4sHHHHIIH")
_ZIP_DATE = 0x21  # 1980-01-01: the same record always gives the same bytes


def write_npz_stored(arrays: dict[str, np.ndarray]) -> bytes:
    """What `np.savez` writes (stored .npy members in a zip), in a third of its time.

    Each member is the .npy header numpy itself writes, then the raw array bytes.
    Archives of 4 GiB or more need zip64 and go through `np.savez`.
    """
    chunks, central, offset = [], [], 0
    for name, value in arrays.items():
        arr = np.ascontiguousarray(value)
        head, body = _npy_header_bytes(arr.dtype, arr.shape), arr.reshape(-1).view(np.uint8)
        size = len(head) + len(body)
        crc = zlib.crc32(body, zlib.crc32(head))
        fname = f"{name}.npy".encode()
        chunks += [_LOCAL_HEADER.pack(b"PK\x03\x04", 20, 0, 0, 0, _ZIP_DATE, crc, size, size, len(fname), 0),
                   fname, head, body]
        central.append(_CENTRAL_HEADER.pack(b"PK\x01\x02", 20, 20, 0, 0, 0, _ZIP_DATE, crc, size, size, len(fname),
                                            0, 0, 0, 0, 0o100644 << 16, offset) + fname)
        offset += _LOCAL_HEADER.size + len(fname) + size
    directory = b"".join(central)
    if offset + len(directory) >= 0xFFFFFFFF:
        buf = _io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()
    end = _END_OF_CENTRAL.pack(b"PK\x05\x06", 0, 0, len(central), len(central), len(directory), offset, 0)
    return b"".join([*chunks, directory, end])


@functools.lru_cache(maxsize=1024)
def _npy_header_bytes(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy header numpy writes for a C-ordered array: the same few per record layout, so cached."""
    header = _io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(np.empty(shape, dtype)))
    return header.getvalue()


_NPY_HEADER = re.compile(rb"\{'descr': '([<>|=]?[a-zA-Z]\d*)', 'fortran_order': (False|True), "
                         rb"'shape': \(([\d, ]*)\), \}")


# central directory entry: signature, method at 10, sizes and name/extra/comment lengths at 20, offset at 42
_CENTRAL_ENTRY = struct.Struct("<4s6xH8xIIHHH8xI")

# A record's arrays, inflated, may not exceed this. Real episodes are far smaller (a
# 600-step LIBERO episode is ~1 MB; a 15k-step one with 100 bodies ~90 MB); the cap is
# what keeps a zip bomb (1.5 MB inflating to 1.5 GB) from exhausting memory.
MAX_RECORD_BYTES = 256 * 2**20
# Deflate cannot compress better than ~1032:1; a member declaring more lies about its size.
_MAX_DEFLATE_RATIO = 1100


class NpzTooLarge(ValueError):
    """An `.npz` whose members inflate past `MAX_RECORD_BYTES` or past their declared size."""


def _zip_members(raw: bytes, *, max_bytes: int | None = None):
    """(name, data) of every member of a zip held in memory, via its central directory.

    A plain reader for what `np.savez` writes (stored or deflated members, optional
    zip64): `zipfile` costs more than scoring a small episode. CRCs are not checked;
    truncation and bad offsets are, and every member must parse as a .npy array.
    Deflated members inflate to at most their declared size, and the declared sizes of
    all members to at most `max_bytes` (default `MAX_RECORD_BYTES`), checked before
    anything is inflated.
    """
    max_bytes = MAX_RECORD_BYTES if max_bytes is None else max_bytes
    eocd = raw.rfind(b"PK\x05\x06", max(0, len(raw) - 65_557))
    if eocd < 0:
        raise ValueError("no zip end-of-central-directory record")
    count, cd_size, cd_off = struct.unpack_from("<HII", raw, eocd + 10)
    if cd_off == 0xFFFFFFFF or count == 0xFFFF:  # zip64: numpy writes it for large arrays
        loc = raw.rfind(b"PK\x06\x07", 0, eocd)
        if loc < 0:
            raise ValueError("zip64 end-of-central-directory locator missing")
        (z64_off,) = struct.unpack_from("<Q", raw, loc + 8)
        count, cd_size, cd_off = struct.unpack_from("<QQQ", raw, z64_off + 32)
    entries, pos, total = [], cd_off, 0
    for _ in range(count):
        (sig, method, csize, usize, nlen, xlen, clen, loff) = _CENTRAL_ENTRY.unpack_from(raw, pos)
        if sig != b"PK\x01\x02":
            raise ValueError("corrupt zip central directory")
        name = raw[pos + 46:pos + 46 + nlen].decode()
        if 0xFFFFFFFF in (csize, usize, loff):
            extra = raw[pos + 46 + nlen:pos + 46 + nlen + xlen]
            vals = iter(struct.unpack_from("<" + "Q" * ((len(extra) - 4) // 8), extra, 4))
            usize = next(vals, None) if usize == 0xFFFFFFFF else usize
            csize = next(vals, None) if csize == 0xFFFFFFFF else csize
            loff = next(vals, None) if loff == 0xFFFFFFFF else loff
            if None in (usize, csize, loff):
                raise ValueError(f"member {name!r} has a corrupt zip64 extra field")
        pos += 46 + nlen + xlen + clen
        if method == 8 and usize > _MAX_DEFLATE_RATIO * csize + 1024:
            raise NpzTooLarge(f"member {name!r} declares {usize:,} bytes from {csize:,} compressed, more than "
                              "deflate can produce: a corrupt or malicious archive")
        total += usize if method == 8 else csize
        if total > max_bytes:
            raise NpzTooLarge(f"its members declare more than {max_bytes:,} bytes uncompressed (the limit per "
                              "record, scoring.records.npz_format.MAX_RECORD_BYTES); a zip bomb or not one episode")
        entries.append((name, method, csize, usize, loff))
    view = memoryview(raw)
    for name, method, csize, usize, loff in entries:
        lnlen, lxlen = struct.unpack_from("<HH", raw, loff + 26)
        start = loff + 30 + lnlen + lxlen
        data = view[start:start + csize]  # no copy: arrays are read in place
        if len(data) != csize:
            raise ValueError(f"member {name!r} is truncated")
        if method == 8:
            inflate = zlib.decompressobj(-15)
            data = inflate.decompress(data, usize)  # never more than declared
            if inflate.unconsumed_tail:
                raise NpzTooLarge(f"member {name!r} inflates past its declared size of {usize:,} bytes")
        elif method != 0:
            raise ValueError(f"member {name!r} uses unsupported compression {method}")
        yield name, data


@functools.lru_cache(maxsize=1024)
def _npy_header(header: bytes) -> tuple[np.dtype, tuple[int, ...], int] | None:
    """(dtype, shape, element count) of a .npy header in numpy's own layout; None for anything else.

    Cached: most members of an archive repeat a few headers, such as '<f8' of (300, 3).
    """
    m = _NPY_HEADER.match(header)
    if m is None or m.group(2) == b"True":
        return None
    shape = tuple(int(x) for x in m.group(3).split(b",") if x.strip())
    try:
        dtype = np.dtype(m.group(1).decode())
    except TypeError:
        raise ValueError(f"unknown dtype {m.group(1).decode()!r}") from None
    return dtype, shape, math.prod(shape)


def read_npz(raw: bytes) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` held in memory.

    numpy's own loader parses each member's header with `ast.literal_eval`, which costs
    more than the scoring of a small episode; the headers numpy writes have one fixed
    layout, parsed here with a regex (anything else falls back to `np.load`).
    """
    out = {}
    for member, data in _zip_members(raw):
        name = member[:-4] if member.endswith(".npy") else member
        if len(data) < 10 or data[:6] != b"\x93NUMPY":
            raise ValueError(f"member {member!r} is not a .npy array ({len(data)} bytes)")
        hlen_size = 2 if data[6] == 1 else 4
        hlen = int.from_bytes(data[8:8 + hlen_size], "little")
        start = 8 + hlen_size
        try:
            parsed = _npy_header(bytes(data[start:start + hlen]))
        except ValueError as exc:
            raise ValueError(f"member {member!r}: {exc}") from None
        if parsed is None:
            out[name] = np.load(_io.BytesIO(data), allow_pickle=False)
            continue
        dtype, shape, count = parsed
        if dtype.kind not in "biuf":  # what a record holds; objects, strings and voids are not
            raise ValueError(f"member {member!r} has dtype {dtype}; expected booleans, integers or floats")
        if len(data) - start - hlen < count * dtype.itemsize:
            raise ValueError(f"member {member!r} is truncated")
        out[name] = np.frombuffer(data, dtype=dtype, offset=start + hlen, count=count).reshape(shape)
    return out
