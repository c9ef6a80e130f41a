"""Archives of trajectory records: directories of `.json`/`.npz` files and JSONL files.

`iter_archive` yields every episode, or the error that stopped it, and goes on past a
broken one. `jsonl_spans` and `read_span` let a scheduler hand out the lines of a JSONL
file as byte ranges instead of megabyte-long strings.
"""

from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from scoring.errors import RecordError
from scoring.io import load_record
from scoring.json_fast import record_from_json_bytes
from scoring.schema import EpisodeRecord

RECORD_SUFFIXES = (".json", ".jsonl", ".npz")


class Loaded(NamedTuple):
    """One item of an archive: a record, or the error that stopped it (never both)."""

    record: EpisodeRecord | None
    error: RecordError | None
    source: str



def archive_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expands files and directories into the sorted list of record files they hold."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(_record_files_under(p))
        elif p.exists():
            if p.suffix not in RECORD_SUFFIXES:
                raise RecordError(f"unsupported archive file; expected {', '.join(RECORD_SUFFIXES)} "
                                  "or a directory of them", file=str(p))
            out.append(p)
        else:
            raise RecordError("no such file or directory", file=str(p))
    return out


def _record_files_under(directory: Path) -> list[Path]:
    """Record files below `directory`, hidden files excluded, in `sorted(Path)` order.

    os.walk and sorting on path components: rglob, is_file and Path comparisons cost
    more than scoring on a 15k-file archive.
    """
    found = []
    for root, _dirs, names in os.walk(directory):
        for name in names:
            if not name.startswith(".") and os.path.splitext(name)[1] in RECORD_SUFFIXES:
                path = os.path.join(root, name)
                if os.path.isfile(path):
                    found.append(path)
    found.sort(key=lambda path: path.split(os.sep))
    return [Path(path) for path in found]


def iter_archive(paths: Iterable[str | os.PathLike]) -> Iterator[Loaded]:
    """Yields every episode of the archives; a broken episode yields its error and the rest go on."""
    for path in archive_files(paths):
        if path.suffix == ".jsonl":
            yield from _iter_jsonl(path)
            continue
        try:
            yield Loaded(load_record(path), None, str(path))
        except RecordError as exc:
            yield Loaded(None, exc, str(path))


_NON_BLANK = re.compile(rb"\S")


def jsonl_spans(path: str | os.PathLike) -> Iterator[tuple[int, int, int]]:
    """(byte offset, length, line number) of every non-blank line of a JSONL file.

    Lines are found without keeping them, so a scheduler can hand out byte ranges
    (`read_span`) instead of megabyte-long lines. The file is memory-mapped: searching
    the page cache in place costs half of reading it through a buffer, and this scan
    runs in the parent, on a core the workers need.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return  # an empty file cannot be mapped
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            start = lineno = 0
            while start < size:
                end = mapped.find(b"\n", start)
                stop = size if end < 0 else end + 1
                lineno += 1
                if _NON_BLANK.search(mapped, start, stop):
                    yield start, stop - start, lineno
                start = stop


def read_span(path: str | os.PathLike, offset: int, length: int, *, into: bytearray | None = None
              ) -> bytes | memoryview:
    """The bytes of one `jsonl_spans` line.

    With `into`, the line is read into that buffer (grown as needed) and a view of it is
    returned: valid until the buffer is reused. A fresh megabyte `bytes` per line costs
    its page faults every time, ~4x the read itself.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        if into is None:
            return os.pread(fd, length, offset)
        if len(into) < length:
            into.extend(bytes(length - len(into)))
        view = memoryview(into)[:length]
        got = os.preadv(fd, [view], offset)
        return view[:got]
    finally:
        os.close(fd)


def _iter_jsonl(path: Path) -> Iterator[Loaded]:
    try:
        fh = path.open("rb")
    except OSError as exc:
        yield Loaded(None, RecordError(f"cannot read ({exc.strerror})", file=str(path)), str(path))
        return
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield Loaded(record_from_json_bytes(line, source=where), None, where)
            except RecordError as exc:
                yield Loaded(None, exc, where)
