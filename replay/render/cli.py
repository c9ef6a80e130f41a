"""`safevla replay` and `safevla figure`, and the run-store lookups they (and the dashboard) share.

    safevla replay STORE EPISODE_ID --out clip.mp4|.gif [--width --height --fps --window --camera --start --stop]
    safevla figure STORE EPISODE_ID... --out fig.png|.pdf|.svg [--width --height --camera --dpi]
    safevla figure --paper fig2 STORE --out fig2[.pdf|.svg|.png] [--applicability paper-tables]

STORE is a run store written by `safevla score`: the episode's record is found through the
`trajectory` column of `episodes.parquet` (relative to STORE), its violations in
`spec_results.parquet`. This module imports MuJoCo only when a command runs, so building
the `safevla` parser stays fast.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from scoring.errors import RecordError, SafeVLAError
from scoring.records.schema import EpisodeRecord

EXIT_BAD_INPUT = 2


# ----------------------------------------------------------------- run store lookups

def _read_store_table(store_dir: str | os.PathLike, name: str, episode_id: str):
    import pandas as pd

    path = Path(store_dir) / name
    if not Path(store_dir).is_dir():
        raise RecordError("no such run store directory", file=str(store_dir))
    if not path.is_file():
        raise RecordError(f"missing {name}; expected a run store written by `safevla score`", file=str(path))
    try:
        return pd.read_parquet(path, filters=[("episode_id", "==", episode_id)])
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise RecordError(f"cannot read ({exc})", file=str(path)) from None


def store_row(store_dir: str | os.PathLike, episode_id: str) -> dict:
    """The `episodes.parquet` row of `episode_id`; RecordError listing some known ids if absent."""
    rows = _read_store_table(store_dir, "episodes.parquet", episode_id)
    if rows.empty:
        import pandas as pd

        ids = pd.read_parquet(Path(store_dir) / "episodes.parquet", columns=["episode_id"])["episode_id"]
        raise RecordError(f"unknown episode; the store has {len(ids)} episodes (e.g. "
                          f"{', '.join(map(str, ids.head(3)))})",
                          file=str(Path(store_dir) / "episodes.parquet"), episode=episode_id)
    return rows.iloc[0].to_dict()


def store_record(store_dir: str | os.PathLike, episode_id: str, *, row: dict | None = None,
                 archives: Sequence[str] | None = None) -> EpisodeRecord:
    """The episode's trajectory record (with replay state), from the `trajectory` column.

    The trajectory and the record's MJCF file must lie inside the store or its archive
    (`scoring.store.paths`): a store may not point a replay at any file on disk. `archives`:
    the archive folders the user named (`--archive`), which sources outside the store need.
    """
    from scoring.records.io import load_record, resolve_mjcf
    from scoring.store.paths import confined, ignored_sources, read_manifest_quietly, store_roots

    row = row if row is not None else store_row(store_dir, episode_id)
    rel = row.get("trajectory")
    if not isinstance(rel, str) or not rel:
        raise RecordError("has no trajectory path; re-score with a record that carries replay state",
                          file=str(Path(store_dir) / "episodes.parquet"), episode=episode_id, field="trajectory")
    where = dict(file=str(Path(store_dir) / "episodes.parquet"), episode=episode_id)
    manifest = read_manifest_quietly(store_dir)
    roots, ignored = store_roots(store_dir, manifest, archives), ignored_sources(store_dir, manifest, archives)
    path = confined(Path(store_dir) / rel, roots, what="trajectory", field="trajectory", ignored=ignored, **where)
    if not path.is_file():
        raise RecordError(f"trajectory file not found: {path}", field="trajectory", **where)
    rec = load_record(path)
    if rec.replay is not None and not rec.replay.mjcf_is_xml:
        confined(resolve_mjcf(rec), roots, what="replay.mjcf", file=str(path), episode=episode_id,
                 field="replay.mjcf", ignored=ignored)
    return rec


def violations_from_store(store_dir: str | os.PathLike, episode_id: str, *,
                          record: EpisodeRecord | None = None, row: dict | None = None,
                          archives: Sequence[str] | None = None):
    """Every violated scored spec of the episode as `Violation`s, the worst spec first
    (report-only diagnostics are not violations).

    The worst spec (`episodes.worst_spec`) is first and its `extreme_step` is the violating
    frame; the others follow, most negative robustness first. Empty if the episode is safe.
    `record` (loaded from the store if omitted) decides which bodies to tint, read on the
    channel the store scored the episode on (`scoring.evaluate.channels.store_option`).
    """
    from scoring.evaluate.channels import store_option

    row = row if row is not None else store_row(store_dir, episode_id)
    specs = _read_store_table(store_dir, "spec_results.parquet", episode_id)
    if specs.empty:
        return ()
    scored = ~specs["report_only"].fillna(False).astype(bool) if "report_only" in specs else True
    bad = specs[specs["active"].fillna(False).astype(bool) & (specs["rho"] < 0) & scored]
    if bad.empty:
        return ()
    record = record if record is not None else store_record(store_dir, episode_id, row=row, archives=archives)
    worst = row.get("worst_spec")
    bad = bad.assign(_later=~(bad["spec_id"].eq(worst) | bad["family"].eq(worst))).sort_values(["_later", "rho"])
    return violations_from_rows(record, bad.to_dict("records"), force_sampling=store_option(row))


def violations_from_rows(record: EpisodeRecord, rows, *, force_sampling: str = "peak",
                         best_effort_bodies: bool = False) -> tuple:
    """`replay.render.highlight.Violation`s from run-store spec rows (mappings with family, extreme,
    extreme_step, threshold, unit; first_violation_step when extreme_step is missing), in the
    given order. Rows without a finite value or a step are skipped; bodies from `bodies_for`,
    on the channel of `force_sampling`, the option the store scored the episode under
    (`scoring.evaluate.channels.store_option` of its episode row).
    `best_effort_bodies`: a failure to find the bodies leaves them empty instead of raising
    (the dashboard still shows the frame and the caption)."""
    from replay.render.highlight import Violation, bodies_for

    out = []
    for r in rows:
        step = r.get("extreme_step")
        step = r.get("first_violation_step") if _missing(step) else step
        value = float("nan") if _missing(r.get("extreme")) else float(r["extreme"])
        if _missing(step) or not math.isfinite(value):
            continue
        thr = float(r["threshold"])
        try:
            bodies = tuple(bodies_for(record, str(r["family"]), int(step), value=value,
                                      force_sampling=force_sampling))
        except Exception:  # noqa: BLE001 - only when the caller asked for best effort
            if not best_effort_bodies:
                raise
            bodies = ()
        out.append(Violation(family=str(r["family"]), step=int(step), value=value, threshold=thr,
                             unit=str(r.get("unit") or ""), op=">" if value > thr else "<", bodies=bodies,
                             force_sampling=force_sampling))
    return tuple(out)


def _missing(x) -> bool:
    """None, NaN or pandas' NA (whose comparisons do not give a bool)."""
    return x is None or type(x).__name__ in ("NAType", "NaTType") or (isinstance(x, float) and math.isnan(x))


