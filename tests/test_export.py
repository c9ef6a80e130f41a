"""Clip and triptych export, and the `replay`/`figure` commands, on real renders of a tiny model."""

from __future__ import annotations

import argparse
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_render import T, VIOL, toy_record  # noqa: E402

from replay.render.cli import add_replay_parsers, violations_from_store  # noqa: E402
from replay.render.export import (Timeline, TriptychRow, export_clip, export_triptych, iter_clip_frames,  # noqa: E402
                                  triptych_image)
from replay.render.highlight import SUCCESS_RGB, VIOLATION_RGB, RenderError, Violation  # noqa: E402
from scoring.records.io import save_record  # noqa: E402

pytestmark = pytest.mark.render
SIZE = (160, 120)


def close_to(pixels: np.ndarray, rgb, tol: int = 40) -> bool:
    return bool((np.abs(pixels.reshape(-1, 3).astype(int).mean(axis=0) - rgb) < tol).all())


def test_clip_frames_have_a_timeline_marking_violation_success_and_cursor():
    rec = toy_record()
    frames = list(iter_clip_frames(rec, violations=[VIOL], size=SIZE, window=1))
    assert len(frames) == T
    bar_h = frames[0].shape[0] - SIZE[1]
    assert bar_h > 0 and frames[0].shape[0] % 2 == 0 and frames[0].shape[1] == SIZE[0]
    tl = Timeline(SIZE[0], range(T), violations=[VIOL], success_step=T - 1, window=1)
    bar = frames[0][SIZE[1]:]
    mid = bar_h // 2
    assert (bar[mid, tl.x(VIOL.step)] == VIOLATION_RGB).all()
    assert (bar[mid, tl.x(T - 1)] == SUCCESS_RGB).all() or (bar[mid, tl.x(T - 1)] == 255).all()
    for s in (0, 4, 9):  # the cursor (white) moves with the step
        assert (frames[s][SIZE[1] + 1, tl.x(s)] == 255).all()
        assert not (frames[s][SIZE[1] + 1, tl.x((s + 5) % T)] == 255).all()
    assert close_to(frames[VIOL.step][:3, :], VIOLATION_RGB, 1)  # red border in the window only
    assert not close_to(frames[VIOL.step - 3][:3, :], VIOLATION_RGB)


def test_export_mp4(tmp_path):
    import imageio.v3 as iio

    calls = []
    out = export_clip(toy_record(), tmp_path / "clip.mp4", violations=VIOL, size=(161, 121), fps=10,
                      timing=None, progress=lambda i, n: calls.append((i, n)))
    assert out == tmp_path / "clip.mp4" and not list(tmp_path.glob(".*tmp*"))
    frames = iio.imread(out, plugin="pyav") if _has_pyav() else np.stack(list(iio.imiter(out)))
    assert frames.shape[0] == T and frames.shape[2] == 162 and frames.shape[1] % 2 == 0  # odd size rounded up
    assert close_to(frames[VIOL.step][:3, 10:-10], VIOLATION_RGB)  # lossy codec: close, not equal
    assert close_to(frames[T - 1][:3, 10:-10], SUCCESS_RGB)
    assert calls[-1] == (T, T) and len(calls) == T


def _has_pyav() -> bool:
    try:
        import av  # noqa: F401
        return True
    except ImportError:
        return False


def test_export_gif_and_step_range(tmp_path):
    from PIL import Image

    out = export_clip(toy_record(), tmp_path / "clip.gif", violations=[VIOL], size=SIZE, fps=20,
                      step_range=(4, 9), timing=None)
    with Image.open(out) as im:
        assert im.n_frames == 5 and im.info["duration"] == 50
        im.seek(2)  # step 6, the violating frame
        assert close_to(np.asarray(im.convert("RGB"))[:3, 10:-10], VIOLATION_RGB, 10)


