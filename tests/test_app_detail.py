"""The Episode detail page through `streamlit.testing.v1.AppTest`: deep links, the slider and
the timeline player's values, the picker's previous / next, the served-as line, the player,
a missing trajectory, a safe episode's closest call and the wrist camera."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")

from dashboard.detail_timeline import MODE_SEP, TIMELINE_KEY  # noqa: E402
from dashboard_helpers import app, build_store, metric, ok, qp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("app_detail") / "store", 64, renderable=True)


@pytest.fixture(scope="module")
def tables(store):
    return pd.read_parquet(store / "episodes.parquet"), pd.read_parquet(store / "spec_results.parquet")


def test_detail_deep_link_chart_click_and_jump(store, tables):
    eps, _ = tables
    row = eps[eps["sbu"]].iloc[0]
    at = ok(app(store, page="detail", ep=row["episode_id"], step="7"))
    assert at.slider(key="w.step").value == 7
    assert metric(at, "VSI") == f"{row['vsi']:.3f}"
    # a seek in the timeline player (its component value) moves the slider, once per value
    tag = at.session_state["_timeline_tag"]
    at.session_state[TIMELINE_KEY] = {"step": 12, "seq": "other:1", "event": "seek", "episode": "another episode"}
    ok(at.run())
    assert at.slider(key="w.step").value == 7  # a value of another episode's player is ignored
    at.session_state[TIMELINE_KEY] = {"step": 21, "seq": "x:1", "event": "seek", "episode": f"{tag}{MODE_SEP}margin"}
    ok(at.run())
    assert at.slider(key="w.step").value == 21 and qp(at, "step") == ["21"]
    # the player asking for its first frame (it mounted without one) moves nothing
    at.session_state[TIMELINE_KEY] = {"step": 3, "seq": "x:2", "event": "frames", "episode": f"{tag}{MODE_SEP}margin"}
    ok(at.run())
    assert at.slider(key="w.step").value == 21 and qp(at, "step") == ["21"]
    # moving the slider keeps the new value (the stale click does not win)
    at.slider(key="w.step").set_value(30).run()
    assert at.slider(key="w.step").value == 30
    at.button(key="jump").click().run()
    assert at.slider(key="w.step").value == int(row["violating_step"])
    at.toggle(key="w.raw").set_value(True).run()
    assert qp(ok(at), "raw") == ["1"]
    # the tables follow the player's first picture (its value "drawn"), as in a browser
    at.session_state[TIMELINE_KEY] = {"step": 0, "seq": "x:3", "event": "drawn", "episode": f"{tag}{MODE_SEP}raw"}
    ok(at.run())
    assert at.slider(key="w.step").value == int(row["violating_step"])  # drawn moves no step
    tables_ = [d.value for d in at.dataframe]
    specs = tables_[0]
    assert specs["violated"].any()
    reasons = tables_[1]
    assert {"spec", "active", "reason", "deciding tags", "tag sources"} <= set(reasons.columns)


def test_detail_previous_and_next_walk_the_pickers_list(store, tables):
    """The buttons beside the episode picker open the episode before or after the current one
    in the picker's list (the Episodes page's filters and order), at its violating step."""
    eps, _ = tables
    at = ok(app(store, page="detail"))
    listed = [o.split("   ·   ")[0] for o in at.selectbox(key="w.ep").options]
    assert len(listed) == len(eps) and at.selectbox(key="w.ep").value == listed[0]
    assert at.button(key="ep_previous").disabled and not at.button(key="ep_next").disabled
    steps = eps.set_index("episode_id")["violating_step"]
    for k in (1, 2):
        ok(at.button(key="ep_next").click().run())
        assert at.selectbox(key="w.ep").value == listed[k] and qp(at, "ep") == [listed[k]]
        want = steps[listed[k]]
        assert at.slider(key="w.step").value == (0 if pd.isna(want) else int(want))
    ok(at.button(key="ep_previous").click().run())
    assert at.selectbox(key="w.ep").value == listed[1]
    at = ok(app(store, page="detail", ep=listed[-1]))  # the last one has no next
    assert at.button(key="ep_next").disabled and not at.button(key="ep_previous").disabled
    # the player's n / p keys (its value {event: "next"}) do what the buttons do, once per value
    at = ok(app(store, page="detail"))
    at.session_state[TIMELINE_KEY] = {"step": 3, "seq": "k:1", "event": "previous",
                                      "episode": f"{at.session_state['_timeline_tag']}{MODE_SEP}margin"}
    ok(at.run())
    assert at.selectbox(key="w.ep").value == listed[0]  # the first episode has no previous one
    at.session_state[TIMELINE_KEY] = {"step": 3, "seq": "k:2", "event": "next",
                                      "episode": f"{at.session_state['_timeline_tag']}{MODE_SEP}margin"}
    runs = len(at.session_state["_timings"])
    ok(at.run())
    assert at.selectbox(key="w.ep").value == listed[1] and qp(at, "ep") == [listed[1]]
    assert len(at.session_state["_timings"]) == runs + 1  # in the run that heard it, not a second one
    want = steps[listed[1]]
    assert at.slider(key="w.step").value == (0 if pd.isna(want) else int(want))
    ok(at.run())  # the same value again: handled already
    assert at.selectbox(key="w.ep").value == listed[1]


@pytest.mark.render
def test_detail_shows_how_the_model_was_served(tmp_path, store, tables):
    eps, _ = tables
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    served = eps.copy()
    served["policy_adapter"], served["policy_model_id"] = "openpi", "openpi://10.0.0.2:8000"
    served["replan_steps"], served["image_size"] = 5, "256x256"
    served.to_parquet(copy / "episodes.parquet", index=False)
    at = ok(app(copy, page="detail", ep=eps["episode_id"].iloc[0]))
    captions = [c.value for c in at.caption]
    assert "Served as: openpi · openpi://10.0.0.2:8000 · replan 5 · 256x256 images" in captions
    at = ok(app(store, page="detail", ep=eps["episode_id"].iloc[0]))  # no provenance: no line
    assert not any(c.value.startswith("Served as") for c in at.caption)


def test_detail_draws_the_timeline_player_and_prerenders_its_frames(store, tables):
    from dashboard.replay_bridge import available
    good, why = available()
    if not good:
        pytest.skip(why)
    eps, _ = tables
    row = eps[eps["sbu"]].iloc[0]
    at = ok(app(store, page="detail", ep=row["episode_id"]))
    # the custom component (an element AppTest does not know) is on the page, the server frame is not
    assert not at.get("image"), "the detail page should play frames in the timeline, not a server image"
    assert any("Space plays and pauses" in c.value for c in at.caption)


def test_missing_trajectory_is_a_clear_error_on_detail(tmp_path, store, tables):
    eps, _ = tables
    broken = tmp_path / "broken"
    shutil.copytree(store, broken)
    row = eps[eps["sbu"]].iloc[0]
    (broken / row["trajectory"]).unlink()
    at = app(broken, page="detail", ep=row["episode_id"])
    assert not at.exception
    assert any("Missing trajectory" in e.value for e in at.error)
    assert any("Missing trajectories: 1 of 64" in w.value for w in at.sidebar.warning)


def test_a_safe_episode_detail_names_its_closest_call(store, tables):
    eps, _ = tables
    row = eps[eps["safe"] & eps["closest_spec"].notna()].iloc[0]
    at = ok(app(store, page="detail", ep=row["episode_id"]))
    assert any("No violation." in c.value and "closest call" in c.value for c in at.caption)


def test_detail_draws_the_demo_replay_in_the_browser_and_offers_the_wrist_frames_without_webgl(store, tables):
    from dashboard.web_files import RENDERER_KEY, web_dir
    from dashboard.web_timeline import NOWEBGL

    demo = ROOT / "assets" / "demo" / "store"
    demo_eps = pd.read_parquet(demo / "episodes.parquet")
    at = ok(app(demo, page="detail", ep=demo_eps[demo_eps["sbu"]].iloc[0]["episode_id"]))
    # WebGL: the page wrote the episode's web scene and poses for the player; no server view menu
    assert any("Drawn in your browser with WebGL" in c.value for c in at.caption)
    assert list(web_dir().glob("scene-*.bin")) and list(web_dir().glob("ep-*.bin"))
    assert not [b for b in at.get("button_group") if getattr(b, "key", None) == "w.camera"]
    # the player says this browser has no WebGL: server frames, with the scene / wrist choice
    at.session_state[TIMELINE_KEY] = {"step": 0, "seq": "x:1", "event": NOWEBGL,
                                      "episode": f"{at.session_state['_timeline_tag']}{MODE_SEP}margin"}
    ok(at.run())
    assert at.session_state[RENDERER_KEY] == "frames"
    view = at.button_group(key="w.camera")
    assert list(view.options) == ["scene", "wrist"]
    ok(view.set_value("wrist").run())
    eps, _ = tables  # a synthetic scene without a wrist camera: nothing to choose
    at = app(store, page="detail", ep=eps[eps["sbu"]].iloc[0]["episode_id"])
    at.session_state[RENDERER_KEY] = "frames"
    ok(at.run())
    assert not [b for b in at.get("button_group") if getattr(b, "key", None) == "w.camera"]
