"""Researchers' tags and notes per episode, kept beside a run store (never inside its tables).

The file is `STORE/annotations.jsonl`, an append-only log: every save appends one line

    {"episode_id": "libero-goal/task_1/scripted-careful/ep_000", "tags": ["real"], "note": "…",
     "saved": "2026-11-23T22:01:05+00:00"}

and the last line of an episode wins (an empty tag list and note clears it). Appending one
short line is a single `write` on a file opened with O_APPEND, so two dashboard sessions
saving at once interleave whole lines instead of overwriting each other's file, and the
scorer (`scoring.store.write`), which rewrites only its own Parquet, manifest and errors files,
never touches it: tags survive `safevla score` re-runs with another registry or threshold.
Episodes are keyed by `episode_id`, unique within a store.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec
import yaml

from scoring.errors import SafeVLAError

ANNOTATIONS = "annotations.jsonl"
SUGGESTED_TAGS_FILE = Path(__file__).resolve().parents[2] / "assets" / "annotation_tags.yaml"
MAX_TAG_CHARS = 60
MAX_NOTE_CHARS = 4000


class AnnotationError(SafeVLAError):
    """A tag or note that cannot be saved (read-only store, bad value); the message says why."""


@dataclasses.dataclass(frozen=True)
class Annotation:
    """An episode's current tags (sorted, unique) and free-text note."""

    episode_id: str
    tags: tuple[str, ...] = ()
    note: str = ""
    saved: str = ""

    @property
    def empty(self) -> bool:
        return not self.tags and not self.note


def annotations_path(store: str | os.PathLike) -> Path:
    return Path(store) / ANNOTATIONS


@functools.lru_cache(maxsize=4)
def suggested_tags(path: str | os.PathLike | None = None) -> tuple[str, ...]:
    """The tags offered first in the dashboard (assets/annotation_tags.yaml, a list of strings);
    read once per process (the dashboard asks on every rerun)."""
    p = Path(path) if path is not None else SUGGESTED_TAGS_FILE
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return ()
    tags = raw.get("suggested", []) if isinstance(raw, dict) else []
    return tuple(t for t in (clean_tags(x for x in tags if isinstance(x, str))))


def clean_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """Stripped, de-duplicated, sorted tags; blanks dropped. Raises AnnotationError for an over-long tag."""
    out = set()
    for t in tags:
        t = " ".join(str(t).split())
        if not t:
            continue
        if len(t) > MAX_TAG_CHARS:
            raise AnnotationError(f"tag {t[:20]!r}… is {len(t)} characters long; expected at most {MAX_TAG_CHARS}")
        out.add(t)
    return tuple(sorted(out, key=str.casefold))


def read_annotations(store: str | os.PathLike) -> tuple[dict[str, Annotation], list[str]]:
    """({episode_id: Annotation} with the last line per episode, problems). A bad line is
    skipped and named (file and line number); a missing file means no annotations."""
    path = annotations_path(store)
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return {}, []
    except OSError as exc:
        return {}, [f"{path}: cannot read the annotations ({exc.strerror}); tags and notes are not shown"]
    out: dict[str, Annotation] = {}
    problems: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = msgspec.json.decode(line)
            ann = _from_object(obj)
        except (msgspec.DecodeError, AnnotationError, TypeError, ValueError) as exc:
            problems.append(f"{path} line {n}: skipped ({exc}); expected a JSON object with episode_id (string), "
                            "tags (list of strings) and note (string)")
            continue
        if ann.empty:
            out.pop(ann.episode_id, None)
        else:
            out[ann.episode_id] = ann
    return out, problems


def _from_object(obj) -> Annotation:
    if not isinstance(obj, dict):
        raise AnnotationError(f"got {type(obj).__name__}")
    eid, tags, note = obj.get("episode_id"), obj.get("tags", []), obj.get("note", "")
    if not isinstance(eid, str) or not eid:
        raise AnnotationError("episode_id is missing or not a string")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise AnnotationError(f"episode {eid!r}: tags is not a list of strings")
    if not isinstance(note, str):
        raise AnnotationError(f"episode {eid!r}: note is not a string")
    return Annotation(eid, clean_tags(tags), note.strip(), str(obj.get("saved", "")))


def save_annotation(store: str | os.PathLike, episode_id: str, *, tags: Iterable[str] = (),
                    note: str = "") -> Annotation:
    """Appends the episode's new tags and note; returns what was saved.

    Raises AnnotationError, with the store path and the cause, when the store folder is
    missing or not writable, or a value is out of bounds.
    """
    if not isinstance(episode_id, str) or not episode_id:
        raise AnnotationError("cannot save an annotation without an episode id")
    note = (note or "").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise AnnotationError(f"the note of episode {episode_id!r} is {len(note)} characters long; "
                              f"expected at most {MAX_NOTE_CHARS}")
    ann = Annotation(episode_id, clean_tags(tags), note,
                     _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat())
    line = msgspec.json.encode({"episode_id": ann.episode_id, "tags": list(ann.tags), "note": ann.note,
                                "saved": ann.saved}) + b"\n"
    path = annotations_path(store)
    if not path.parent.is_dir():
        raise AnnotationError(f"cannot save the tags of episode {episode_id!r}: the run store {str(path.parent)!r} "
                              "is not a directory")
    if path.is_symlink() and path.resolve().parent != path.parent.resolve():
        # a dashboard serving several stores writes only inside the one it shows
        raise AnnotationError(f"cannot save the tags of episode {episode_id!r}: {str(path)!r} links outside the run "
                              "store; refused (annotations are written only inside the store folder)")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write per line: concurrent sessions interleave whole lines
        finally:
            os.close(fd)
    except OSError as exc:
        raise AnnotationError(f"cannot save the tags of episode {episode_id!r}: {str(path)!r} is not writable "
                              f"({exc.strerror}); the run store is read-only for this dashboard") from None
    return ann


def annotation_columns(annotations: Mapping[str, Annotation], episode_ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """(tags, note) per episode id, for tables and CSV: tags joined with "; ", "" when none."""
    tags, notes = [], []
    for eid in episode_ids:
        a = annotations.get(eid)
        tags.append("; ".join(a.tags) if a else "")
        notes.append(a.note if a else "")
    return tags, notes


def all_tags(annotations: Mapping[str, Annotation]) -> tuple[str, ...]:
    """Every tag in use, sorted."""
    return clean_tags(t for a in annotations.values() for t in a.tags)