def test_clip_holds_the_violating_step_and_slows_its_neighbours(tmp_path):
    import imageio.v3 as iio
    from PIL import Image

    from replay.render.export import ClipTiming

    timing = ClipTiming(hold_s=1.0, slow_radius=2, slow_factor=3)
    want = [1, 1, 1, 1, 3, 3, 20, 3, 3, 1, 1, 1]  # T = 12 steps, violation at step 6, 20 fps
    assert timing.repeats(range(T), [VIOL.step, VIOL.step], 20).tolist() == want
    assert timing.repeats(range(5, 8), [VIOL.step], 20).tolist() == [3, 20, 3]
    assert timing.repeats(range(0, 3), [VIOL.step], 20).tolist() == [1, 1, 1]  # violation outside the range
    shown = timing.frame_steps(range(T), [VIOL.step], 20)  # frame -> step, for a player synced to the clip
    assert len(shown) == sum(want) and shown[0] == 0 and shown[-1] == T - 1
    assert (shown == VIOL.step).sum() == 20 and (np.diff(shown) >= 0).all()
    # MP4 (constant frame rate): the violating frame repeated for 1 s, its neighbours 3x
    out = export_clip(toy_record(), tmp_path / "clip.mp4", violations=VIOL, size=SIZE, fps=20, timing=timing)
    frames = np.stack(list(iio.imiter(out)))
    assert frames.shape[0] == sum(want)
    held = frames[sum(want[:6]):sum(want[:7])]
    assert all(close_to(f[:3, 10:-10], VIOLATION_RGB) for f in held)  # 20 frames = 1 s of the red-bordered step
    # the default timing of export_clip: 1 s hold, 5 steps either side at quarter speed
    assert ClipTiming().repeats(range(T), [VIOL.step], 20).tolist() == [1, 4, 4, 4, 4, 4, 20, 4, 4, 4, 4, 4]
    # GIF: the repeats become durations, 1000 ms on the violating step and 150 ms around it
    gif = export_clip(toy_record(), tmp_path / "clip.gif", violations=VIOL, size=SIZE, fps=20, timing=timing)
    with Image.open(gif) as im:
        durations = []
        for k in range(im.n_frames):
            im.seek(k)
            durations.append(im.info["duration"])
    assert durations == [50 * r for r in want]


@pytest.mark.parametrize("timing, match", [({"hold_s": -1}, "hold_s"), ({"slow_factor": 0}, "slow_factor"),
                                           ({"slow_radius": 1.5}, "slow_radius")])
def test_clip_timing_rejects_bad_values(timing, match):
    from replay.render.export import ClipTiming

    with pytest.raises(RenderError, match=match):
        ClipTiming(**timing)


@pytest.mark.parametrize("kwargs, match", [
    ({"step_range": (5, 5)}, "step_range"), ({"step_range": (0, T + 1)}, "step_range"),
    ({"fps": 0}, "fps"), ({"size": (640,)}, "size"), ({"violations": ["x"]}, "Violation"),
])
def test_export_clip_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(RenderError, match=match):
        export_clip(toy_record(), tmp_path / "c.mp4", **kwargs)
    assert not list(tmp_path.iterdir())


def test_export_clip_rejects_unknown_format(tmp_path):
    with pytest.raises(RenderError, match=r"\.avi.*\.mp4 or \.gif"):
        export_clip(toy_record(), tmp_path / "c.avi")


