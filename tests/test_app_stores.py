"""Which stores the Streamlit app opens, through `streamlit.testing.v1.AppTest`: bad and
incomplete stores, a registry mismatch, the sidebar's loader, the allow-list a link may open,
and trajectory or MJCF paths that point out of the store."""

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard.stores import NOT_AVAILABLE  # noqa: E402
from scoring.records.io import load_record  # noqa: E402
from dashboard_helpers import APP, app, build_store, metric, ok, qp  # noqa: E402

PAGES = ["overview", "episodes", "detail", "whatif", "export"]


def make_store(out: Path, n: int = 64, renderable: bool = True) -> Path:
    return build_store(out, n, renderable=renderable)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("app_stores") / "store")


@pytest.fixture(scope="module")
def tables(store):
    return pd.read_parquet(store / "episodes.parquet"), pd.read_parquet(store / "spec_results.parquet")


# ----------------------------------------------------------------------------- stores

def _variant(tmp_path, store, name):
    dst = tmp_path / name
    shutil.copytree(store, dst)
    return dst


@pytest.mark.parametrize("case,message", [
    ("missing", "does not exist"),
    ("empty_dir", "missing manifest.json"),
    ("corrupt", "corrupt Parquet"),
    ("no_episodes", "no scored episodes"),
    ("bad_manifest", "corrupt manifest"),
])
def test_bad_stores_show_an_error_not_a_traceback(tmp_path, store, case, message):
    path = tmp_path / case
    if case == "empty_dir":
        path.mkdir()
    elif case == "corrupt":
        path = _variant(tmp_path, store, case)
        (path / "episodes.parquet").write_bytes(b"\x00garbage" * 10)
    elif case == "no_episodes":
        path = _variant(tmp_path, store, case)
        for name in ("episodes.parquet", "spec_results.parquet"):
            pd.read_parquet(path / name).head(0).to_parquet(path / name)
    elif case == "bad_manifest":
        path = _variant(tmp_path, store, case)
        (path / "manifest.json").write_text("{not json")
    at = app(path)
    assert not at.exception
    assert any(message in e.value for e in at.error), [e.value for e in at.error]


def test_registry_mismatch_warns_and_still_works(tmp_path, store):
    path = _variant(tmp_path, store, "mismatch")
    m = json.loads((path / "manifest.json").read_text())
    m["registry_hash"] = "f" * 64
    (path / "manifest.json").write_text(json.dumps(m))
    for page in PAGES:
        at = ok(app(path, page=page))
        assert any("Registry mismatch" in w.value for w in at.sidebar.warning)


def test_loading_another_store_from_the_sidebar(tmp_path, store, tables):
    eps, _ = tables
    small = make_store(tmp_path / "small", n=16, renderable=False)
    at = ok(app(store))
    assert metric(at, "Episodes") == f"{len(eps)}"
    os.environ["SAFEVLA_STORES"] = os.pathsep.join([str(store), str(small), str(tmp_path / "nowhere")])
    at.text_input(key="w.store_input").set_value(str(small))
    at.button(key="load_store").click().run()
    assert metric(ok(at), "Episodes") == "16"
    assert qp(at, "store") == [str(small)]
    at.text_input(key="w.store_input").set_value(str(tmp_path / "nowhere"))
    at.button(key="load_store").click().run()
    assert not at.exception and any("does not exist" in e.value for e in at.error)
    assert at.text_input(key="w.store_input").value == str(tmp_path / "nowhere")  # the loader stays usable
    # a store not on the allow-list: the neutral refusal, from the sidebar as from a link
    other = make_store(tmp_path / "other", n=8, renderable=False)
    at.text_input(key="w.store_input").set_value(str(other))
    at.button(key="load_store").click().run()
    assert not at.exception and [e.value for e in at.error] == [NOT_AVAILABLE]
    assert not at.metric


# ----------------------------------------------------------------------------- which stores a link opens

@pytest.mark.parametrize("target", ["/etc", "/nonexistent/path", "/tmp", "other_store", "other_store_via_symlink",
                                    "../ of the allowed store"])
def test_a_link_to_a_store_outside_the_allow_list_gets_one_neutral_refusal(tmp_path, store, target):
    """Before the allow-list, ?store= opened any path and its errors told whether the path existed."""
    other = make_store(tmp_path / "other", n=8, renderable=False)
    (tmp_path / "link").symlink_to(other)
    path = {"other_store": str(other), "other_store_via_symlink": str(tmp_path / "link"),
            "../ of the allowed store": f"{store}/../{store.name}/.."}.get(target, target)
    at = AppTest.from_file(APP, default_timeout=120)
    os.environ["SAFEVLA_STORES"] = str(store)  # the server's allow-list: only `store`
    at.query_params["store"] = path
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] == [NOT_AVAILABLE]  # the same words whatever the path is
    shown = " ".join(str(x.value) for kind in ("markdown", "caption", "info", "warning", "error") for x in at.get(kind))
    assert "manifest" not in shown and "does not exist" not in shown and "No such" not in shown
    assert not at.metric  # nothing of any store was shown


