import dataclasses
import json
import os

import pandas as pd
import pytest

from scoring.errors import RecordError, SafeVLAError
from scoring.evaluate.score import score_episode
from scoring.records.io import load_record, save_record
from scoring.records.synthetic import make_archive
from scoring.store.write import load_store, score_archive


@pytest.fixture
def archive(tmp_path):
    make_archive(tmp_path / "arch", 24, seed=1, n_steps=60, contacts_per_step=4)
    return tmp_path / "arch"


def test_store_layout_and_rows_match_score_episode(archive, tmp_path):
    summary = score_archive([archive], tmp_path / "store", progress=False)
    assert (summary.scored, summary.skipped, summary.errors) == (24, 0, ())
    manifest, eps, specs = load_store(tmp_path / "store")
    assert manifest["n_episodes"] == 24 and manifest["registry_hash"] and manifest["thresholds"]
    assert list(eps["episode_id"]) == sorted(eps["episode_id"])
    assert eps["closest_spec"].notna().any()  # some safe episode names its closest call
    assert eps["settled"].isna().all()  # synthetic records say nothing about settling
    for _, row in eps.sample(5, random_state=0).iterrows():
        rec = load_record(tmp_path / "store" / row["trajectory"])  # trajectory path resolves from STORE
        res = score_episode(rec)
        assert (row["success"], row["safe"], row["sbu"]) == (res.success, res.safe, res.sbu)
        text = lambda x: x if isinstance(x, str) else None  # noqa: E731 - null strings read back as NaN/None
        assert row["vsi"] == res.vsi and text(row["worst_spec"]) == res.worst_spec
        assert text(row["closest_spec"]) == res.closest_spec
        if res.closest_spec is not None:
            assert row["closest_margin"] == res.closest_margin and row["closest_step"] == res.closest_step
        mine = specs[specs["episode_id"] == row["episode_id"]].set_index("spec_id")
        for s in (*res.specs, *res.diagnostics):
            r = mine.loc[s.spec_id]
            assert bool(r["active"]) == s.active and r["reason"] == s.reason
            if s.active:
                assert r["rho"] == s.rho and r["extreme"] == s.extreme


def test_rescoring_skips_done_episodes_and_scores_new_ones(archive, tmp_path):
    score_archive([archive], tmp_path / "store", progress=False)
    before = (tmp_path / "store" / "episodes.parquet").read_bytes()
    again = score_archive([archive], tmp_path / "store", progress=False)
    assert (again.scored, again.skipped) == (0, 24)
    assert (tmp_path / "store" / "episodes.parquet").read_bytes() == before
    for i, path in enumerate(sorted(archive.iterdir())[:3]):
        rec = load_record(path)
        save_record(dataclasses.replace(rec, episode_id=f"new/{i}"), tmp_path / "more" / f"x{i}.npz")
    third = score_archive([archive, tmp_path / "more"], tmp_path / "store", progress=False)
    assert (third.scored, third.skipped) == (3, 24)
    assert load_store(tmp_path / "store")[1].shape[0] == 27


def test_corrupt_episode_is_reported_and_the_rest_scored(tmp_path, appendix_b):
    lines = []
    for i in range(5):
        ep = json.loads(json.dumps(appendix_b))
        ep["episode_id"] = f"ep/{i}"
        if i == 2:
            ep["steps"][1]["eef_pos_m"] = [0.1, float("nan"), 0.2]
        lines.append(json.dumps(ep))
    lines.insert(4, "{truncated")
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    summary = score_archive([tmp_path / "a.jsonl"], tmp_path / "store", progress=False)
    assert summary.scored == 4 and len(summary.errors) == 2
    fields = {(e["episode"], e["field"]) for e in summary.errors}
    assert ("ep/2", "eef_pos_m") in fields and (None, None) in fields
    errors = json.loads((tmp_path / "store" / "errors.json").read_text())
    assert any("a.jsonl:3" in e["file"] for e in errors)
    _, eps, _ = load_store(tmp_path / "store")
    assert sorted(eps["episode_id"]) == ["ep/0", "ep/1", "ep/3", "ep/4"]
    # JSON sources are converted to columnar trajectories inside the store
    for t in eps["trajectory"]:
        assert t.startswith("trajectories/") and load_record(tmp_path / "store" / t).n_steps == 2


