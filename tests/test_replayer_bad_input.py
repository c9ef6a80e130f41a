"""Replayer bad input: an unknown camera, a record without replay state, missing MJCF, mesh
or texture files (each error names the file and where it looked), replay state that does not
fit the model, and bad arguments; and a relative mesh path resolved against the record."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from replay.render.highlight import RenderError  # noqa: E402
from render_helpers import MESH_XML, H, T, TOY_XML, W, toy_record, write_stl  # noqa: E402
from replay.render.replayer import Replayer  # noqa: E402
from scoring.errors import RecordError  # noqa: E402
from scoring.records.io import save_record  # noqa: E402
from scoring.records.schema import EpisodeRecord  # noqa: E402

pytestmark = pytest.mark.render


@pytest.fixture
def rp():
    with Replayer(toy_record(), width=W, height=H, window=2) as r:
        yield r


def test_unknown_camera_lists_the_choices():
    with pytest.raises(RenderError, match="unknown camera 'top'.*cam, side, free, free:violation"):
        Replayer(toy_record(), width=W, height=H, camera="top")


def test_no_replay_state():
    rec = toy_record()
    bare = EpisodeRecord.build(episode_id="bare", benchmark="toy", task_id="t", success=True, dt=0.05,
                               body_roles={"box": "target"}, eef_pos=np.zeros((3, 3)))
    with pytest.raises(RecordError, match="no replay state") as e:
        Replayer(bare)
    assert e.value.field == "replay" and e.value.episode == "bare"
    assert rec.replay is not None


def test_missing_mjcf_file(tmp_path):
    rec = toy_record(mjcf="scenes/gone.xml", source=str(tmp_path / "ep.npz"))
    with pytest.raises(RecordError, match="MJCF file not found") as e:
        Replayer(rec)
    assert str(tmp_path / "scenes" / "gone.xml") in str(e.value) and e.value.field == "replay.mjcf"


def test_relative_mesh_resolves_against_the_record(tmp_path):
    write_stl(tmp_path / "meshes" / "tet.stl")
    rec = toy_record(mjcf=MESH_XML.format(tex=""), source=str(tmp_path / "ep.npz"))
    with Replayer(rec, width=W, height=H) as r:
        assert r.model.nmesh == 1 and r.frame(0).std() > 10
    (tmp_path / "scene.xml").write_text(MESH_XML.format(tex=""))  # MJCF as a file next to the record
    save_record(toy_record(mjcf="scene.xml"), tmp_path / "ep.npz")
    with Replayer(tmp_path / "ep.npz", width=W, height=H) as r:
        assert r.model.nmesh == 1


def test_missing_mesh_names_the_file_and_where_it_looked(tmp_path):
    rec = toy_record(mjcf=MESH_XML.format(tex=""), source=str(tmp_path / "ep.npz"))
    with pytest.raises(RenderError) as e:
        Replayer(rec)
    msg = str(e.value)
    assert "'tet.stl'" in msg and str(tmp_path / "meshes" / "tet.stl") in msg and "meshdir='meshes'" in msg


def test_missing_texture_names_the_file_and_where_it_looked(tmp_path):
    write_stl(tmp_path / "meshes" / "tet.stl")
    xml = MESH_XML.format(tex='<texture name="wood" type="2d" file="wood.png"/>')
    with pytest.raises(RenderError) as e:
        Replayer(toy_record(mjcf=xml, source=str(tmp_path / "ep.npz")))
    assert "texture file 'wood.png'" in str(e.value) and str(tmp_path / "tex" / "wood.png") in str(e.value)


def test_replay_state_must_match_the_model():
    rec = toy_record()
    bad = EpisodeRecord.build(episode_id="x", benchmark="toy", task_id="t", success=True, dt=0.05,
                              body_roles={"box": "target"}, eef_pos=np.zeros((T, 3)),
                              replay={"mjcf": TOY_XML, "qpos": rec.replay.qpos[:, :7], "qvel": rec.replay.qvel})
    with pytest.raises(RecordError, match="expected 14 columns") as e:
        Replayer(bad)
    assert e.value.field == "replay.qpos"


def test_bad_arguments(rp):
    with pytest.raises(RenderError, match="out of range"):
        rp.frame(T)
    assert np.array_equal(rp.frame(-1), rp.frame(T - 1))
    with pytest.raises(RenderError, match="quality"):
        Replayer(toy_record(), quality="ultra")
    with pytest.raises(RenderError, match="width"):
        Replayer(toy_record(), width=0)
    with pytest.raises(RenderError, match="Violation"):
        rp.frame(1, violation="max_contact_force")
