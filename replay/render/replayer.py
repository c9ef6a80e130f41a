"""Offscreen MuJoCo replay of a recorded episode, with the violation highlighted.

`Replayer(record)` loads the record's MJCF, sets `qpos`/`qvel` (and mocap) of a step,
runs `mj_forward` and renders offscreen (EGL through Mesa on CPU-only machines), with the
compiled model (replay/render/scene_models.py) and GL context it shares with the other replayers of its scene
(`replay/render/offscreen.py` says why). On the violating frame and `window` steps around it, the
violating bodies turn red, their contact points and force arrows show, and the frame gets
a red border and a caption ("max_contact_force 412 N > 200 N"); the success frame gets a
green border.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from replay.render.highlight import (SUCCESS_RGB, VIOLATION_RGB, RenderError, SceneHighlighter,  # noqa: E402,F401
                                     Violation, draw_arrow, draw_border, draw_captions)
from replay.render.offscreen import ContextPool, OffscreenContext, pool_for_this_thread  # noqa: E402
from replay.render.render_assets import preview_texture_px, render_assets_key  # noqa: E402
from replay.render.scene_models import (AGENT_VIEWS, FREE, FREE_VIOLATION, WRIST_VIEWS, cameras,  # noqa: E402,F401
                                        load_model, preview_scene_model, replay_option, scene_key, scene_model)
from scoring.errors import RecordError  # noqa: E402
from scoring.records.io import load_record  # noqa: E402
from scoring.records.schema import EpisodeRecord  # noqa: E402

QUALITIES = ("fast", "high")
TEXTURES = ("full", "preview")


def _ensure_offscreen_gl() -> None:
    """MuJoCo picks its GL backend when first imported. If something imported it before
    MUJOCO_GL was set (e.g. another tool loaded at CLI start-up), it chose GLFW, which
    cannot open a context without a display: switch this process to EGL, as MUJOCO_GL asks."""
    from mujoco.rendering.classic import gl_context

    backend = getattr(gl_context, "GLContext", None)
    if backend is not None and backend.__module__ == "mujoco.glfw" and not os.environ.get("DISPLAY") \
            and os.environ.get("MUJOCO_GL") == "egl":
        from mujoco.egl import GLContext

        gl_context.GLContext = GLContext


def apply_state(model: mujoco.MjModel, d: mujoco.MjData, replay, s: int, *, forward: bool = True) -> None:
    """Sets `d` to the recorded state of step `s` (qpos, qvel, mocap, ctrl), then runs
    `mj_forward` (or, without `forward`, only the body and camera kinematics)."""
    d.qpos[:] = replay.qpos[s]
    d.qvel[:] = replay.qvel[s]
    if replay.mocap_pos is not None:
        d.mocap_pos[:] = replay.mocap_pos[s]
    if replay.mocap_quat is not None:
        d.mocap_quat[:] = replay.mocap_quat[s]
    if replay.ctrl is not None:  # actuator forces: without them contact forces come out up to 60% off
        d.ctrl[:] = replay.ctrl[s]
    if forward:
        mujoco.mj_forward(model, d)
    else:
        mujoco.mj_kinematics(model, d)
        mujoco.mj_camlight(model, d)


def success_step(record: EpisodeRecord) -> int | None:
    """The step that gets the green border: `meta["success_step"]` or the last step; None if failed."""
    if not record.success:
        return None
    n = int(record.replay.qpos.shape[0])
    s = record.meta.get("success_step")
    ok = isinstance(s, (int, np.integer)) and not isinstance(s, bool) and 0 <= s < n
    return int(s) if ok else n - 1


class Replayer:
    """Renders any step of a recorded episode offscreen; a context manager (gives back its GL context).

    Args:
      record: an `EpisodeRecord` with replay state, or a path to a record file.
      width, height: frame size in pixels.
      camera: None for the benchmark's agent view (`agentview`, else the record's
        `replay.camera`, else a free camera); a model camera name; "free"; or
        "free:violation", a free camera aimed at the violating bodies.
      window: steps on each side of a violation's step that are highlighted too.
      quality: "fast" (no multisampling or reflections; for video) or "high" (the model's
        own visual quality; for figures).
      textures: "full" (every texel uploaded; exports, figures) or "preview" (textures
        box-downscaled to the frame size before the upload, `render_assets.preview_texture_px`:
        a never-opened LIBERO scene opens in about half the time; docs/replay.md gives the
        measured cost and the pixel difference). Frames of one setting are bit-exact.
      geom_groups: geom groups to draw; None hides group 0 (collision meshes) when the
        model keeps visual geoms in group 1 (robosuite/LIBERO), else draws all.
      xray: on highlighted frames, make every other movable body translucent (close-ups).
    """

    def __init__(self, record: EpisodeRecord | str | os.PathLike, *, width: int = 640, height: int = 480,
                 camera: str | None = None, window: int = 3, quality: str = "fast",
                 textures: str = "full", geom_groups: Sequence[int] | None = None, xray: bool = False):
        self.record = record if isinstance(record, EpisodeRecord) else load_record(record)
        if quality not in QUALITIES:
            raise RenderError(f"unknown quality {quality!r}; expected one of {', '.join(QUALITIES)}")
        if textures not in TEXTURES:
            raise RenderError(f"unknown textures {textures!r}; expected one of {', '.join(TEXTURES)}")
        for name, v in (("width", width), ("height", height)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 16 <= v <= 8192:
                raise RenderError(f"{name}: expected pixels in [16, 8192], got {v!r}")
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0:
            raise RenderError(f"window: expected a number of steps >= 0, got {window!r}")
        self._ctx: OffscreenContext | None = None
        shrink_px = preview_texture_px(width, height) if textures == "preview" else None
        small = preview_scene_model(self.record, shrink_px) if shrink_px else None
        if small is not None:
            shrink_px = None  # its textures are already that small
        self.model = m = small if small is not None else scene_model(self.record)  # shared by the replayers of this scene: read only
        self._check_state()
        self.data = mujoco.MjData(m)
        self.width, self.height, self.window, self.quality = int(width), int(height), int(window), quality
        self.xray = bool(xray)
        self._camera = self._resolve_camera(camera)
        self.camera_name = camera if camera is not None else (self._camera if isinstance(self._camera, str) else FREE)
        self._opt = replay_option(m, geom_groups)
        self._hl = SceneHighlighter(m, self.record)
        self._free_cam: mujoco.MjvCamera | None = None
        self._aimed: dict[Violation, mujoco.MjvCamera] = {}
        self._last_cam = None
        self._fixed_cams: dict[str, mujoco.MjvCamera] = {}
        self._scene = mujoco.MjvScene(m, maxgeom=10000)
        if quality == "fast":
            self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        # The GL context (the scene's textures and meshes on the GPU side) is shared by the
        # replayers of one scene, size and quality on this thread: see replay/render/offscreen.py.
        _ensure_offscreen_gl()
        self._pool: ContextPool = pool_for_this_thread()
        self.textures = textures
        self._ctx_key = (render_assets_key(m, shrink_px), quality, textures)  # scenes with the same assets share one
        self._ctx = self._pool.acquire(self._ctx_key, m, width=self.width, height=self.height,
                                       multisample=quality == "high", max_texture_px=shrink_px)

    # ------------------------------------------------------------ set-up

    def _check_state(self) -> None:
        r, m, rec = self.record.replay, self.model, self.record
        for field, arr, n in (("replay.qpos", r.qpos, m.nq), ("replay.qvel", r.qvel, m.nv),
                              ("replay.mocap_pos", r.mocap_pos, m.nmocap), ("replay.ctrl", r.ctrl, m.nu),
                              ("replay.mocap_quat", r.mocap_quat, m.nmocap)):
            if arr is not None and arr.shape[1] != n:
                raise RecordError(f"expected {n} columns per step for this model, got {arr.shape[1]}; "
                                  "the replay state does not match its MJCF",
                                  file=rec.source, episode=rec.episode_id, field=field)

    @property
    def camera_names(self) -> tuple[str, ...]:
        m = self.model
        return tuple(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) or str(i) for i in range(m.ncam))

    def _resolve_camera(self, camera: str | None):
        names = self.camera_names
        if camera is None:
            default = self.record.replay.camera
            for cand in (*AGENT_VIEWS, default):
                if cand in names:
                    return cand
            return FREE
        if camera in names or camera in (FREE, FREE_VIOLATION):
            return camera
        raise RenderError(f"unknown camera {camera!r}; valid cameras: "
                          f"{', '.join((*names, FREE, FREE_VIOLATION))}")

    @property
    def camera(self) -> str | mujoco.MjvCamera | None:
        """What `update_scene` got for the last frame: a camera name or an `MjvCamera` (free cameras)."""
        return self._last_cam if self._last_cam is not None else \
            self._camera if self._camera not in (FREE, FREE_VIOLATION) else None

    @property
    def n_steps(self) -> int:
        return int(self.record.replay.qpos.shape[0])

    @property
    def success_step(self) -> int | None:
        """The step that gets the green border (`success_step(record)`)."""
        return success_step(self.record)

    # ------------------------------------------------------------ per frame

    def _step_index(self, step: int) -> int:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise RenderError(f"step: expected an integer, got {step!r}")
        s = int(step) + (self.n_steps if step < 0 else 0)
        if not 0 <= s < self.n_steps:
            raise RenderError(f"step {step} out of range: the episode has {self.n_steps} steps "
                              f"(0..{self.n_steps - 1})")
        return s

    def set_state(self, step: int) -> mujoco.MjData:
        """Sets the simulator state of `step` and runs `mj_forward`; returns the data."""
        apply_state(self.model, self.data, self.record.replay, self._step_index(step))
        return self.data

    def _camera_for(self, active: Sequence[Violation], all_violations: Sequence[Violation]):
        if self._camera == FREE:
            if self._free_cam is None:
                self._free_cam = mujoco.MjvCamera()
                mujoco.mjv_defaultFreeCamera(self.model, self._free_cam)
            return self._free_cam
        if self._camera == FREE_VIOLATION:
            focus = next(iter(active or all_violations), None)
            if focus is not None and focus not in self._aimed:
                view = next((c for c in AGENT_VIEWS if c in self.camera_names), None)
                d = self.set_state(focus.step)
                xmat = d.cam_xmat[mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, view)] if view else None
                self._aimed[focus] = self._hl.look_at(d, focus, xmat)
            if focus is not None:
                self._free_cam = self._aimed[focus]
            if self._free_cam is None:
                raise RenderError("camera 'free:violation' needs a violation to aim at: pass violation= to frame()")
            return self._free_cam
        return self._camera

    def _mjv_camera(self, cam) -> mujoco.MjvCamera:
        if isinstance(cam, mujoco.MjvCamera):
            return cam
        got = self._fixed_cams.get(cam)
        if got is None:
            got = self._fixed_cams[cam] = mujoco.MjvCamera()
            got.type = mujoco.mjtCamera.mjCAMERA_FIXED
            got.fixedcamid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, cam)
        return got

    def frame(self, step: int, *, violation: Violation | Sequence[Violation] | None = None,
              highlight: bool = True, annotate: bool = True) -> np.ndarray:
        """The (height, width, 3) uint8 image of `step` (negative counts from the end).

        With `highlight`, each violation whose step is within `window` of `step` is
        shown (red tint, its contacts and force arrows, and with `annotate` a red border
        and caption), and the success frame gets a green border (with `annotate`).
        """
        if self._ctx is None:
            raise RenderError("this Replayer is closed; open a new one to render")
        s = self._step_index(step)
        vs = () if violation is None else (violation,) if isinstance(violation, Violation) else tuple(violation)
        if not all(isinstance(v, Violation) for v in vs):
            raise RenderError(f"violation: expected a Violation or a sequence of them, got {violation!r}")
        active = [v for v in vs if highlight and abs(s - v.step) <= self.window]
        cam = self._last_cam = self._camera_for(active, vs)
        d = self.set_state(s)
        mujoco.mjv_updateScene(self.model, d, self._opt, None, self._mjv_camera(cam),
                               mujoco.mjtCatBit.mjCAT_ALL.value, self._scene)
        arrows = self._hl.decorate(self._scene, d, active, xray=self.xray, step=s) if active else []
        img = self._ctx.render(self._scene)
        for tail, head in arrows:
            ends = self.project(tail), self.project(head)
            if None not in ends:
                draw_arrow(img, *ends)
        if active and annotate:
            draw_border(img, VIOLATION_RGB)
            draw_captions(img, [v.caption for v in active[:3]])
        elif highlight and annotate and s == self.success_step:
            draw_border(img, SUCCESS_RGB)
        return img

    def violation_point(self, v: Violation) -> np.ndarray:
        """The world point a "free:violation" camera aims at: the violation's strongest contact,
        else its bodies' centre (the simulator state is left at the violation's step)."""
        return self._hl.target(self.set_state(v.step), v)

    def project(self, point) -> tuple[float, float] | None:
        """Pixel (x, y) of a world point in the last rendered frame; None if behind the camera."""
        if self._ctx is None or self._last_cam is None:
            raise RenderError("project() needs a rendered frame: call frame() first")
        c0, c1 = self._scene.camera  # the two eyes; mono renders from their mean
        rel = np.asarray(point, float) - (np.asarray(c0.pos) + c1.pos) / 2
        fwd, up = np.asarray(c0.forward), np.asarray(c0.up)
        z = rel @ fwd
        if z <= c0.frustum_near:
            return None
        xn, yn = (rel @ np.cross(fwd, up)) * c0.frustum_near / z, (rel @ up) * c0.frustum_near / z
        half_w = c0.frustum_width or (c0.frustum_top - c0.frustum_bottom) / 2 * self.width / self.height
        u = (xn - c0.frustum_center + half_w) / (2 * half_w)
        v = (yn - c0.frustum_bottom) / (c0.frustum_top - c0.frustum_bottom)
        return float(u * self.width), float((1 - v) * self.height)

    # ------------------------------------------------------------ resources

    @property
    def closed(self) -> bool:
        return self._ctx is None

    def close(self) -> None:
        """Gives back the GL context (freed once no replayer of its scene needs it); idempotent."""
        if self._ctx is not None:
            self._ctx = None
            self._pool.release(self._ctx_key, width=self.width, height=self.height)

    def __enter__(self) -> "Replayer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

