"""The bad-input table: one row per kind of bad input, each beside good episodes, scored by a real
`safevla score` process. The good episodes are all scored, the bad item is refused on one
line naming its file (exit code 3, listed in errors.json), no traceback escapes, and nothing
is written outside the store. Every bad item is built here from code."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoring.records.io import load_record, record_to_json, record_to_npz_bytes
from scoring.records.npz_format import read_npz
from scoring.records.synthetic import make_archive, make_record

N_GOOD = 4


def good_archive(root: Path) -> tuple[Path, list[str]]:
    paths = make_archive(root / "arch", N_GOOD, seed=3, n_steps=30, contacts_per_step=3)
    return root / "arch", [load_record(p).episode_id for p in paths]


def good_record(episode_id: str = "bad/ep"):
    return make_record(np.random.default_rng(9), episode_id=episode_id, n_steps=30, contacts_per_step=3)


def npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def npz_with_header(**changes) -> bytes:
    arrays = read_npz(record_to_npz_bytes(good_record()))
    header = json.loads(arrays["__header__"].tobytes())
    header.update(changes)
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    return npz_bytes(arrays)


def npz_with_dtype(bad: bytes) -> bytes:
    raw = bytearray(record_to_npz_bytes(good_record()))
    at = raw.find(b"'<f8'")
    raw[at + 1:at + 4] = bad
    return bytes(raw)


def npz_short_member() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("__header__.npy", b"\x93NUMPY")
    return buf.getvalue()


def zip_bomb(path: Path, inflated: int) -> Path:
    """An .npz whose one float member inflates to `inflated` bytes of zeros (about 1000:1)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (inflated // 8,)})
    chunk = bytes(2**24)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("eef_pos.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            for _ in range(inflated // len(chunk)):
                member.write(chunk)
    return path


def json_record(**changes) -> bytes:
    obj = record_to_json(good_record())
    obj.update(changes)
    return json.dumps(obj).encode()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def json_steps(**per_step) -> bytes:
    """A good JSON record with step fields set per step (`name=lambda i: value`)."""
    obj = record_to_json(good_record())
    for i, step in enumerate(obj["steps"]):
        step.update({name: value(i) for name, value in per_step.items()})
    return json.dumps(obj).encode()


def too_deep(text: bytes) -> bytes:
    """`text` (a JSON object) with one more key holding arrays nested 100,000 deep."""
    return text[:-1] + b', "notes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def npz_with_deep_header() -> bytes:
    arrays = read_npz(record_to_npz_bytes(good_record()))
    arrays["__header__"] = np.frombuffer(too_deep(arrays["__header__"].tobytes()), np.uint8)
    return npz_bytes(arrays)


def link(path: Path, target: str | Path) -> Path:
    path.symlink_to(target)
    return path


def link_out(a: Path) -> Path:
    """A link inside the archive to a good record outside it."""
    outside = a.parent / "outside"
    outside.mkdir()
    write(outside / "elsewhere.npz", record_to_npz_bytes(good_record("outside/ep")))
    return link(a / "linked.npz", outside / "elsewhere.npz")


def linked_dir(a: Path) -> Path:
    more = a.parent / "more"
    more.mkdir()
    write(more / "below.npz", record_to_npz_bytes(good_record("more/ep")))
    return link(a / "linked_dir", more)


# finding, what it is, how to build it in the archive -> the file name the refusal must name
ROWS = {
    "1 list header (a list where the header map belongs)": lambda a: write(a / "bad.npz", npz_bytes(
        {"__header__": np.frombuffer(b"[1, 2]", np.uint8)})),
    "1 body_roles not pairs": lambda a: write(a / "bad.npz", npz_with_header(body_roles=[1, 2])),
    "1 replay not an object": lambda a: write(a / "bad.npz", npz_with_header(replay="scene.xml")),
    "1 meta not an object": lambda a: write(a / "bad.npz", npz_with_header(meta=[1])),
    "1 dtype <q9": lambda a: write(a / "bad.npz", npz_with_dtype(b"<q9")),
    "1 dtype object": lambda a: write(a / "bad.npz", npz_with_dtype(b"|O8")),
    "1 six-byte member": lambda a: write(a / "bad.npz", npz_short_member()),
    "2 seed beyond int64": lambda a: write(a / "bad.json", json_record(seed=2**64)),
    "2 init_state Infinity": lambda a: write(a / "bad.json", json_record(init_state=float("inf"))),
    "2 seed beyond int64 in .npz": lambda a: write(a / "bad.npz", npz_with_header(meta={"seed": -2**63 - 1})),
    "3 non-UTF-8 file name": lambda a: write(a / os.fsdecode(b"caf\xe9.npz"), record_to_npz_bytes(good_record())),
    "5 zip bomb (400 MB from 0.4 MB)": lambda a: zip_bomb(a / "bad.npz", 400 * 2**20),
    "6 duplicate episode id": lambda a: (write(a / "dup_a.json", json_record(episode_id="dup", success=False)),
                                         write(a / "zz_dup.json", json_record(episode_id="dup", success=True)))[1],
    # values that were silently changed or unbounded
    "2 seed -2**63-1 in JSON (read as a double, it rounded to -2**63)":
        lambda a: write(a / "bad.json", json_record(seed=-2**63 - 1)),
    "2 dt 1e-300": lambda a: write(a / "bad.json", json_record(dt=1e-300)),
    "2 dt 1e300": lambda a: write(a / "bad.json", json_record(dt=1e300)),
    "2 t beyond 1e10": lambda a: write(a / "bad.json", json_steps(t=lambda i: i * 1e300)),
    "2 positions of 1e300 m (the signals overflow)":
        lambda a: write(a / "bad.json", json_steps(eef_pos_m=lambda i: [1e300 * (i % 2), 0.0, 0.8])),
    "1 JSON nested 100,000 deep": lambda a: write(a / "bad.json", too_deep(json_record())),
    "1 .npz header nested 100,000 deep": lambda a: write(a / "bad.npz", npz_with_deep_header()),
    # the links that are not followed
    "4 link to an .npz outside the archive": link_out,
    "4 link loop": lambda a: link(a / "loop.json", "loop.json"),
    "4 dangling link": lambda a: link(a / "dangling.npz", "gone.npz"),
    "4 link to a directory": linked_dir,
}
# how the refusal names the file, where that is not its plain name (non-UTF-8 bytes are shown as \xNN,
# one backslash: the message is not the repr of a name already escaped)
NAMED = {"3 non-UTF-8 file name": "caf\\xe9.npz"}
# what the refusal says, beyond the file's name
SAYS = {
    "2 seed -2**63-1 in JSON (read as a double, it rounded to -2**63)": "field 'seed': expected an integer within int64",
    "2 dt 1e-300": "field 'dt': expected a control step of 1e-06 to 60 seconds",
    "2 dt 1e300": "field 'dt': expected a control step of 1e-06 to 60 seconds",
    "2 t beyond 1e10": "field 't': expected step indices or times within +-1e+10",
    "2 positions of 1e300 m (the signals overflow)": "values far outside physical ranges",
    "1 JSON nested 100,000 deep": "not valid JSON (arrays or objects nested about 1,000 levels deep",
    "1 .npz header nested 100,000 deep": "unreadable header (arrays or objects nested about 1,000 levels deep",
    "4 link to an .npz outside the archive": "a file outside the archive",
    "4 link loop": "loops back on itself; not followed",
    "4 dangling link": "dangling symbolic link to 'gone.npz'",
    "4 link to a directory": "a directory; not followed",
    "5 zip bomb (400 MB from 0.4 MB)": "': its members declare more than",
}


def tree(root: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` outside `skip`, with its size and mtime: what a run may not change."""
    out = {}
    for dirpath, dirnames, names in os.walk(root):
        if Path(dirpath) == skip:
            dirnames.clear()
            continue
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns)
    return out


def score(*argv: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "scoring.cli", "score", *argv, "--no-progress"],
                          capture_output=True, text=True, errors="backslashreplace")


def assert_refused_beside_good(root: Path, archive: Path, good_ids: list[str], named: str,
                               out: subprocess.CompletedProcess, store: Path, before: dict) -> list[dict]:
    assert "Traceback" not in out.stderr, out.stderr
    assert "Warning" not in out.stderr, out.stderr  # numpy's RuntimeWarnings on overflow, for one
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr)
    eps = pd.read_parquet(store / "episodes.parquet")
    assert set(good_ids) <= set(eps["episode_id"]), "a good episode was lost"
    refusals = [line for line in out.stderr.splitlines() if line.startswith("refused: ")]
    assert refusals and all(named in line for line in refusals), out.stderr
    assert all("refused:" not in line[len("refused: "):] for line in refusals), out.stderr  # said once
    assert all("please report it as a bug" not in line for line in refusals), out.stderr  # bad input, named
    # no infinite robustness in the store, but the +inf of a gate that never opened (no extreme step)
    specs = pd.read_parquet(store / "spec_results.parquet")
    rho = specs.loc[specs["active"], "rho"]
    vacuous = (rho == np.inf) & specs.loc[specs["active"], "extreme_step"].isna()
    assert (np.isfinite(rho) | vacuous).all(), specs[specs["active"]][~(np.isfinite(rho) | vacuous)]
    assert f"refused {len(refusals)} (listed in {store / 'errors.json'})" in out.stdout
    errors = json.loads((store / "errors.json").read_text())
    assert len(errors) == len(refusals) and all(named in e["message"] for e in errors)
    assert tree(root, store) == before, "a file outside the store was written or changed"
    return errors


@pytest.mark.parametrize("row", ROWS, ids=list(ROWS))
def test_bad_item_beside_good_episodes(tmp_path, row):
    archive, good_ids = good_archive(tmp_path)
    bad = ROWS[row](archive)
    store = tmp_path / "store"
    before = tree(tmp_path, store)
    out = score(str(archive), "--out", str(store))
    errors = assert_refused_beside_good(tmp_path, archive, good_ids, NAMED.get(row, bad.name), out, store, before)
    assert all(SAYS.get(row, "") in e["message"] for e in errors), errors
    eps = pd.read_parquet(store / "episodes.parquet")
    # only the accepted episodes' trajectories are kept: no orphans from a refused item
    kept = {p.name for p in (store / "trajectories").glob("*.npz")} if (store / "trajectories").exists() else set()
    assert kept == {Path(t).name for t in eps["trajectory"] if t.startswith("trajectories/")}
    if row.startswith("6"):
        # the first one is kept; its row and its trajectory agree (the duplicate overwrote nothing)
        good_ids.append("dup")
        dup = eps.set_index("episode_id").loc["dup"]
        assert not dup["success"] and not load_record(store / dup["trajectory"]).success
    assert set(eps["episode_id"]) == set(good_ids)
    rerun = score(str(archive), "--out", str(store))  # a re-run keeps the good ones and refuses the same item
    assert rerun.returncode == 3 and f"skipped {len(good_ids)} already scored" in rerun.stdout, rerun.stdout


def test_a_corrupt_spec_results_table_is_named(tmp_path):
    """A corrupt spec_results.parquet in the store being scored into is named as itself, not as
    episodes.parquet."""
    archive, _ = good_archive(tmp_path)
    store = tmp_path / "store"
    assert score(str(archive), "--out", str(store)).returncode == 0
    (store / "spec_results.parquet").write_bytes(b"not parquet")
    out = score(str(archive), "--out", str(store))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line, = out.stderr.splitlines()
    assert line.startswith(f"safevla score: file '{store / 'spec_results.parquet'}': corrupt Parquet file"), line


def test_a_link_inside_the_archive_is_followed_and_replays(tmp_path):
    """The symlink rule's other half: a link to a record inside the archive is
    scored, and the store's readers open it: what `score` scores, readers open."""
    from replay.render.cli import store_record

    archive, good_ids = good_archive(tmp_path)
    first = sorted(archive.glob("*.npz"))[0]
    first.rename(archive / ".kept_aside.npz")  # hidden: not listed itself, only through the link
    link(first, ".kept_aside.npz")
    store = tmp_path / "store"
    out = score(str(archive), "--out", str(store))
    assert out.returncode == 0 and not out.stderr, out.stderr
    eps = pd.read_parquet(store / "episodes.parquet")
    assert set(eps["episode_id"]) == set(good_ids)
    for eid in eps["episode_id"]:
        assert store_record(store, eid, archives=[archive]).episode_id == eid


def without_file_permissions() -> tuple[str, ...]:
    """A command prefix under which chmod 000 really hides a file: root reads anything otherwise."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv is missing: cannot make a file unreadable")
    return ("setpriv", "--bounding-set=-dac_override,-dac_read_search")


@pytest.mark.parametrize("what", ["unreadable .jsonl", "unreadable subdirectory"])
def test_unreadable_items_are_refusals_naming_them(tmp_path, what):
    """Finding 4: an unreadable .jsonl crashed job planning; an unreadable folder was skipped silently."""
    archive, good_ids = good_archive(tmp_path)
    if what == "unreadable .jsonl":
        bad = write(archive / "lines.jsonl", json_record() + b"\n")
    else:
        bad = archive / "private"
        bad.mkdir()
        write(bad / "inside.npz", record_to_npz_bytes(good_record()))
    bad.chmod(0)
    try:
        store = tmp_path / "store"
        before = tree(tmp_path, store)
        out = score(str(archive), "--out", str(store), prefix=without_file_permissions())
        errors = assert_refused_beside_good(tmp_path, archive, good_ids, bad.name, out, store, before)
        assert "Permission denied" in errors[0]["message"]
    finally:
        bad.chmod(0o755)


def test_zip_bomb_peak_memory_stays_under_1_gib(tmp_path):
    """Finding 5: a zip bomb (1.5 MB inflating to 1.5 GB peaked at 3.35 GB) beside good episodes."""
    archive, good_ids = good_archive(tmp_path)
    bomb = zip_bomb(archive / "bomb.npz", 1536 * 2**20)
    assert bomb.stat().st_size < 2 * 2**20
    store = tmp_path / "store"
    before = tree(tmp_path, store)
    # the run in its own parent, so RUSAGE_CHILDREN is its peak alone (not earlier tests' children)
    measure = ("import resource, subprocess, sys; out = subprocess.run(sys.argv[1:], capture_output=True, text=True);"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
               "sys.stdout.write(out.stdout); sys.stderr.write(out.stderr); sys.exit(out.returncode)")
    out = score(str(archive), "--out", str(store), prefix=(sys.executable, "-c", measure))
    peak_kib, _, rest = out.stdout.partition("\n")
    out.stdout = rest
    assert int(peak_kib) < 2**20, f"peak RSS {int(peak_kib) / 2**20:.2f} GiB"
    print(f"peak RSS of safevla score beside a 1.5 GB zip bomb: {int(peak_kib) / 1024:.0f} MiB")
    errors = assert_refused_beside_good(tmp_path, archive, good_ids, "bomb.npz", out, store, before)
    assert "zip bomb" in errors[0]["message"]


def test_two_concurrent_score_runs_into_one_store_lose_nothing(tmp_path):
    """Finding 7: both used to exit 0 and print "scored 6000" while the store kept half."""
    a = make_archive(tmp_path / "a", 6, seed=1, n_steps=30, contacts_per_step=3)
    b = make_archive(tmp_path / "b", 6, seed=2, n_steps=30, contacts_per_step=3)
    for i, p in enumerate(b):  # distinct ids in the second archive
        rec = load_record(p)
        write(p, record_to_npz_bytes(type(rec)(**{**rec.__dict__, "episode_id": f"b/{i}"})))
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "scoring.cli", "score", "--out", str(store), "--no-progress"]
    # both at once: without --wait the later one refuses, unless the first was already done
    runs = [subprocess.Popen([*cmd, str(tmp_path / x)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for x in ("a", "b")]
    outs = [(r.wait(timeout=300), *r.communicate()) for r in runs]
    kept = set(pd.read_parquet(store / "episodes.parquet")["episode_id"])
    for (rc, out, err), paths in zip(outs, (a, b)):
        ids = {load_record(p).episode_id for p in paths}
        assert "Traceback" not in err
        if rc == 0:
            assert ids <= kept and "scored 6" in out
        else:  # refused loudly, with the other run's pid; nothing of it half-written
            assert rc == 4 and "is being written by another `safevla score` (pid " in err, (rc, err)
    # with --wait both finish, one after the other, and the store holds all 12
    shutil.rmtree(store)
    runs = [subprocess.Popen([*cmd, "--wait", str(tmp_path / x)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for x in ("a", "b")]
    outs = [(r.wait(timeout=300), *r.communicate()) for r in runs]
    assert [rc for rc, _, _ in outs] == [0, 0], outs
    eps = pd.read_parquet(store / "episodes.parquet")
    assert len(eps) == 12 and eps["episode_id"].is_unique
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["n_episodes"] == 12 and len(manifest["sources"]) == 2


def test_a_held_lock_makes_score_refuse_then_wait(tmp_path):
    """The lock is real: held by this process, a run refuses (exit 4); with --wait it runs once released."""
    import threading

    from scoring.store.lock import store_lock

    make_archive(tmp_path / "a", 3, seed=1, n_steps=30, contacts_per_step=3)
    store = tmp_path / "store"
    store.mkdir()
    with store_lock(store):
        out = score(str(tmp_path / "a"), "--out", str(store))
        assert out.returncode == 4 and f"(pid {os.getpid()})" in out.stderr and "--wait" in out.stderr
        assert not (store / "episodes.parquet").exists()
        waiting = subprocess.Popen([sys.executable, "-m", "scoring.cli", "score", str(tmp_path / "a"), "--out",
                                    str(store), "--no-progress", "--wait"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        first = waiting.stderr.readline()  # printed just before it blocks on the lock
        assert f"waiting for pid {os.getpid()}" in first
        threading.Event().wait(1)
        assert waiting.poll() is None  # still blocked while the lock is held
    rc = waiting.wait(timeout=120)
    out, _ = waiting.communicate()
    assert rc == 0 and "scored 3" in out
