"""The web scene converted from `scene_models.web_model` (2-D PNG textures decoded by Pillow
and shrunk before MuJoCo compiles the scene) is byte for byte the one converted from the scene's
full model (every texture decoded whole by MuJoCo, shrunk as an upload shrinks it): on PNGs of
each mode a scene holds (RGB, RGBA, palette, larger and smaller than the web's texture size) and
on a demo LIBERO scene."""

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from render_helpers import TOY_XML, toy_record  # noqa: E402
from replay.render import web_scene as W  # noqa: E402
from replay.render.scene_models import scene_model_once, web_model  # noqa: E402
from scoring.records.io import load_record  # noqa: E402

pytestmark = pytest.mark.render

ROOT = Path(__file__).resolve().parent.parent
DEMO_EPISODE = ROOT / "assets" / "demo" / "archive" / "libero_goal" / "task_1" / "scripted-careful" / "ep_001.npz"


@pytest.fixture(autouse=True)
def compiled_here(monkeypatch):
    """Nothing compiled earlier (in memory or on disk) stands in for the compile under test."""
    from collections import OrderedDict

    from replay.render import scene_models

    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", "off")
    monkeypatch.setattr(scene_models, "_MODEL_CACHE", OrderedDict())


def _pngs(folder: Path) -> dict[str, str]:
    """PNG files of each mode, with content a box filter changes (noise, gradients)."""
    from PIL import Image

    rng = np.random.default_rng(3)
    folder.mkdir(parents=True, exist_ok=True)
    images = {
        "rgb_big.png": Image.fromarray(rng.integers(0, 256, (300, 700, 3), dtype=np.uint8)),
        "rgba.png": Image.fromarray(rng.integers(0, 256, (513, 257, 4), dtype=np.uint8), "RGBA"),
        "palette.png": Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).convert("P"),
        "small.png": Image.fromarray(np.tile(np.arange(64, dtype=np.uint8), (64, 1))).convert("RGB"),
    }
    for name, img in images.items():
        img.save(folder / name)
    return images


def test_web_model_converts_to_the_full_models_web_scene(tmp_path):
    names = list(_pngs(tmp_path / "textures"))
    textures = "".join(f'<texture name="t{k}" type="2d" file="textures/{n}"/><material name="m{k}" texture="t{k}"/>'
                       for k, n in enumerate(names))
    textures += '<texture name="cube" type="cube" file="textures/small.png"/><material name="mc" texture="cube"/>'
    geoms = "".join(f'<geom type="box" size=".05 .05 .05" pos="{k / 5} -.4 .1" material="m{k}"/>'
                    for k in range(len(names)))
    geoms += '<geom type="sphere" size=".05" pos="0 .4 .1" material="mc"/>'
    xml = TOY_XML.replace("<worldbody>", f"<asset>{textures}</asset><worldbody>{geoms}")
    (tmp_path / "scene.xml").write_text(xml)
    rec = toy_record(mjcf="scene.xml", source=str(tmp_path / "ep.json"))
    small, full = web_model(rec, W.WEB_TEXTURE_PX), scene_model_once(rec, store=False)
    assert small.ntex == full.ntex == len(names) + 1
    assert small.ntexdata < full.ntexdata  # the big ones came shrunk
    assert W.scene_blob(small) == W.scene_blob(full)


def test_web_model_converts_to_the_full_models_web_scene_on_libero():
    rec = load_record(DEMO_EPISODE)
    small, full = web_model(rec, W.WEB_TEXTURE_PX), scene_model_once(rec, store=False)
    assert small.ntexdata * 4 < full.ntexdata
    assert W.scene_blob(small) == W.scene_blob(full)
