"""`safevla`: score archives, write report tables, and reach the replay/rollout/dashboard tools.

Every subcommand has `--help`; bad input exits non-zero with a one-line cause.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

from scoring.errors import SafeVLAError

EXIT_BAD_INPUT = 2
DEMO_STORE = Path(__file__).resolve().parent.parent / "assets" / "demo" / "store"


def _score_parser(sub) -> None:
    p = sub.add_parser("score", help="score trajectory archives into a Parquet run store",
                       description="Score .json/.jsonl/.npz trajectory records (files or directories) into a run "
                                   "store. Episodes already scored with the same registry are skipped; a corrupt "
                                   "episode is reported and the rest are still scored.")
    p.add_argument("archives", nargs="+", help="record files or directories")
    p.add_argument("--out", required=True, help="run store directory (created if missing)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--registry", default=None, help="registry directory (default: the bundled assets/)")
    p.add_argument("--copy-trajectories", action="store_true",
                   help="copy .npz records into STORE/trajectories instead of referencing them in place")
    p.add_argument("--synthetic", action="store_true", help="mark the store as synthetic in its manifest")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local process pool (default) or Ray tasks; both write the same Parquet (docs/cluster.md)")
    p.add_argument("--address", default=None, help="Ray cluster address for --engine ray (default: start Ray locally)")
    p.set_defaults(func=run_score)


def run_score(args) -> int:
    from scoring.store import score_archive
    if args.workers < 1:
        raise SafeVLAError(f"--workers expects a positive integer, got {args.workers}")
    if getattr(args, "engine", "local") == "ray":
        from scoring.ray_score import score_archive_ray  # Ray stays optional: imported only here
        summary = score_archive_ray(args.archives, args.out, address=args.address, registry_path=args.registry,
                                    copy_trajectories=args.copy_trajectories, synthetic=args.synthetic,
                                    progress=False if args.no_progress else None)
    else:
        summary = score_archive(args.archives, args.out, workers=args.workers, registry_path=args.registry,
                                copy_trajectories=args.copy_trajectories, synthetic=args.synthetic,
                                progress=False if args.no_progress else None)
    for err in summary.errors:
        print(f"error: {err['message']}", file=sys.stderr)
    print(f"scored {summary.scored}, skipped {summary.skipped} already scored, {len(summary.errors)} failed "
          f"-> {summary.store}")
    return 1 if summary.errors and not summary.scored and not summary.skipped else 0


def _report_parser(sub) -> None:
    p = sub.add_parser("report", help="write the paper tables (4/5, 7/8, 9, 10/11, 12) as CSV, Markdown, LaTeX")
    p.add_argument("store", help="run store directory")
    p.add_argument("--out", default=None, help="output directory (default: STORE/report)")
    p.add_argument("--by", default="model,suite", help="cell grouping columns (default model,suite)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.set_defaults(func=run_report)


def run_report(args) -> int:
    from scoring.registry import load_registry
    from scoring.store import load_store
    from scoring.tables import build_tables, write_tables
    _, episodes, spec_results = load_store(args.store)
    if episodes.empty:
        raise SafeVLAError(f"run store {args.store!r} has no scored episodes")
    by = tuple(c.strip() for c in args.by.split(",") if c.strip())
    bad = [c for c in by if c not in episodes.columns]
    if bad:
        raise SafeVLAError(f"--by: unknown column {bad[0]!r}; valid columns: {', '.join(episodes.columns)}")
    tables = build_tables(episodes, spec_results, registry=load_registry(), by=by, seed=args.seed)
    out = Path(args.out) if args.out else Path(args.store) / "report"
    paths = write_tables(tables, out)
    print(f"wrote {len(paths)} files to {out}")
    from scoring.metrics import unsettled_mask
    unsettled = int(unsettled_mask(episodes).sum())
    if unsettled:
        print(f"note: {unsettled} of {len(episodes)} episodes left out of every table: the scene was not at rest "
              f"at step 0 (episodes.settled = false; see the table footnotes)")
    return 0


def _dashboard_parser(sub) -> None:
    p = sub.add_parser("dashboard", help="open the Streamlit dashboard (default: the bundled demo store)")
    p.add_argument("store", nargs="?", default=None, help="run store directory (default: assets/demo/store)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--headless", action="store_true", help="do not open a browser")
    p.set_defaults(func=run_dashboard)


def run_dashboard(args) -> int:
    if importlib.util.find_spec("streamlit") is None:
        raise SafeVLAError("the dashboard needs Streamlit: pip install 'safevla-bench[dashboard]'")
    store = Path(args.store) if args.store else DEMO_STORE
    if not store.is_dir():
        raise SafeVLAError(f"run store {str(store)!r} does not exist")
    app = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(args.port),
           "--browser.gatherUsageStats", "false"]
    if args.headless:
        cmd += ["--server.headless", "true"]
    cmd += ["--", "--store", str(store)]
    return subprocess.call(cmd, env={**os.environ})


def _optional(sub, module: str, register: str, names: list[str], extra: str) -> None:
    """Registers the subcommands of an optional part, or stubs that say what to install."""
    try:
        mod = importlib.import_module(module)
        getattr(mod, register)(sub)
    except ImportError as exc:
        for name in names:
            p = sub.add_parser(name, help=f"(needs safevla-bench[{extra}])")
            p.set_defaults(func=_missing(name, extra, exc))


def _missing(name: str, extra: str, exc: Exception):
    def run(_args) -> int:
        raise SafeVLAError(f"'safevla {name}' needs optional dependencies ({exc}); "
                           f"install them with: pip install 'safevla-bench[{extra}]'")
    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="safevla", description="SafeVLA-Bench: success-safety gap of robot policies.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _score_parser(sub)
    _report_parser(sub)
    _optional(sub, "replay.rollout", "add_rollout_parser", ["rollout"], "libero")
    _optional(sub, "replay.cli", "add_replay_parsers", ["replay", "figure"], "replay")
    _optional(sub, "scoring.compare_cli", "add_compare_parser", ["compare"], "dev")
    _dashboard_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SafeVLAError as exc:
        print(f"safevla {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"safevla {args.command}: interrupted; finished work is kept, re-run to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