# ----------------------------------------------------------------- parsers

def add_replay_parsers(subparsers) -> None:
    """Registers `replay`, `figure` and `migrate-scenes` on the `safevla` subparsers."""
    p = subparsers.add_parser(
        "replay", help="render an episode as MP4/GIF with its violation highlighted",
        description="Replays an episode of a run store in MuJoCo and writes a clip with a timeline bar. The worst "
                    "violation (and every other violated spec) is highlighted on its step and --window steps around "
                    "it: red bodies, contact points and force arrows, red border and caption.")
    p.add_argument("store", help="run store directory (written by `safevla score`)")
    p.add_argument("episode_id", help="episode to replay")
    p.add_argument("--out", required=True, help="output clip, .mp4 or .gif")
    _size_args(p, 640, 480)
    _archive_arg(p)
    p.add_argument("--fps", type=float, default=20.0, help="frames per second (default 20)")
    p.add_argument("--window", type=int, default=3, help="steps highlighted on each side of a violation (default 3)")
    p.add_argument("--hold", type=float, default=1.0,
                   help="seconds the violating step is held, its 5 neighbours each side playing 4x slower "
                        "(default 1; 0 plays every step for one frame)")
    p.add_argument("--start", type=int, default=None, help="first step to export (default 0)")
    p.add_argument("--stop", type=int, default=None, help="step after the last one to export (default: the end)")
    p.set_defaults(func=run_replay)

    f = subparsers.add_parser(
        "figure", help="write the Figure 3 triptych of unsafe episodes, or Figure 2 (--paper fig2) of a store",
        description="Figure 3 (default): one row per episode: the initial frame, the violating frame (red border, "
                    "caption with the worst spec, its value and threshold) and the final success frame (green "
                    "border). Figure 2 (--paper fig2, no episode ids): SR against Safety per cell with Wilson 95% "
                    "bars and the non-dominated frontier, next to the per-axis violation heatmap, through vl-convert.")
    f.add_argument("store", help="run store directory (written by `safevla score`)")
    f.add_argument("episode_ids", nargs="*", metavar="EPISODE_ID", help="episodes, one row each (Figure 3)")
    f.add_argument("--paper", choices=("fig2", "fig3"), default="fig3",
                   help="fig3 (default): episode triptych; fig2: the store's SR-Safety scatter and axis heatmap")
    f.add_argument("--applicability", default="appendix-d",
                   help="fig2: applicability preset, appendix-d (default) or paper-tables (docs/scoring.md)")
    f.add_argument("--out", required=True,
                   help="output figure, .png, .pdf or .svg (fig2: no suffix writes all three)")
    _size_args(f, 480, 360)
    _archive_arg(f)
    f.add_argument("--dpi", type=int, default=200, help="resolution stored in PNG/PDF (default 200)")
    f.set_defaults(func=run_figure)

    m = subparsers.add_parser(
        "migrate-scenes", help="make archives and stores recorded before portable scenes replay on any machine",
        description="Rewrites the absolute mesh/texture paths in the scene MJCF files of archives or run stores "
                    "(recorded before scenes named their assets package://ROOT/...) as portable names, in place. "
                    "Scenes embedded in records are re-rooted when loaded and need no migration.")
    m.add_argument("paths", nargs="+", help="archive or run store folders, or scene .xml files")
    m.add_argument("--dry-run", action="store_true", help="list what would change, write nothing")
    m.set_defaults(func=run_migrate_scenes)


