"""Portable scene files: package:// names, confinement to the asset roots and the scene's folder,
re-rooting of legacy absolute paths, and the migration of the bundled demo."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

mujoco = pytest.importorskip("mujoco")

from replay.scene.assets import (SceneAssetError, legacy_reference, migrate_scene, migrate_scene_files,  # noqa: E402
                                 portable_scene, resolve_scene, root_folders)

REPO = Path(__file__).resolve().parent.parent
ROBOSUITE = root_folders("robosuite")[0]
LINK0 = ROBOSUITE / "models" / "assets" / "robots" / "panda" / "meshes" / "link0.stl"


def scene(*assets: str, body: str = "") -> str:
    return (f'<mujoco model="t"><compiler meshdir="meshes/"/><asset>{"".join(assets)}</asset>'
            f'<worldbody><geom type="box" size=".1 .1 .1"/>{body}</worldbody></mujoco>')


def mesh(file: str) -> str:
    return f'<mesh name="m" file="{file}"/>'


def compile_here(xml: str, base: Path) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(resolve_scene(xml, base=base, origin="test scene"))


def test_absolute_path_inside_a_root_becomes_a_package_name(tmp_path):
    xml = portable_scene(scene(mesh(str(LINK0))))
    assert 'file="package://robosuite/models/assets/robots/panda/meshes/link0.stl"' in xml
    model = compile_here(xml, tmp_path)
    assert model.nmesh == 1 and model.mesh_vertnum[0] > 100


def test_the_package_name_loads_the_same_mesh_as_the_absolute_path(tmp_path):
    a = mujoco.MjModel.from_xml_string(scene(mesh(str(LINK0))))
    b = compile_here(portable_scene(scene(mesh(str(LINK0)))), tmp_path)
    assert (a.mesh_vert == b.mesh_vert).all()


def test_an_absolute_path_outside_every_root_is_refused_when_recording(tmp_path):
    (tmp_path / "x.stl").write_bytes(LINK0.read_bytes())
    with pytest.raises(SceneAssetError, match=r"x\.stl.*outside every registered asset root"):
        portable_scene(scene(mesh(str(tmp_path / "x.stl"))))


@pytest.mark.parametrize("legacy", [
    "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/robosuite/models/assets/robots/panda/meshes/link0.stl",
    "/opt/conda/envs/x/lib/python3.10/site-packages/robosuite/models/assets/robots/panda/meshes/link0.stl",
    "/home/me/src/robosuite/robosuite/models/assets/robots/panda/meshes/link0.stl",  # a source checkout
])
def test_legacy_absolute_paths_are_re_rooted_not_read(legacy, tmp_path):
    assert legacy_reference(legacy) == "package://robosuite/models/assets/robots/panda/meshes/link0.stl"
    model = compile_here(scene(mesh(legacy)), tmp_path)  # old scenes load with no migration
    assert model.nmesh == 1
    xml, n = migrate_scene(scene(mesh(legacy)))
    assert n == 1 and "package://robosuite/" in xml and legacy not in xml


def test_relative_files_resolve_inside_the_scene_folder(tmp_path):
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "a.stl").write_bytes(LINK0.read_bytes())
    assert compile_here(scene(mesh("a.stl")), tmp_path).nmesh == 1


@pytest.mark.parametrize("ref, expected", [
    ("../../etc/x.stl", "leaves its folder"),
    ("/etc/passwd", "absolute path outside the registered asset roots"),
    ("package://nosuchroot/a.stl", "unknown asset root 'nosuchroot'"),
    ("package://robosuite/../../../../etc/passwd", "leaves its folder"),
    ("package://robosuite/models/no_such.stl", "not found: looked for"),
    ("missing.stl", "not found: looked for"),
])
def test_nothing_outside_the_roots_and_the_scene_folder_is_read(ref, expected, tmp_path):
    secret = tmp_path.parent / "etc" / "x.stl"
    secret.parent.mkdir(exist_ok=True)
    secret.write_bytes(LINK0.read_bytes())
    with pytest.raises(SceneAssetError, match=re.escape(expected)) as e:
        resolve_scene(scene(mesh(ref)), base=tmp_path / "scene", origin="scene.xml")
    assert "scene.xml" in str(e.value)


def test_includes_are_expanded_and_confined(tmp_path):
    (tmp_path / "part.xml").write_text(f'<mujoco><asset>{mesh("package://robosuite/" + str(LINK0.relative_to(ROBOSUITE)))}'
                                       '</asset></mujoco>')
    xml = scene(body='<geom type="mesh" mesh="m"/>').replace("<asset></asset>", '<include file="part.xml"/>')
    model = compile_here(xml, tmp_path)
    assert model.nmesh == 1
    outside = xml.replace("part.xml", "../part.xml")
    with pytest.raises(SceneAssetError, match="leaves its folder"):
        resolve_scene(outside, base=tmp_path / "sub", origin="scene.xml")
    (tmp_path / "loop.xml").write_text('<mujoco><include file="loop.xml"/></mujoco>')
    with pytest.raises(SceneAssetError, match="includes itself"):
        resolve_scene(xml.replace("part.xml", "loop.xml"), base=tmp_path, origin="scene.xml")


def test_migration_rewrites_scene_files_in_place(tmp_path):
    legacy = "/elsewhere/site-packages/robosuite/" + LINK0.relative_to(ROBOSUITE).as_posix()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "a.xml").write_text(scene(mesh(legacy)))
    (tmp_path / "models" / "b.xml").write_text(portable_scene(scene(mesh(str(LINK0)))))
    (tmp_path / "notes.xml").write_text("<notes/>")  # not a scene: left alone
    assert migrate_scene_files([tmp_path], dry_run=True) == {str(tmp_path / "models" / "a.xml"): 1}
    assert legacy in (tmp_path / "models" / "a.xml").read_text()
    out = subprocess.run([sys.executable, "-m", "scoring.cli", "migrate-scenes", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "rewrote 1 scene file(s)" in out.stdout
    assert legacy not in (tmp_path / "models" / "a.xml").read_text()
    assert migrate_scene_files([tmp_path]) == {}


def test_no_file_under_assets_holds_an_absolute_path():
    hits = subprocess.run(["grep", "-rlaE", r'file="/|"/(root|home|usr|opt|tmp)/[^"]*"', str(REPO / "assets")],
                          capture_output=True, text=True).stdout.split()
    assert hits == []
