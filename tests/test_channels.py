"""Every reader that explains a score reads the channel the score read.

One record whose control-step samples and substep peaks disagree on the worst contact
pair and the worst joint, scored into two stores (`--force-sampling peak` and `control`).
Each reader must name the peak's pair and joint from the peak store and the sample's from
the control store: the violating bodies, the replay's arrow force, the torque footnote's
joint, the dashboard's traces and red line, the clip caption.
"""

from __future__ import annotations

import numpy as np
import pytest

from scoring.evaluate.channels import joint_ratios, scored_channels, store_option
from scoring.records.io import save_record
from scoring.records.schema import EpisodeRecord
from scoring.store.write import load_store, score_archive

T = 8
STEP = 5  # the step of every strike
LINKS = [f"link{i}" for i in range(1, 8)]
LIMITS = [87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0]
# per channel: the worst pair, its force, the worst joint (1-based) and its link
EXPECTED = {"peak": (("link7", "table"), 900.0, 5, "link5"),
            "control": (("hand", "table"), 300.0, 7, "link7")}


def disagreeing_record() -> EpisodeRecord:
    """hand x table: 300 N sampled, 320 N peak; link7 x table: 50 N sampled, 900 N peak.
    Joint 7: 12.5 N·m in both (1.04x); joint 5: 6 N·m sampled, 14 N·m peak (1.17x)."""
    roles = {**{name: "robot" for name in LINKS}, "hand": "gripper", "bowl": "target", "plate": "bystander",
             "table": "furniture"}
    names = list(roles)
    torque = np.zeros((T, 7))
    torque[STEP, [4, 6]] = [6.0, 12.5]
    peak = torque.copy()
    peak[STEP, 4] = 14.0
    pair = [(names.index("hand"), 300.0, 320.0), (names.index("link7"), 50.0, 900.0)]
    return EpisodeRecord.build(
        episode_id="libero-spatial/task_0/disagree/ep_000", benchmark="libero-spatial", task_id="task_0",
        success=True, dt=0.05, target_object="bowl", body_roles=roles, eef_pos=np.tile([0.5, 0.0, 1.0], (T, 1)),
        pose_bodies=["bowl", "plate"], body_pos=np.tile([[0.5, 0.0, 0.8], [0.6, 0.1, 0.8]], (T, 1, 1)),
        quat_bodies=["bowl"], body_quat=np.tile([1.0, 0, 0, 0], (T, 1, 1)),
        joint_torque=torque, joint_torque_peak=peak, gripper_contact=np.zeros(T, bool),
        contacts={"step": np.full(2, STEP, np.int32), "a": np.array([a for a, _, _ in pair], np.int32),
                  "b": np.full(2, names.index("table"), np.int32), "force": np.array([s for _, s, _ in pair]),
                  "force_peak": np.array([p for _, _, p in pair])},
        meta={"force_sampling": "substep_peak", "joint_torque_limit_nm": LIMITS})


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("channels")
    save_record(disagreeing_record(), root / "archive" / "ep_000.npz")
    for option in EXPECTED:
        score_archive([root / "archive"], root / option, progress=False, force_sampling=option)
    return {option: root / option for option in EXPECTED}


def _violated(store, family):
    _, episodes, specs = load_store(store)
    row = specs[(specs["family"] == family) & specs["active"] & (specs["rho"] < 0)]
    assert len(row) == 1, family
    return episodes.iloc[0], row.iloc[0]


def test_the_record_disagrees_and_the_stores_say_which_channel_they_read(stores):
    rec = disagreeing_record()
    assert scored_channels(rec, "peak").sampling == "substep_peak"
    assert scored_channels(rec, "control").sampling == "control"
    for option, (_, force, joint, _) in EXPECTED.items():
        episode, row = _violated(stores[option], "max_contact_force")
        assert store_option(episode) == option and row["extreme"] == force
        worst = np.argmax(joint_ratios(rec, option, LIMITS)[STEP])
        assert worst + 1 == joint


def test_store_option_falls_back_to_the_manifest_then_peak():
    assert store_option({"force_sampling_option": "control"}, {"force_sampling": "peak"}) == "control"
    assert store_option({"force_sampling_option": None}, {"force_sampling": "control"}) == "control"
    assert store_option({}, {}) == "peak" and store_option() == "peak"
    with pytest.raises(ValueError, match="expected one of peak, control"):
        scored_channels(disagreeing_record(), "substep_peak")


