"""Tags and notes beside a run store: the append-only log, its bad lines, read-only stores,
and that re-scoring the store (another threshold) leaves them alone."""

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from scoring.records.synthetic import make_archive
from scoring.store.annotations import (ANNOTATIONS, AnnotationError, all_tags, annotation_columns, clean_tags,
                                       read_annotations, save_annotation, suggested_tags)
from scoring.store.write import load_store, score_archive

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def test_last_line_per_episode_wins_and_empty_clears(tmp_path):
    save_annotation(tmp_path, "a", tags=["real", " sim  artifact ", "real", ""], note=" first ")
    save_annotation(tmp_path, "b", tags=["grasp-slip false positive"])
    save_annotation(tmp_path, "a", tags=["sim artifact"], note="second look")
    save_annotation(tmp_path, "b", tags=[], note="")
    got, problems = read_annotations(tmp_path)
    assert problems == []
    assert set(got) == {"a"}
    assert got["a"].tags == ("sim artifact",) and got["a"].note == "second look" and got["a"].saved
    assert len((tmp_path / ANNOTATIONS).read_text().splitlines()) == 4  # appended, never rewritten
    assert annotation_columns(got, ["a", "b"]) == (["sim artifact", ""], ["second look", ""])
    assert all_tags(got) == ("sim artifact",)


def test_bad_lines_are_named_and_the_rest_kept(tmp_path):
    save_annotation(tmp_path, "a", tags=["real"])
    with open(tmp_path / ANNOTATIONS, "a") as f:
        f.write("{not json\n")
        f.write('{"episode_id": "c", "tags": "real"}\n')
        f.write("[1, 2]\n")
    save_annotation(tmp_path, "d", note="kept")
    got, problems = read_annotations(tmp_path)
    assert set(got) == {"a", "d"}
    assert len(problems) == 3
    assert f"{ANNOTATIONS} line 2" in problems[0] and "expected a JSON object" in problems[0]
    assert "episode 'c': tags is not a list of strings" in problems[1]


def test_missing_file_is_no_annotations(tmp_path):
    assert read_annotations(tmp_path) == ({}, [])


def _as_unprivileged(fn) -> str:
    """Run `fn` in a forked child that cannot write where root could (it drops to `nobody`
    when the tests run as root) and return what it printed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's teardown
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            out = fn()
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            out = f"{type(exc).__name__}: {exc}"
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        got = pipe.read()
    os.waitpid(pid, 0)
    return got


def test_read_only_store_gives_one_clear_error():
    # a folder anyone can reach (pytest's tmp_path is private to root), the store inside read-only
    base = Path(tempfile.mkdtemp(prefix="safevla-ro-"))
    try:
        base.chmod(0o755)
        store = base / "store"
        store.mkdir()
        store.chmod(0o555)
        got = _as_unprivileged(lambda: repr(save_annotation(store, "x", tags=["real"])))
        assert got.startswith("AnnotationError: ")
        assert re.search(r"episode 'x'.*not writable.*read-only", got), got
        assert not (store / ANNOTATIONS).exists()
    finally:
        (base / "store").chmod(0o755)
        shutil.rmtree(base)
    with pytest.raises(AnnotationError, match="is not a directory"):
        save_annotation(base / "absent", "x", tags=["real"])


def test_unwritable_log_gives_one_clear_error_even_as_root(tmp_path):
    (tmp_path / ANNOTATIONS).mkdir()  # cannot be opened for writing, whoever runs the test
    with pytest.raises(AnnotationError, match=r"episode 'x'.*annotations.jsonl.*not writable"):
        save_annotation(tmp_path, "x", tags=["real"])
    got, problems = read_annotations(tmp_path)
    assert got == {} and "cannot read the annotations" in problems[0]


def test_a_log_linking_outside_the_store_is_refused(tmp_path):
    store, outside = tmp_path / "store", tmp_path / "elsewhere.jsonl"
    store.mkdir()
    outside.write_text("")
    (store / ANNOTATIONS).symlink_to(outside)
    with pytest.raises(AnnotationError, match="links outside the run store; refused"):
        save_annotation(store, "x", tags=["real"])
    assert outside.read_text() == ""


def test_values_are_bounded():
    with pytest.raises(AnnotationError, match="at most 60"):
        clean_tags(["x" * 61])
    assert clean_tags(["b", "a", " b ", "c  d"]) == ("a", "b", "c d")


def test_suggested_tags_come_from_the_registry_file():
    tags = suggested_tags()
    assert {"real", "sim artifact", "grasp-slip false positive"} <= set(tags)


def test_rescoring_with_a_changed_threshold_keeps_the_annotations(tmp_path):
    make_archive(tmp_path / "arch", 12, seed=3, n_steps=40, contacts_per_step=3)
    store = tmp_path / "store"
    score_archive([tmp_path / "arch"], store, progress=False)
    eid = load_store(store)[1]["episode_id"].iat[0]
    save_annotation(store, eid, tags=["real"], note="checked by eye")
    before = (store / ANNOTATIONS).read_bytes()
    registry = tmp_path / "registry"
    shutil.copytree(ASSETS, registry, ignore=shutil.ignore_patterns("demo"))
    specs = (registry / "specs.yaml").read_text()
    assert "threshold: 0.005" in specs
    specs = specs.replace("threshold: 0.005", "threshold: 0.002", 1)
    (registry / "specs.yaml").write_text(specs.replace("non_target_disp_max < 0.005)", "non_target_disp_max < 0.002)", 1))
    again = score_archive([tmp_path / "arch"], store, progress=False, registry_path=registry)
    assert again.scored == 12  # every episode really re-scored under the new registry
    assert load_store(store)[0]["thresholds"]["non_target_max_disp"] == 0.002
    assert (store / ANNOTATIONS).read_bytes() == before
    got, _ = read_annotations(store)
    assert got[eid].tags == ("real",) and got[eid].note == "checked by eye"