def test_the_allow_list_opens_listed_stores_through_links(tmp_path, store):
    other = make_store(tmp_path / "other", n=8, renderable=False)
    os.environ["SAFEVLA_STORES"] = os.pathsep.join([str(store), str(other)])
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["store"] = str(other)
    ok(at.run())
    assert metric(at, "Episodes") == "8"


def test_trajectory_paths_outside_the_store_are_refused(tmp_path, store, tables):
    """The `trajectory` column may not point outside the store and its archive: a crafted
    store would otherwise read any record-shaped file on the server."""
    eps, _ = tables
    crafted = _variant(tmp_path, store, "crafted")
    secret = tmp_path / "secret.npz"
    shutil.copyfile(store / eps["trajectory"].iat[0], secret)  # a readable record, outside both
    table = pd.read_parquet(crafted / "episodes.parquet")
    sbu = table.index[table["sbu"]]
    table.loc[sbu[0], "trajectory"] = str(secret)  # absolute
    table.loc[sbu[1], "trajectory"] = "../secret.npz"  # relative, climbing out
    table.to_parquet(crafted / "episodes.parquet")
    for i in sbu[:2]:
        at = app(crafted, page="detail", ep=table.loc[i, "episode_id"])
        assert not at.exception
        assert any("outside the run store and its archive; refused" in e.value for e in at.error), \
            [e.value for e in at.error]
        assert any("Refused trajectories: 2 trajectory path(s)" in w.value for w in at.sidebar.warning)
    at = ok(app(crafted, page="detail", ep=table.loc[sbu[2], "episode_id"]))  # the others still open


def test_an_mjcf_path_outside_the_archive_is_refused(tmp_path, store, tables):
    """A record's replay.mjcf may only name a model file of its own archive, not any file
    on the server."""
    import dataclasses

    from scoring.records.io import save_record
    eps, _ = tables
    crafted = _variant(tmp_path, store, "mjcf")
    row = eps[eps["sbu"]].iloc[0]
    rec = load_record(crafted / row["trajectory"])
    outside = tmp_path / "elsewhere" / "scene.xml"
    outside.parent.mkdir()
    outside.write_text("<mujoco/>")
    rel = os.path.relpath(outside, (crafted / row["trajectory"]).parent)
    save_record(dataclasses.replace(rec, replay=dataclasses.replace(rec.replay, mjcf=rel)), crafted / row["trajectory"])
    at = app(crafted, page="detail", ep=row["episode_id"])
    assert not at.exception
    assert any("replay.mjcf points to" in e.value and "refused" in e.value for e in at.error), \
        [e.value for e in at.error]


def test_a_store_killed_before_its_manifest_opens_as_incomplete(tmp_path, store, tables):
    """A run stopped after its tables but before manifest.json still opens, saying how to complete it."""
    path = _variant(tmp_path, store, "killed")
    (path / "manifest.json").unlink()
    at = ok(app(path))
    assert metric(at, "Episodes") == f"{len(tables[0])}"
    command = f"safevla score {path / 'trajectories'} --out {path}"
    assert any("Incomplete store" in w.value and command in w.value for w in at.sidebar.warning), \
        [w.value for w in at.sidebar.warning]
    # the command it gives completes the store
    from scoring.cli.main import main
    assert main(["score", str(path / "trajectories"), "--out", str(path), "--no-progress"]) == 0
    assert json.loads((path / "manifest.json").read_text())["n_episodes"] == len(tables[0])
    at = ok(app(path))
    assert not any("Incomplete store" in w.value for w in at.sidebar.warning)


def test_stores_given_after_double_dash_are_the_allow_list(tmp_path, store, monkeypatch):
    """What `safevla dashboard STORE --stores OTHER` passes to the app: `-- --store STORE --stores OTHER`."""
    other = make_store(tmp_path / "other", n=8, renderable=False)
    third = make_store(tmp_path / "third", n=8, renderable=False)
    monkeypatch.delenv("SAFEVLA_STORES", raising=False)
    monkeypatch.setattr("sys.argv", ["app.py", "--store", str(store), "--stores", str(other)])
    for path, allowed in ((other, True), (third, False)):
        at = AppTest.from_file(APP, default_timeout=120)
        at.query_params["store"] = str(path)
        at.run()
        assert not at.exception
        if allowed:
            assert metric(ok(at), "Episodes") == "8"
        else:
            assert [e.value for e in at.error] == [NOT_AVAILABLE]