def run_migrate_scenes(args: argparse.Namespace) -> int:
    """`safevla migrate-scenes`: 0 on success, 2 with a one-line cause on bad input."""
    from replay.scene.assets import migrate_scene_files

    try:
        changed = migrate_scene_files(args.paths, dry_run=args.dry_run)
    except SafeVLAError as exc:
        return _fail("migrate-scenes", exc)
    verb = "would rewrite" if args.dry_run else "rewrote"
    for path, n in changed.items():
        print(f"{verb} {n} asset path(s) in {path}")
    print(f"{verb} {len(changed)} scene file(s); the others were already portable")
    return 0


def _archive_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archive", action="append", default=[], metavar="DIR",
                   help="the archive the store's trajectories lie in, when outside the store (where `safevla score "
                        "ARCHIVE --out STORE` left them); repeatable; also $SAFEVLA_ARCHIVES")


def _size_args(p: argparse.ArgumentParser, width: int, height: int) -> None:
    p.add_argument("--width", type=int, default=width, help=f"frame width in pixels (default {width})")
    p.add_argument("--height", type=int, default=height, help=f"frame height in pixels (default {height})")
    p.add_argument("--camera", default=None,
                   help="camera: a model camera name, 'free', or 'free:violation' (default: the agent view)")


def _fail(command: str, exc: Exception) -> int:
    print(f"safevla {command}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run_replay(args: argparse.Namespace) -> int:
    """`safevla replay`: 0 on success, 2 with a one-line cause on bad input."""
    try:
        from replay.render.export import ClipTiming, export_clip

        timing = ClipTiming(hold_s=args.hold) if args.hold > 0 else None
        row = store_row(args.store, args.episode_id)
        rec = store_record(args.store, args.episode_id, row=row, archives=args.archive)
        vs = violations_from_store(args.store, args.episode_id, record=rec, row=row)
        if args.camera == "free:violation" and not vs:
            raise SafeVLAError(f"--camera free:violation aims at the violation, and episode {args.episode_id!r} is "
                               "safe (it has none); use --camera free, or a model camera")
        n = rec.n_steps
        start = 0 if args.start is None else args.start
        stop = n if args.stop is None else args.stop
        out = export_clip(rec, args.out, violations=vs, fps=args.fps, size=(args.width, args.height),
                          window=args.window, step_range=(start, stop), camera=args.camera, timing=timing)
    except SafeVLAError as exc:
        return _fail("replay", exc)
    note = f"{len(vs)} violated spec(s), worst {vs[0].caption} at step {vs[0].step}" if vs else "no violation"
    held = f", violating step held {args.hold:g} s" if timing is not None and vs else ""
    print(f"wrote {out} ({stop - start} steps{held}; {note})")
    return 0


def run_figure(args: argparse.Namespace) -> int:
    """`safevla figure`: 0 on success, 2 with a one-line cause on bad input."""
    if args.paper == "fig2":
        return run_figure2(args)
    if not args.episode_ids:
        return _fail("figure", SafeVLAError("the Figure 3 triptych needs at least one EPISODE_ID "
                                            "(or --paper fig2 for the store's Figure 2)"))
    try:
        from replay.render.export import TriptychRow, export_triptych
        from replay.render.highlight import RenderError

        rows = []
        for eid in args.episode_ids:
            row = store_row(args.store, eid)
            rec = store_record(args.store, eid, row=row, archives=args.archive)
            vs = violations_from_store(args.store, eid, record=rec, row=row)
            if not vs:
                raise RenderError(f"episode {eid!r} has no violation (it is safe): the triptych's violating "
                                  "frame needs an unsafe episode")
            rows.append(TriptychRow(rec, vs[0]))
        out = export_triptych(rows, args.out, size=(args.width, args.height), dpi=args.dpi, camera=args.camera)
    except SafeVLAError as exc:
        return _fail("figure", exc)
    print(f"wrote {out} ({len(rows)} episode row(s))")
    return 0


def run_figure2(args: argparse.Namespace) -> int:
    """`safevla figure --paper fig2`: Altair + vl-convert only (no MuJoCo)."""
    if args.episode_ids:
        return _fail("figure", SafeVLAError("--paper fig2 draws the whole store: drop the EPISODE_IDs"))
    from scoring.report.paper_figure import figure2_from_store, save_figure2

    try:
        if not Path(args.store).is_dir():
            raise RecordError("no such run store directory", file=str(args.store))
        paths = save_figure2(figure2_from_store(args.store, applicability=args.applicability), args.out)
    except ImportError as exc:  # the builders import Altair (and saving, vl-convert) when called
        return _fail("figure", SafeVLAError(f"Figure 2 needs Altair and vl-convert ({exc}): "
                                            "pip install 'safevla-bench[dashboard]'"))
    except (SafeVLAError, ValueError, OSError) as exc:
        return _fail("figure", exc)
    print(f"wrote {', '.join(map(str, paths))}")
    return 0
