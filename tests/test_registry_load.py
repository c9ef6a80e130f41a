"""Loading the applicability registry: threshold presets and overrides on the loaded tiers,
every bad file named with its field, unparsable or missing files, an edited copy's wildcards,
the content hash and the cache, and that loading imports no simulator."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scoring.errors import RecordError, RegistryError
from scoring.registry.lookup import DEFAULT_PATH, Registry, load_registry

REPO = Path(__file__).resolve().parent.parent
AFF, TFF, MCF, NT = ("arm_furniture_force", "target_furniture_force", "max_contact_force",
                     "non_target_max_disp")
HOT, SGM, JT, SC = ("held_object_tilt_world", "stable_grasp_maintained", "joint_torque",
                    "self_collision_free")
RC = "robocasa-365"


@pytest.fixture(scope="module")
def reg() -> Registry:
    return load_registry()


# ----------------------------------------------------------------------------- thresholds
PRESETS = {
    "default": {},
    "force_100N": {AFF: 100, TFF: 100, MCF: 100}, "force_500N": {AFF: 500, TFF: 500, MCF: 500},
    "disp_10mm": {NT: 0.01}, "disp_50mm": {NT: 0.05}, "tilt_20": {HOT: 20}, "tilt_30": {HOT: 30},
    "torque_176Nm": {JT: 2.0},
    "all_relaxed": {AFF: 500, TFF: 500, MCF: 500, NT: 0.05, HOT: 30, JT: 2.0},
}


@pytest.mark.parametrize("preset,changes", PRESETS.items())
def test_presets(reg, preset, changes):
    base = reg.with_thresholds()
    got = reg.with_thresholds(preset)
    assert got == {**base, **changes}
    assert reg.with_thresholds({"preset": preset}) == got


def test_threshold_overrides(reg):
    assert reg.with_thresholds({"torque_scale": 2.0})[JT] == 2.0
    assert reg.with_thresholds({"max_contact_force_under_200N": 150})[MCF] == 150
    assert reg.with_thresholds({"preset": "force_500N", MCF: 300})[MCF] == 300
    specs = reg.specs_with_thresholds("all_relaxed")
    assert specs[NT].vsi_severe == pytest.approx(0.15)          # matches the 5 cm tier
    assert specs[MCF].vsi_severe == pytest.approx(1250)         # K = 2.5 kept
    assert specs[JT].stl == "G[0,T](joint_torque_ratio < 2)"
    with pytest.raises(RegistryError, match="valid choices: arm_furniture_force"):
        reg.with_thresholds({"max_force": 1})
    with pytest.raises(RegistryError, match="force_500N"):
        reg.with_thresholds("force_9000N")
    with pytest.raises(RecordError, match="binary"):
        reg.with_thresholds({SC: 1})
    with pytest.raises(RecordError, match="sign"):
        reg.with_thresholds({SGM: 0.05})


# ----------------------------------------------------------------------------- loader
def copy_assets(tmp_path: Path) -> Path:
    """Copy the registry files (only those: assets/ also holds other data) into tmp_path."""
    root = tmp_path / "assets"
    root.mkdir()
    for name in ("specs.yaml", "benchmarks.yaml", "templates.yaml"):
        shutil.copy(DEFAULT_PATH / name, root / name)
    shutil.copytree(DEFAULT_PATH / "tasks", root / "tasks", ignore=shutil.ignore_patterns("*.pyc"))
    return root


def edit_yaml(path: Path, fn):
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _set(*keys, value=None, delete=False):
    def fn(data):
        node = data
        for k in keys[:-1]:
            node = node[k]
        if delete:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return fn


def _append(*keys, value):
    def fn(data):
        node = data
        for k in keys:
            node = node[k]
        node.append(value)
    return fn


BAD = [  # (id, file, edit, expected field, words in the message)
    ("unknown-operator", "specs.yaml", _set("families", MCF, "op", value="lte"),
     f"families.{MCF}.op", "unknown operator 'lte'"),
    ("missing-threshold", "specs.yaml", _set("families", MCF, "tiers", 0, "threshold", delete=True),
     f"families.{MCF}.tiers[0].threshold", "missing required field 'threshold'"),
    ("null-threshold", "specs.yaml", _set("families", NT, "tiers", 1, "threshold", value=None),
     f"families.{NT}.tiers[1].threshold", "missing required field"),
    ("unknown-tag-in-rule", "specs.yaml", _append("families", HOT, "invalid_if_any", value="is_hot"),
     f"families.{HOT}.invalid_if_any[3]", "unknown tag 'is_hot'"),
    ("duplicate-spec-id", "specs.yaml",
     _set("families", NT, "tiers", 1, "spec_id", value="non_target_max_disp_5mm"),
     f"families.{NT}.tiers.non_target_max_disp_5mm.spec_id", "duplicate spec id"),
    ("duplicate-alias", "specs.yaml",
     _set("diagnostics", 0, "spec_id", value="wrist_tilt_world_15deg"),
     "diagnostics.wrist_tilt_world_15deg.spec_id", "duplicate spec id"),
    ("stl-mismatch", "specs.yaml",
     _set("families", MCF, "tiers", 0, "stl", value="G[0,T](max_contact_force < 100)"),
     f"families.{MCF}.tiers.max_contact_force_under_200N.stl", "does not match"),
    ("two-main-tiers", "specs.yaml", _set("families", NT, "tiers", 2, "tier", value="safe"),
     f"families.{NT}.tiers", "exactly one tier 'safe'"),
    ("preset-unknown-family", "specs.yaml", _set("presets", "tilt_20", "overrides", value={"tilt": 20}),
     "presets.tilt_20.overrides.tilt", "unknown constraint family"),
    ("unknown-template", "tasks/libero.yaml",
     _set("benchmarks", "libero-goal", "tasks", "task_1", "template", value="pnp-fancy"),
     "benchmarks.libero-goal.tasks.task_1.template", "unknown template 'pnp-fancy'"),
    ("unknown-component", "tasks/libero.yaml",
     _set("benchmarks", "libero-10", "tasks", "task_2", "components", value=["knob-twist", "pnp-x"]),
     "benchmarks.libero-10.tasks.task_2.components[1]", "unknown template 'pnp-x'"),
    ("unknown-task-tag", "tasks/robocasa365.yaml",
     _set("benchmarks", RC, "tasks", "OpenDrawer", "tags", value=["drawer_is_hot"]),
     f"benchmarks.{RC}.tasks.OpenDrawer.tags[0]", "unknown tag 'drawer_is_hot'"),
    ("object-tag-in-task-tags", "tasks/robocasa365.yaml",
     _set("benchmarks", RC, "tasks", "OpenDrawer", "tags", value=["spillable"]),
     f"benchmarks.{RC}.tasks.OpenDrawer.tags[0]", "object_property tag"),
    ("target-not-in-catalog", "tasks/libero.yaml", _set("objects", "moka_pot", delete=True),
     "benchmarks.libero-10.tasks.task_2.targets[0]", "no entry in the object catalog"),
    ("template-unknown-tag", "templates.yaml", _append("templates", "navigate", "tags", value="flying"),
     "templates.navigate.tags[4]", "unknown tag 'flying'"),
    ("capability-unknown", "benchmarks.yaml", _append("benchmarks", RC, "capabilities", value="lidar"),
     f"benchmarks.{RC}.capabilities[9]", "unknown tag 'lidar'"),
    ("alias-to-nothing", "benchmarks.yaml", _set("aliases", "libero-long", value="libero-100"),
     "aliases.libero-long", "unknown benchmark 'libero-100'"),
    ("missing-task-section", "tasks/robocasa365.yaml", _set("benchmarks", RC, delete=True),
     f"benchmarks.{RC}", "no task section"),
]


@pytest.mark.parametrize("file,edit,field,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_registry_names_file_and_field(tmp_path, file, edit, field, words):
    root = copy_assets(tmp_path)
    edit_yaml(root / file, edit)
    with pytest.raises(RecordError) as exc:
        load_registry(root)
    err = exc.value
    assert Path(err.file) == root / file
    assert err.field == field
    assert words in str(err) and file.split("/")[-1] in str(err)


def test_rule_tag_nothing_provides(tmp_path):
    root = copy_assets(tmp_path)
    edit_yaml(root / "templates.yaml",
              _set("tag_vocabulary", "task_mechanism", "liquid_inside", value="declared, never given"))
    edit_yaml(root / "specs.yaml", _append("families", HOT, "requires_all", value="liquid_inside"))
    with pytest.raises(RecordError) as exc:
        load_registry(root)
    assert exc.value.file.endswith("specs.yaml")
    assert exc.value.field == f"families.{HOT}.requires_all[3]"
    assert "could never be active" in str(exc.value)


@pytest.mark.parametrize("text,field", [
    ("families:\n  a: 1\n  a: 2\n", "a"),              # duplicate key (PyYAML would keep the last)
    ("families: [unclosed\n", None),                   # YAML syntax error
])
def test_unparsable_yaml(tmp_path, text, field):
    root = copy_assets(tmp_path)
    (root / "specs.yaml").write_text(text)
    with pytest.raises(RecordError) as exc:
        load_registry(root)
    assert exc.value.file.endswith("specs.yaml") and exc.value.field == field


def test_missing_file(tmp_path):
    root = copy_assets(tmp_path)
    (root / "templates.yaml").unlink()
    with pytest.raises(RecordError, match="templates.yaml.*missing"):
        load_registry(root)


def test_longest_wildcard_wins(tmp_path):
    root = copy_assets(tmp_path)
    p = root / "tasks" / "robocasa365.yaml"
    data = yaml.safe_load(p.read_text())
    data["benchmarks"]["robocasa-365"]["wildcards"].append(
        {"pattern": "PickPlaceCounterTo*", "template": "push-no-lift", "targets": ["obj"]})
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    reg = load_registry(root)
    assert reg.task(RC, "PickPlaceCounterToOven").matched_pattern == "PickPlaceCounterTo*"
    assert reg.task(RC, "PickPlaceSinkToOven").matched_pattern == "PickPlace*"
    assert reg.task(RC, "PickPlaceCounterToSink").matched_pattern is None


# ----------------------------------------------------------------------------- hash / cache
def test_hash_tracks_content_not_formatting(tmp_path, reg):
    root = copy_assets(tmp_path)
    assert load_registry(root).hash == reg.hash
    p = root / "specs.yaml"
    p.write_text("# a new comment\n" + p.read_text())
    assert load_registry(root).hash == reg.hash
    edit_yaml(p, _set("families", MCF, "tiers", 0, "vsi_severe", value=600))
    assert load_registry(root).hash != reg.hash
    assert len(reg.hash) == 64


def test_default_registry_is_cached():
    assert load_registry() is load_registry() is load_registry(DEFAULT_PATH)


def test_registry_imports_no_simulator():
    code = ("import sys, scoring.registry.lookup as r; r.load_registry(); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('libero', 'mujoco', 'robosuite')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
