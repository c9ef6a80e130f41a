"""replay.render.render_assets: what an offscreen context uploads from a model (textures as
uploaded, shrunk for previews) and the key that decides which scenes share a context."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from render_helpers import BIG_TEXTURE_XML, toy_scene  # noqa: E402
from replay.render import render_assets  # noqa: E402
from replay.render.render_assets import preview_texture_px, render_assets_key  # noqa: E402


def _toy_model(xml: str):
    import mujoco

    return mujoco.MjModel.from_xml_string(xml)


def test_preview_texture_size_follows_the_frame():
    assert preview_texture_px(480, 360) == 512
    assert preview_texture_px(160, 120) == 256
    assert preview_texture_px(640, 480) == 1024
    assert preview_texture_px(512, 100) == 512


# -- one context for the scenes that share their assets (LIBERO: a scene file per episode) --

@pytest.mark.parametrize("change, shared", [
    (('rgba="0 .8 0 1"', 'rgba="1 .8 0 1"'), True),  # a geom's colour (drawn per frame, not uploaded)
    (('rgb2=".9 .9 0"', 'rgb2=".9 .8 0"'), False),  # a texel
    (('texrepeat="2 2"', 'texrepeat="3 2"'), False),  # a material's texture repeat
    (('scale="0.1 .2 .3"', 'scale="0.1 .2 .31"'), False),  # a mesh vertex
    (('size="2 2 .1"', 'size="2 3 .1"'), False),  # the floor plane's grid
    (("<worldbody>", '<visual><quality shadowsize="1024"/></visual><worldbody>'), False),  # the shadow map
    (("<worldbody>", '<visual><global offwidth="1024"/></visual><worldbody>'), False),  # the offscreen buffer
])
def test_what_a_context_holds_decides_whether_two_scenes_share_it(change, shared):
    base = toy_scene(0)
    assert change[0] in base
    assert (render_assets_key(_toy_model(base)) == render_assets_key(_toy_model(base.replace(*change)))) == shared


def test_shrunk_textures_are_kept_by_content_and_equal_a_fresh_shrink(monkeypatch):
    """A texture seen before (in another scene, with the same image) is not shrunk again, and
    the kept texels are the bytes a fresh shrink makes."""
    from PIL import Image

    def shrunk(m):
        saved = render_assets.shrink_textures(m, 256)
        out = m.tex_data.copy(), m.tex_width.copy(), m.tex_height.copy()
        render_assets.restore_textures(m, saved)
        return out

    m1 = _toy_model(BIG_TEXTURE_XML)
    m2 = _toy_model(BIG_TEXTURE_XML.replace('rgb2=".8 .8 .2"', 'rgb2=".8 .7 .2"'))  # only the cube's texels differ
    render_assets._SHRUNK.clear()
    shrunk(m1)
    assert len(render_assets._SHRUNK) == 3  # 2D, skybox and cube: each larger than 256 px
    resized, resize = [], Image.Image.resize
    monkeypatch.setattr(Image.Image, "resize", lambda self, *a, **k: resized.append(self.size) or resize(self, *a, **k))
    kept = shrunk(m2)
    assert resized == [(700, 700)] * 6  # only the changed cube's six faces were shrunk
    monkeypatch.undo()
    render_assets._SHRUNK.clear()
    fresh = shrunk(m2)
    assert all(np.array_equal(a, b) for a, b in zip(kept, fresh))
    assert not np.array_equal(kept[0], m2.tex_data)  # shrunk, and the model put back as it was
