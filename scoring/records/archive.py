"""Archives of trajectory records: directories of `.json`/`.npz` files and JSONL files.

`iter_archive` yields every episode, or the error that stopped it, and goes on past a
broken one. `jsonl_spans` and `read_span` let a scheduler hand out the lines of a JSONL
file as byte ranges instead of megabyte-long strings.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from scoring.errors import RecordError
from scoring.records.io import load_record
from scoring.records.json_fast import record_from_json_bytes
from scoring.records.schema import EpisodeRecord

RECORD_SUFFIXES = (".json", ".jsonl", ".npz")


class Loaded(NamedTuple):
    """One item of an archive: a record, or the error that stopped it (never both)."""

    record: EpisodeRecord | None
    error: RecordError | None
    source: str



def archive_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expands files and directories into the sorted list of record files they hold.

    Items that cannot be listed are left out; `list_archive` also says which and why.
    """
    return list_archive(paths).files


class Listing(NamedTuple):
    """The record files of an archive, and the items that could not be listed (never a crash)."""

    files: list[Path]
    problems: list[RecordError]


def list_archive(paths: Iterable[str | os.PathLike]) -> Listing:
    """Record files of the archives in sorted order, plus a `RecordError` per unlistable item.

    An unreadable subdirectory or a file name that is not valid UTF-8 (the store keeps
    names as text) is a problem naming the path; the rest of the archive is still listed.
    A path that does not exist or is not a record file is a mistake in the command, and raises.

    Symbolic links (docs/scoring.md, "Symbolic links"): a path named here is followed. Inside
    a named directory, a link to a record file is followed when the file it resolves to lies
    inside one of the named paths (the archive), as readers of the store require
    (`scoring.store.paths`); every other link is a problem naming it, and is not followed: a
    link to a file outside the archive, a dangling link, a link loop, and a link to a directory.
    """
    paths = [Path(p) for p in paths]
    roots = tuple(os.path.realpath(p) for p in paths if os.path.lexists(p))
    files: list[Path] = []
    problems: list[RecordError] = []
    for p in paths:
        try:
            is_dir, exists = p.is_dir(), p.exists()
        except OSError as exc:
            problems.append(RecordError(f"cannot read ({exc.strerror})", file=display_path(str(p))))
            continue
        if is_dir:
            files.extend(_record_files_under(p, problems, roots))
        elif exists:
            if p.suffix not in RECORD_SUFFIXES:
                raise RecordError(f"unsupported archive file; expected {', '.join(RECORD_SUFFIXES)} "
                                  "or a directory of them", file=display_path(str(p)))
            if _utf8_name(str(p), problems):
                files.append(p)
        else:
            raise RecordError("no such file or directory", file=display_path(str(p)))
    return Listing(files, problems)


def _inside(real: str, roots: tuple[str, ...]) -> bool:
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _link_problem(path: str, roots: tuple[str, ...]) -> RecordError | None:
    """Why the symbolic link `path` (a record file's name) is not followed, or None when it is:
    it resolves to a regular file inside `roots`."""
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    shown = f"symbolic link to {display_path(target)!r}"
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return RecordError(f"{shown} that loops back on itself; not followed", file=display_path(path))
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return RecordError(f"dangling {shown} (no such file); not followed", file=display_path(path))
        return RecordError(f"{shown} that cannot be followed ({exc.strerror}); not followed",
                           file=display_path(path))
    if stat.S_ISDIR(st.st_mode):
        return RecordError(f"{shown}, a directory; not followed: name it on the command line to score "
                           "the records below it", file=display_path(path))
    if not stat.S_ISREG(st.st_mode):
        return RecordError(f"{shown}, not a regular file; not followed", file=display_path(path))
    real = os.path.realpath(path)
    if not _inside(real, roots):
        return RecordError(f"{shown}, a file outside the archive ({display_path(real)!r}); not followed: a store "
                           "may only point at files of the archives named on the command line (copy the file "
                           "into the archive, or name its folder too)", file=display_path(path))
    return None


def display_path(path: str) -> str:
    """`path` as printable text: bytes that are not UTF-8 (held as surrogates) shown as \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _utf8_name(path: str, problems: list[RecordError]) -> bool:
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:
        problems.append(RecordError("the file name is not valid UTF-8; rename it (the run store keeps sources "
                                    "and trajectory paths as UTF-8 text)", file=display_path(path)))
        return False


def _record_files_under(directory: Path, problems: list[RecordError], roots: tuple[str, ...] = ()) -> list[Path]:
    """Record files below `directory`, hidden files excluded, in `sorted(Path)` order.

    os.walk and sorting on path components: rglob, is_file and Path comparisons cost
    more than scoring on a 15k-file archive. Unreadable subdirectories become problems,
    and so do the symbolic links that are not followed (`list_archive`; `roots`: the
    resolved paths named on the command line, `directory`'s own by default).
    """
    roots = roots or (os.path.realpath(directory),)

    def unreadable(exc: OSError) -> None:
        problems.append(RecordError(f"cannot list this directory ({exc.strerror}); its records were not scored",
                                    file=display_path(str(exc.filename))))

    found = []
    for root, dirs, names in os.walk(directory, onerror=unreadable):
        for name in dirs:  # os.walk lists a link to a directory here, and does not enter it
            path = os.path.join(root, name)
            if not name.startswith(".") and os.path.islink(path):
                problems.append(_link_problem(path, roots))
        for name in names:
            if name.startswith(".") or os.path.splitext(name)[1] not in RECORD_SUFFIXES:
                continue
            path = os.path.join(root, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:  # gone since it was listed
                continue
            if stat.S_ISLNK(mode):
                problem = _link_problem(path, roots)
                if problem is not None:
                    problems.append(problem)
                    continue
            elif not stat.S_ISREG(mode):
                problems.append(RecordError("not a regular file (a FIFO, socket or device); not read",
                                            file=display_path(path)))
                continue
            if _utf8_name(path, problems):
                found.append(path)
    found.sort(key=lambda path: path.split(os.sep))
    return [Path(path) for path in found]


def iter_archive(paths: Iterable[str | os.PathLike]) -> Iterator[Loaded]:
    """Yields every episode of the archives; a broken episode yields its error and the rest go on."""
    listing = list_archive(paths)
    for problem in listing.problems:
        yield Loaded(None, problem, problem.file)
    for path in listing.files:
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
