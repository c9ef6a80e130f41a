import dataclasses
import json

import pandas as pd
import pytest

from scoring.errors import RecordError, SafeVLAError
from scoring.io import load_record, save_record
from scoring.score import score_episode
from scoring.store import load_store, score_archive
from scoring.synthetic import make_archive


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
    import scoring.store_jobs as store_mod
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

    import scoring.store as store_mod
    import scoring.store_jobs as jobs_mod
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