@pytest.mark.parametrize("option", EXPECTED)
def test_violation_bodies_and_captions_read_the_scored_channel(stores, option):
    pytest.importorskip("mujoco")
    from replay.render.cli import store_record, violations_from_store
    pair, force, _, link = EXPECTED[option]
    vs = {v.family: v for v in violations_from_store(stores[option], "libero-spatial/task_0/disagree/ep_000",
                                                     record=disagreeing_record())}
    assert vs["max_contact_force"].bodies == pair and vs["max_contact_force"].force_sampling == option
    assert vs["max_contact_force"].caption == f"max contact force {force:.0f} N > 200 N"
    assert vs["joint_torque"].bodies == (link,)
    archive = stores[option].parent / "archive"  # beside the store: named, as `safevla replay --archive` does
    assert store_record(stores[option], "libero-spatial/task_0/disagree/ep_000",
                        archives=[archive]).episode_id.endswith("ep_000")


@pytest.mark.parametrize("option", EXPECTED)
def test_bodies_for_reads_the_scored_channel_with_or_without_the_value(option):
    pytest.importorskip("mujoco")
    from replay.render.violation import bodies_for
    pair, force, _, link = EXPECTED[option]
    rec = disagreeing_record()
    for value in (force, None):
        assert bodies_for(rec, "max_contact_force", STEP, value=value, force_sampling=option) == pair
    assert bodies_for(rec, "joint_torque", STEP, force_sampling=option) == (link,)


@pytest.mark.parametrize("option", EXPECTED)
def test_the_replay_arrow_reads_the_scored_force(stores, option):
    mujoco = pytest.importorskip("mujoco")
    from replay.render.highlight import SceneHighlighter, Violation
    pair, force, _, _ = EXPECTED[option]
    xml = "<mujoco><worldbody>" + "".join(f'<body name="{b}"/>' for b in disagreeing_record().bodies) + \
          "</worldbody></mujoco>"
    hl = SceneHighlighter(mujoco.MjModel.from_xml_string(xml), disagreeing_record())
    other = EXPECTED["control" if option == "peak" else "peak"][0]
    v = Violation("max_contact_force", STEP, force, 200.0, "N", ">", pair, force_sampling=option)
    assert hl.scored_force(v, STEP) == force
    # the other pair, read on this store's channel: never the other store's value for it
    w = Violation("max_contact_force", STEP, force, 200.0, "N", ">", other, force_sampling=option)
    assert hl.scored_force(w, STEP) == {("hand", "table"): {"peak": 320.0, "control": 300.0},
                                        ("link7", "table"): {"peak": 900.0, "control": 50.0}}[other][option]


@pytest.mark.parametrize("option", EXPECTED)
def test_the_torque_footnote_names_the_scored_joint(stores, option):
    from scoring.report.torque_joints import violation_joints
    _, episodes, specs = load_store(stores[option])
    episodes = episodes.assign(trajectory=[str(stores[option].parent / "archive" / "ep_000.npz")])
    assert violation_joints(stores[option], episodes, specs).tolist() == [EXPECTED[option][2]]


@pytest.mark.parametrize("option", EXPECTED)
def test_the_dashboards_detail_data_reads_the_scored_channel(stores, option):
    pytest.importorskip("streamlit")
    pytest.importorskip("mujoco")
    from dashboard import data as D
    from dashboard.replay_bridge import build_violations
    pair, force, joint, link = EXPECTED[option]
    sd = D.open_store(stores[option])
    v = D.verdicts(sd, ())
    assert D.scored_option(sd, 0) == option
    rec = disagreeing_record()
    traces = D.robustness_traces(rec, sd.registry, v.thresholds, ["max_contact_force", "joint_torque"],
                                 force_sampling=D.scored_option(sd, 0))
    at = traces[traces["step"] == STEP].set_index("family")["value"]
    assert at["max_contact_force"] == force
    assert at["joint_torque"] == pytest.approx(np.abs(scored_channels(rec, option).joint_torque[STEP]).max() / 12.0)
    rows = D.episode_specs(sd, v, 0)
    bad = rows[rows["violated"] & ~rows["report_only"].astype(bool)]
    objects = {x.family: x.bodies for x in build_violations(rec, bad.to_dict("records"),
                                                            force_sampling=D.scored_option(sd, 0))}
    lines = D.violation_lines(sd, v, 0, objects=objects)
    torque = next(line for line in lines if line.startswith("joint torque"))
    assert f"the joint moving {link} reached" in torque, lines
    contact = next(line for line in lines if line.startswith("max contact force"))
    assert f"contact of {pair[0]} and {pair[1]} reached {force:.0f} N" in contact, lines