def test_triptych_png_rows_borders_and_caption(tmp_path):
    rec = toy_record()
    img = np.asarray(triptych_image([(rec, [VIOL]), TriptychRow(rec, VIOL, "second row")], size=SIZE))
    png = export_triptych([(rec, [VIOL])], tmp_path / "fig.png", size=SIZE, dpi=150)
    from PIL import Image

    with Image.open(png) as im:
        assert im.width == img.shape[1] and round(im.info["dpi"][0]) == 150
    h, w = img.shape[:2]
    assert h > 2 * SIZE[1] and w > 3 * SIZE[0]
    # each row has three panels whose outer frames are grey, red and green, left to right
    red = np.all(img == VIOLATION_RGB, axis=-1)
    green = np.all(img == SUCCESS_RGB, axis=-1)
    assert red[:, : w // 3].sum() == 0 and green[:, : 2 * w // 3].sum() == 0
    assert red[:, w // 3: 2 * w // 3].sum() > 4 * SIZE[0] and green[:, 2 * w // 3:].sum() > 4 * SIZE[0]
    top, bottom = red[: h // 2, w // 3: 2 * w // 3].sum(), red[h // 2:, w // 3: 2 * w // 3].sum()
    assert top > 0 and bottom > 0  # one violating panel per row
    assert (img[-5:] == 255).all()  # white margin below the caption row


def test_triptych_inset_is_a_close_up_inside_the_violating_panel():
    rec = toy_record()
    plain = np.asarray(triptych_image([(rec, VIOL)], size=SIZE, inset=False)).astype(int)
    zoom = np.asarray(triptych_image([(rec, VIOL)], size=SIZE)).astype(int)
    from scipy import ndimage

    changed = np.abs(zoom - plain).sum(axis=-1) > 30
    w = plain.shape[1]
    assert changed.sum() > 0.05 * SIZE[0] * SIZE[1]
    ys, xs = np.nonzero(changed)
    assert xs.min() > w // 3 and xs.max() < 2 * w // 3  # only the middle panel changes
    # The inset is the largest changed region. Two renders of one frame can differ in a few
    # pixels of the scene itself (seen: a speck at the contact, about 1 run in 5), so the
    # region is taken as a connected component, not as the box around every changed pixel.
    labels, _ = ndimage.label(changed)
    inset = labels == np.argmax(np.bincount(labels.ravel())[1:]) + 1
    assert inset.sum() > 0.95 * changed.sum()
    ys, xs = np.nonzero(inset)
    red = np.all(zoom[ys.min():ys.max() + 1, xs.min():xs.max() + 1] == VIOLATION_RGB, axis=-1)
    assert red[0].mean() > 0.9 and red[:, 0].mean() > 0.9  # the inset has a red frame


def _poppler(tool: str):
    import shutil

    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} (Debian poppler-utils, installed by scripts/install.sh all) is not installed")
    return path


def test_triptych_pdf_is_vector_text_with_lossless_frames(tmp_path):
    import subprocess

    from PIL import Image

    rec = toy_record()
    pdf = export_triptych([(rec, VIOL), TriptychRow(rec, VIOL, "second row")], tmp_path / "fig.pdf", size=SIZE)
    assert pdf.read_bytes().startswith(b"%PDF")
    text = subprocess.run([_poppler("pdftotext"), "-layout", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    # titles, row label with the episode and the spec, step/time labels and the caption are real text
    for words in ("Initial state", "Safety violation", "Task success", "episode toy-1",
                  "max contact force 412 N > 200 N", "second row", f"t = {VIOL.step * rec.dt:.2f} s (step 6)",
                  "t = 0.00 s", "green border"):
        assert words in text, (words, text)
    # six frames, each embedded once at its rendered size, Flate-compressed (lossless), none JPEG
    listing = subprocess.run([_poppler("pdfimages"), "-list", str(pdf)], capture_output=True, text=True,
                             check=True).stdout.splitlines()[2:]
    assert len(listing) == 6
    for line in listing:
        cols = line.split()
        assert (int(cols[3]), int(cols[4])) == SIZE and cols[8] == "image", line  # "jpeg" would be DCT
    assert b"/DCTDecode" not in pdf.read_bytes() and b"/FlateDecode" in pdf.read_bytes()
    # the page as a reader sees it: a red border around the middle panel, green around the right one
    subprocess.run([_poppler("pdftoppm"), "-png", "-r", "100", "-singlefile", str(pdf), str(tmp_path / "page")],
                   check=True)
    page = np.asarray(Image.open(tmp_path / "page.png").convert("RGB")).astype(int)
    w = page.shape[1]
    red = (np.abs(page - VIOLATION_RGB).sum(axis=-1) < 60)
    green = (np.abs(page - SUCCESS_RGB).sum(axis=-1) < 60)
    assert red[:, w // 3: 2 * w // 3].sum() > 10 * red[:, : w // 3].sum() + 100
    assert green[:, 2 * w // 3:].sum() > 10 * green[:, : w // 3].sum() + 100  # (the scene has a green ball)


def test_triptych_svg_keeps_text_as_text(tmp_path):
    import base64
    import io

    from PIL import Image

    svg = export_triptych([(toy_record(), VIOL)], tmp_path / "fig.svg", size=SIZE)
    root = ET.fromstring(svg.read_text())
    assert root.tag.endswith("svg")
    ns = "{http://www.w3.org/2000/svg}"
    texts = " ".join("".join(t.itertext()) for t in root.iter(f"{ns}text"))
    assert "Safety violation" in texts and "episode toy-1" in texts and "(step 6)" in texts
    images = list(root.iter(f"{ns}image"))
    assert len(images) == 3
    for image in images:
        href = image.get("{http://www.w3.org/1999/xlink}href")
        assert href.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(href.split(",", 1)[1]))) as im:
            assert im.size == SIZE  # embedded at its rendered size, PNG (lossless)


def test_triptych_needs_a_violation(tmp_path):
    with pytest.raises(RenderError, match="'toy-1' has no violation"):
        export_triptych([(toy_record(), [])], tmp_path / "fig.png")
    with pytest.raises(RenderError, match="format"):
        export_triptych([(toy_record(), VIOL)], tmp_path / "fig.jpg")
    with pytest.raises(RenderError, match="at least one"):
        triptych_image([])
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------- run store and CLI

def make_store(tmp_path: Path, *, safe_too: bool = True) -> Path:
    """A run store with the columns of DESIGN.md: one unsafe toy episode (and one safe one)."""
    store = tmp_path / "store"
    (store / "trajectories").mkdir(parents=True)
    save_record(toy_record(), store / "trajectories" / "toy-1.npz")
    eps = [{"episode_id": "toy-1", "model": "m", "benchmark": "toy", "suite": "s", "task_id": "slide",
            "success": True, "safe": False, "sbu": True, "vsi": 0.8, "worst_spec": "max_contact_force_under_200N",
            "violating_step": 6, "n_steps": T, "trajectory": "trajectories/toy-1.npz"}]
    specs = [
        {"episode_id": "toy-1", "family": "non_target_max_disp", "spec_id": "non_target_max_disp_5mm",
         "active": True, "reason": None, "rho": -0.001, "extreme": 0.006, "extreme_step": 9,
         "first_violation_step": 8, "depth": 0.2, "threshold": 0.005, "unit": "m", "signal": "disp"},
        {"episode_id": "toy-1", "family": "max_contact_force", "spec_id": "max_contact_force_under_200N",
         "active": True, "reason": None, "rho": -212.0, "extreme": 412.0, "extreme_step": 6,
         "first_violation_step": 6, "depth": 0.7, "threshold": 200.0, "unit": "N", "signal": "f"},
        {"episode_id": "toy-1", "family": "eef_speed", "spec_id": "eef_speed_under_1mps", "report_only": True,
         "active": True, "reason": None, "rho": -0.5, "extreme": 1.5, "extreme_step": 3,
         "first_violation_step": 3, "depth": np.nan, "threshold": 1.0, "unit": "m/s", "signal": "v"},
        {"episode_id": "toy-1", "family": "joint_torque", "spec_id": "joint_torque", "active": False,
         "reason": "signal unavailable", "rho": np.nan, "extreme": np.nan, "extreme_step": None,
         "first_violation_step": None, "depth": np.nan, "threshold": 1.0, "unit": "ratio", "signal": "tq"},
    ]
    if safe_too:
        save_record(toy_record(), store / "trajectories" / "toy-safe.npz")
        eps.append({**eps[0], "episode_id": "toy-safe", "safe": True, "sbu": False, "worst_spec": None,
                    "violating_step": None, "trajectory": "trajectories/toy-safe.npz"})
        specs.append({**specs[1], "episode_id": "toy-safe", "rho": 150.0, "extreme": 50.0, "extreme_step": 2})
    pd.DataFrame(eps).to_parquet(store / "episodes.parquet")
    pd.DataFrame(specs).to_parquet(store / "spec_results.parquet")
    return store


def test_violations_from_store_worst_first_with_bodies(tmp_path):
    store = make_store(tmp_path)
    vs = violations_from_store(store, "toy-1")
    assert [v.family for v in vs] == ["max_contact_force", "non_target_max_disp"]  # not the report-only one
    assert vs[0] == Violation("max_contact_force", 6, 412.0, 200.0, "N", ">", ("box", "world"))
    assert vs[1].bodies == ("ball",) and vs[1].caption == "bystander displacement 6 mm > 5 mm"
    assert violations_from_store(store, "toy-safe") == ()


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="safevla")
    add_replay_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_replay_and_figure(tmp_path, capsys):
    store = make_store(tmp_path)
    clip, fig = tmp_path / "out" / "clip.gif", tmp_path / "fig.png"
    assert run(["replay", str(store), "toy-1", "--out", str(clip), "--width", "96", "--height", "64",
                "--start", "3", "--stop", "9", "--window", "1"]) == 0
    assert "worst max contact force 412 N > 200 N at step 6" in capsys.readouterr().out
    from PIL import Image

    with Image.open(clip) as im:
        assert im.n_frames == 6 and im.width == 96
    assert run(["figure", str(store), "toy-1", "toy-1", "--out", str(fig), "--width", "96", "--height", "64"]) == 0
    assert fig.is_file()


@pytest.mark.parametrize("argv, message", [
    (["figure", "{store}", "toy-safe", "--out", "{tmp}/f.png"], "'toy-safe' has no violation"),
    (["replay", "{store}", "nope", "--out", "{tmp}/c.mp4"], "unknown episode; the store has 2 episodes"),
    (["replay", "{tmp}/missing", "toy-1", "--out", "{tmp}/c.mp4"], "no such run store directory"),
    (["replay", "{store}", "toy-1", "--out", "{tmp}/c.webm"], "unsupported clip format"),
    (["replay", "{store}", "toy-1", "--out", "{tmp}/c.mp4", "--camera", "top"], "unknown camera 'top'"),
    (["replay", "{store}", "toy-1", "--out", "{tmp}/c.mp4", "--stop", "99"], "step_range"),
    (["replay", "{store}", "toy-safe", "--out", "{tmp}/c.mp4", "--camera", "free:violation"],
     "--camera free:violation aims at the violation, and episode 'toy-safe' is safe"),
])
def test_cli_bad_input_one_line_cause(tmp_path, capsys, argv, message):
    store = make_store(tmp_path)
    argv = [a.format(store=store, tmp=tmp_path) for a in argv]
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"safevla {argv[0]}: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("where", ["absolute", "climbing out"])
def test_cli_replay_refuses_a_trajectory_outside_the_store(tmp_path, capsys, where):
    """`safevla replay` follows the store's trajectory column only inside the store."""
    import shutil

    import pandas as pd
    store = make_store(tmp_path)
    table = pd.read_parquet(store / "episodes.parquet")
    row = table.index[table["episode_id"] == "toy-1"][0]
    outside = tmp_path / "elsewhere.npz"
    shutil.copyfile(store / table.loc[row, "trajectory"], outside)  # a valid record, outside the store
    table.loc[row, "trajectory"] = str(outside) if where == "absolute" else os.path.relpath(outside, store)
    table.to_parquet(store / "episodes.parquet")
    assert run(["replay", str(store), "toy-1", "--out", str(tmp_path / "c.gif")]) == 2
    err = capsys.readouterr().err
    assert "outside the run store and its archive; refused" in err and err.count("\n") == 1
    assert not (tmp_path / "c.gif").exists()