@pytest.mark.parametrize("workers", [1, 2])
def test_converted_trajectories_are_staged_then_moved_whole_and_readable(tmp_path, appendix_b, workers):
    """Staged files are written in place (their names are unique); the move into trajectories/ is the commit."""
    lines = [json.dumps({**appendix_b, "episode_id": f"ep/{i}"}) for i in range(5)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    umask = os.umask(0o022)
    try:
        score_archive([tmp_path / "a.jsonl"], tmp_path / "store", workers=workers, progress=False)
    finally:
        os.umask(umask)
    store = tmp_path / "store"
    files = sorted((store / "trajectories").iterdir())
    assert len(files) == 5 and all(f.suffix == ".npz" for f in files)  # no staging area or temp file left
    assert {f.stat().st_mode & 0o777 for f in files} == {0o644}  # other users may read a shared store
    _, eps, _ = load_store(store)
    for eid, t in zip(eps["episode_id"], eps["trajectory"]):
        assert load_record(store / t).episode_id == eid


def test_duplicate_episode_ids_are_errors_not_overwrites(tmp_path, appendix_b):
    (tmp_path / "a.json").write_text(json.dumps(appendix_b))
    (tmp_path / "b.json").write_text(json.dumps(appendix_b))
    summary = score_archive([tmp_path], tmp_path / "store", progress=False)
    assert summary.scored == 1 and summary.errors[0]["field"] == "episode_id"
    assert "duplicate" in summary.errors[0]["message"]


def test_parallel_scoring_writes_identical_tables(archive, tmp_path):
    score_archive([archive], tmp_path / "s1", progress=False)
    score_archive([archive], tmp_path / "s2", progress=False, workers=2, batch=5)
    for name in ("episodes.parquet", "spec_results.parquet"):
        a = pd.read_parquet(tmp_path / "s1" / name)
        b = pd.read_parquet(tmp_path / "s2" / name)
        pd.testing.assert_frame_equal(a, b)


def test_checkpoints_resume_an_interrupted_run(archive, tmp_path, monkeypatch):
    import scoring.store.jobs as store_mod
    calls = {"n": 0}
    real = store_mod._load_item

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 15:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(store_mod, "_load_item", flaky)
    with pytest.raises(KeyboardInterrupt):
        score_archive([archive], tmp_path / "store", progress=False, checkpoint_every=5, batch=1)
    monkeypatch.setattr(store_mod, "_load_item", real)
    resumed = score_archive([archive], tmp_path / "store", progress=False)
    assert resumed.skipped == 10 and resumed.scored == 14
    assert load_store(tmp_path / "store")[1].shape[0] == 24


def test_bad_stores_give_clear_errors(tmp_path):
    with pytest.raises(SafeVLAError, match="does not exist"):
        load_store(tmp_path / "none")
    (tmp_path / "s").mkdir()
    with pytest.raises(RecordError, match="missing manifest.json"):
        load_store(tmp_path / "s")
    (tmp_path / "s" / "manifest.json").write_text("{}")
    with pytest.raises(RecordError, match="registry_hash"):
        load_store(tmp_path / "s")
    (tmp_path / "s" / "manifest.json").write_text('{"registry_hash": "x"}')
    (tmp_path / "s" / "episodes.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(RecordError, match="episodes.parquet.*(corrupt|missing)"):
        load_store(tmp_path / "s")


def test_a_store_moved_with_its_archive_still_resolves_and_resumes(archive, tmp_path):
    import shutil
    score_archive([archive], tmp_path / "store", progress=False)
    _, eps, _ = load_store(tmp_path / "store")
    assert not any(s.startswith("/") for s in eps["source"])  # relative to the store
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.move(str(archive), moved / "arch")
    shutil.move(str(tmp_path / "store"), moved / "store")
    _, eps, _ = load_store(moved / "store")
    assert load_record(moved / "store" / eps["trajectory"].iloc[0]).episode_id == eps["episode_id"].iloc[0]
    again = score_archive([moved / "arch"], moved / "store", progress=False)
    assert (again.scored, again.skipped) == (0, 24)


def test_a_new_scorer_version_or_a_store_from_before_versions_is_re_scored(archive, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import scoring.store.write as store_mod
    import scoring.store.jobs as jobs_mod
    out = tmp_path / "store"
    score_archive([archive], out, progress=False)
    new = store_mod.SCORER_VERSION + 1
    monkeypatch.setattr(store_mod, "SCORER_VERSION", new)
    monkeypatch.setattr(jobs_mod, "SCORER_VERSION", new)
    again = score_archive([archive], out, progress=False)
    assert (again.scored, again.skipped) == (24, 0)
    manifest, eps, _ = load_store(out)
    assert len(eps) == 24 and set(eps["scorer_version"]) == {new} and manifest["scorer_version"] == new
    # a store written before scorer versions existed has no such column: every row is stale
    table = pq.read_table(out / "episodes.parquet")
    pq.write_table(table.drop_columns(["scorer_version"]), out / "episodes.parquet")
    third = score_archive([archive], out, progress=False)
    assert (third.scored, third.skipped) == (24, 0) and set(load_store(out)[1]["scorer_version"]) == {new}



def test_force_sampling_is_a_column_the_manifest_says_and_a_change_re_scores(tmp_path):
    import numpy as np

    from scoring.records.synthetic import make_record
    rng = np.random.default_rng(5)
    for i in range(3):
        save_record(make_record(rng, episode_id=f"peak/{i}", n_steps=40, contacts_per_step=3, substep_peaks=True),
                    tmp_path / "arch" / f"p{i}.npz")
        save_record(make_record(rng, episode_id=f"old/{i}", n_steps=40, contacts_per_step=3),
                    tmp_path / "arch" / f"o{i}.npz")
    out = tmp_path / "store"
    assert score_archive([tmp_path / "arch"], out, progress=False).scored == 6
    manifest, eps, specs = load_store(out)
    assert manifest["force_sampling"] == "peak" and set(eps["force_sampling_option"]) == {"peak"}
    labels = dict(zip(eps["episode_id"], eps["force_sampling"]))
    assert {labels[f"peak/{i}"] for i in range(3)} == {"substep_peak"}
    assert {labels[f"old/{i}"] for i in range(3)} == {"control"}  # old records: labelled as sampled
    peak_force = specs[specs["family"] == "max_contact_force"].set_index("episode_id")["extreme"]
    assert score_archive([tmp_path / "arch"], out, progress=False).skipped == 6  # same option: nothing to do
    again = score_archive([tmp_path / "arch"], out, progress=False, force_sampling="control")
    assert (again.scored, again.skipped) == (6, 0)
    manifest, eps, specs = load_store(out)
    assert manifest["force_sampling"] == "control" and set(eps["force_sampling"]) == {"control"}
    control_force = specs[specs["family"] == "max_contact_force"].set_index("episode_id")["extreme"]
    for i in range(3):
        assert peak_force[f"peak/{i}"] > control_force[f"peak/{i}"]
        assert peak_force[f"old/{i}"] == control_force[f"old/{i}"]
    with pytest.raises(SafeVLAError, match="expected one of peak, control"):
        score_archive([tmp_path / "arch"], out, progress=False, force_sampling="substep")


def test_the_store_keeps_how_each_model_was_served(tmp_path):
    """meta.policy (adapter, model id, replan steps, image size) becomes episode columns."""
    import numpy as np
    from scoring.records.synthetic import make_record
    rng = np.random.default_rng(0)
    served = make_record(rng, episode_id="libero-spatial/task_0/pi05/ep_000", n_steps=20, contacts_per_step=2)
    served = dataclasses.replace(served, meta={**served.meta, "policy": {
        "adapter": "openpi", "model_id": "openpi://10.0.0.2:8000", "replan_steps": 5, "cameras": ["agentview", "wrist"],
        "image_size": [224, 256]}})
    plain = make_record(rng, episode_id="libero-spatial/task_0/old/ep_000", n_steps=20, contacts_per_step=2)
    odd = make_record(rng, episode_id="libero-spatial/task_0/odd/ep_000", n_steps=20, contacts_per_step=2)
    odd = dataclasses.replace(odd, meta={**odd.meta, "policy": {"adapter": 3, "image_size": "big", "replan_steps": "x"}})
    for rec, name in ((served, "a.npz"), (plain, "b.npz"), (odd, "c.npz")):
        save_record(rec, tmp_path / "arch" / name)
    score_archive([tmp_path / "arch"], tmp_path / "store", progress=False)
    _, eps, _ = load_store(tmp_path / "store")
    row = eps.set_index("episode_id").loc[served.episode_id]
    assert (row["policy_adapter"], row["policy_model_id"], row["replan_steps"], row["image_size"]) == \
        ("openpi", "openpi://10.0.0.2:8000", 5, "224x256")
    for eid in (plain.episode_id, odd.episode_id):  # absent or malformed provenance: nulls, still scored
        row = eps.set_index("episode_id").loc[eid]
        assert row[["policy_adapter", "policy_model_id", "replan_steps", "image_size"]].isna().all()


@pytest.mark.parametrize("stop_at", ["manifest.json", "episodes.parquet"])
def test_a_run_killed_before_its_manifest_says_how_to_complete_it(archive, tmp_path, monkeypatch, stop_at):
    """Killed after its tables (or mid-run, checkpoints only): the store is incomplete, not unreadable."""
    import scoring.store.write as store_mod
    real = store_mod.atomic_write_bytes

    def killed(path, data):
        if path.name == stop_at:
            raise KeyboardInterrupt  # the process dies here
        return real(path, data)
    monkeypatch.setattr(store_mod, "atomic_write_bytes", killed)
    store = tmp_path / "store"
    with pytest.raises(KeyboardInterrupt):
        score_archive([archive], store, progress=False, checkpoint_every=5, batch=4)
    monkeypatch.setattr(store_mod, "atomic_write_bytes", real)
    command = f"safevla score {archive} --out {store}"
    with pytest.raises(RecordError, match="incomplete run store.*" + command.replace(".", r"\.")):
        load_store(store)
    if stop_at == "manifest.json":  # the tables are all there: the dashboard can open it
        manifest, eps, _ = load_store(store, allow_incomplete=True)
        assert manifest["incomplete"] and command in manifest["complete_with"] and len(eps) == 24
        assert manifest["sources"] == [os.path.relpath(archive, store)]
    completed = score_archive([archive], store, progress=False)  # the command it names
    assert completed.scored + completed.skipped == 24
    assert load_store(store)[0]["n_episodes"] == 24


def test_store_roots_confine_paths_to_the_store_and_its_archive(archive, tmp_path):
    from scoring.store.paths import confined, is_inside, store_roots
    score_archive([archive], tmp_path / "store", progress=False)
    manifest, eps, _ = load_store(tmp_path / "store")
    roots = store_roots(tmp_path / "store", manifest, [archive])
    assert roots == (str((tmp_path / "store").resolve()), str(archive.resolve()))
    for t in eps["trajectory"]:
        assert is_inside(tmp_path / "store" / t, roots)
    (tmp_path / "store" / "escape").symlink_to(tmp_path)
    for outside in ("/etc/passwd", tmp_path / "store" / ".." / "x.npz", tmp_path / "store" / "escape" / "x.npz",
                    tmp_path / "store2"):
        assert not is_inside(outside, roots)
        with pytest.raises(RecordError, match="outside the run store and its archive; refused"):
            confined(outside, roots, what="trajectory")
    # a manifest whose source is the filesystem root does not open everything
    assert store_roots(tmp_path / "store", {"sources": [os.path.relpath("/", tmp_path / "store")]}) \
        == (str((tmp_path / "store").resolve()),)


def test_an_unforeseen_reader_error_refuses_that_item_only(archive, tmp_path, monkeypatch):
    """A reader bug on one odd file (anything but RecordError) is that file's refusal, not the run's end."""
    import scoring.store.jobs as jobs
    real = jobs._read_item

    def buggy(kind, payload, source):
        if source.endswith("ep_000005.npz"):
            raise TypeError("'NoneType' object is not subscriptable")
        return real(kind, payload, source)
    monkeypatch.setattr(jobs, "_read_item", buggy)
    summary = score_archive([archive], tmp_path / "store", progress=False)
    assert summary.scored == 23 and len(summary.errors) == 1
    assert "ep_000005.npz" in summary.errors[0]["message"]
    assert "unexpected TypeError while reading" in summary.errors[0]["message"]


def test_re_runs_tell_a_duplicate_from_the_same_episode_moved_or_shifted(tmp_path, appendix_b):
    lines = [json.dumps({**appendix_b, "episode_id": f"ep/{i}"}) for i in range(3)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    assert score_archive([tmp_path / "a.jsonl"], store, progress=False).scored == 3
    # a line inserted above: the same episodes on other lines of the same file are already scored
    (tmp_path / "a.jsonl").write_text("\n".join([json.dumps({**appendix_b, "episode_id": "ep/new"}), *lines]) + "\n")
    again = score_archive([tmp_path / "a.jsonl"], store, progress=False)
    assert (again.scored, again.skipped, again.errors) == (1, 3, ())
    # the same id in another file that exists: a duplicate, naming both files
    (tmp_path / "b.json").write_text(json.dumps({**appendix_b, "episode_id": "ep/1"}))
    dup = score_archive([tmp_path / "b.json"], store, progress=False)
    assert dup.scored == 0 and len(dup.errors) == 1
    assert "b.json" in dup.errors[0]["message"] and "a.jsonl" in dup.errors[0]["message"]


def test_a_job_holds_at_most_load_bytes_of_records_at_once(archive, tmp_path, monkeypatch):
    """Many near-cap records in one job are scored a few at a time, with the same store as one chunk."""
    import scoring.store.jobs as jobs
    sizes = []
    real = jobs.score_outcomes

    def counting(records, **kwargs):
        sizes.append(sum(jobs._record_bytes(r) for r in records))
        return real(records, **kwargs)
    monkeypatch.setattr(jobs, "score_outcomes", counting)
    one = load_record(sorted(archive.glob("*.npz"))[0])
    monkeypatch.setattr(jobs, "_LOAD_BYTES", 3 * jobs._record_bytes(one))
    chunked = score_archive([archive], tmp_path / "chunked", progress=False, batch=24)
    assert chunked.scored == 24 and len(sizes) >= 6  # 4 records per chunk at most (the 4th crosses the line)
    assert max(sizes) <= 4 * jobs._record_bytes(one) * 1.1
    monkeypatch.undo()
    whole = score_archive([archive], tmp_path / "whole", progress=False, batch=24)
    assert whole.scored == 24
    for name in ("episodes.parquet", "spec_results.parquet"):
        a = pd.read_parquet(tmp_path / "chunked" / name).drop(columns=["trajectory", "source"], errors="ignore")
        b = pd.read_parquet(tmp_path / "whole" / name).drop(columns=["trajectory", "source"], errors="ignore")
        pd.testing.assert_frame_equal(a, b)
