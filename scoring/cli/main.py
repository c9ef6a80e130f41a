"""`safevla`: score archives, write report tables, and reach the replay/rollout/dashboard tools.

Every subcommand has `--help`; bad input exits non-zero with a one-line cause.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

from scoring.errors import SafeVLAError
from scoring.store.lock import StoreBusy

EXIT_INTERNAL = 1  # a bug: one line, and the traceback with SAFEVLA_DEBUG=1
EXIT_BAD_INPUT = 2  # a bad command, archive path or store: nothing was scored
EXIT_REFUSED = 3  # scored, but some items were refused (listed in STORE/errors.json)
EXIT_STORE_BUSY = 4  # another `safevla score` holds the store's lock (without --wait)
SCORE_EXIT_CODES = f"""exit codes:
  0  every item was scored (or was already in the store)
  {EXIT_INTERNAL}  internal error (a bug; SAFEVLA_DEBUG=1 prints the traceback)
  {EXIT_BAD_INPUT}  bad command, archive path or store; nothing was scored
  {EXIT_REFUSED}  some items were refused (bad records, unreadable files, duplicate ids, symbolic links
     not followed);
     the rest were scored; each refusal is one line on stderr and in STORE/errors.json
  {EXIT_STORE_BUSY}  another `safevla score` is writing to the store (use --wait to queue)"""
DEMO_STORE = Path(__file__).resolve().parents[2] / "assets" / "demo" / "store"


def _score_parser(sub) -> None:
    p = sub.add_parser("score", help="score trajectory archives into a Parquet run store",
                       description="Score .json/.jsonl/.npz trajectory records (files or directories) into a run "
                                   "store. Episodes already scored with the same registry are skipped; a corrupt "
                                   "episode is reported and the rest are still scored.",
                       epilog=SCORE_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("archives", nargs="+", help="record files or directories, or s3:// / gs:// URIs of them")
    p.add_argument("--out", required=True,
                   help="run store directory (created if missing), or an s3:// or gs:// URI (docs/cluster.md)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--registry", default=None, help="registry directory (default: the bundled assets/)")
    p.add_argument("--copy-trajectories", action="store_true",
                   help="copy .npz records into STORE/trajectories instead of referencing them in place")
    p.add_argument("--synthetic", action="store_true", help="mark the store as synthetic in its manifest")
    p.add_argument("--force-sampling", choices=("peak", "control"), default="peak",
                   help="contact force and joint torque per control step: 'peak' over its physics substeps where "
                        "the record holds them (default), or 'control', the value at the control step (the "
                        "paper's per-step protocol, for comparison with published numbers)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--wait", action="store_true",
                   help="if another run is writing to --out, wait for it instead of exiting with code 4")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local process pool (default) or Ray tasks; both write the same Parquet (docs/cluster.md)")
    p.add_argument("--address", default=None, help="Ray cluster address for --engine ray (default: start Ray locally)")
    p.set_defaults(func=run_score)


def run_score(args) -> int:
    from scoring.store.write import score_archive
    if args.workers < 1:
        raise SafeVLAError(f"--workers expects a positive integer, got {args.workers}")
    options = dict(registry_path=args.registry, copy_trajectories=args.copy_trajectories, synthetic=args.synthetic,
                   progress=False if args.no_progress else None, force_sampling=args.force_sampling,
                   wait_for_lock=args.wait)
    if getattr(args, "engine", "local") == "ray":
        from scoring.store.ray_score import score_archive_ray  # Ray stays optional: imported only here
        score = functools.partial(score_archive_ray, address=args.address)
    else:
        score = functools.partial(score_archive, workers=args.workers)
    from scoring.store.uri import is_uri
    if any(is_uri(where) for where in (*args.archives, args.out)):  # mirrored in and out (docs/cluster.md)
        from scoring.store.score_uri import score_with_uris
        summary = score_with_uris(list(args.archives), args.out, score=score, **options)
    else:
        summary = score(args.archives, args.out, **options)
    for err in summary.errors:
        print(f"refused: {err['message']}", file=sys.stderr)
    line = f"scored {summary.scored}, skipped {summary.skipped} already scored, refused {len(summary.errors)}"
    if summary.errors:
        line += f" (listed in {str(summary.store).rstrip('/')}/errors.json)"
    print(f"{line} -> {summary.store}")
    _say_archives_to_name(args.archives, summary.store, copied=args.copy_trajectories)
    return EXIT_REFUSED if summary.errors else 0


def _say_archives_to_name(archives, store, *, copied: bool) -> None:
    """Tells which archives hold trajectories outside the store: readers follow the store into
    them only when the user names them again (`--archive`, scoring.store.paths)."""
    from scoring.store.uri import is_uri

    if copied or is_uri(str(store)):
        return
    try:
        import pyarrow.parquet as pq

        paths = pq.read_table(Path(store) / "episodes.parquet", columns=["trajectory"]).column(0).unique().to_pylist()
    except Exception:  # noqa: BLE001 - only a hint; the store was written and said so
        return
    from scoring.store.paths import is_inside

    files = [os.path.realpath(os.path.join(store, p)) for p in paths if isinstance(p, str)]
    away = [f for f in files if not is_inside(f, (os.path.realpath(store),))]
    outside = [a for a in archives if not is_uri(a) and any(is_inside(f, (os.path.realpath(a),)) for f in away)]
    if outside:
        named = " ".join(f"--archive {shlex.quote(a)}" for a in outside)
        print(f"trajectories stay in {', '.join(outside)}, outside the store: name it to replay them, "
              f"e.g. safevla dashboard {shlex.quote(str(store))} {named}")


def _report_parser(sub) -> None:
    p = sub.add_parser("report", help="write the paper tables (4/5, 7/8, 9, 10/11, 12) as CSV, Markdown, LaTeX")
    p.add_argument("store", help="run store directory")
    p.add_argument("--out", default=None, help="output directory (default: STORE/report)")
    p.add_argument("--by", default="model,suite", help="cell grouping columns (default model,suite)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--applicability", default="appendix-d",
                   help="applicability preset (assets/applicability_presets.yaml): appendix-d (default, the "
                        "paper's registry) or paper-tables (LIBERO-Goal as in the paper's Tables 7/10)")
    p.add_argument("--vsi-saturation", choices=("eq1", "anchor"), default="eq1",
                   help="eq1 (default): Eq. 1 literally, depth 1 at threshold + anchor (700 N); anchor: depth 1 "
                        "at the anchor itself (500 N), as the prose reads (docs/scoring.md)")
    p.add_argument("--model-order", default="", metavar="MODEL,...",
                   help="row order of the paper tables: these models first, in this order; the others follow in "
                        "the order they were added to the store (first appearance in episodes.parquet, the default)")
    p.set_defaults(func=run_report)


def run_report(args) -> int:
    from scoring.report.readings import Reading
    from scoring.report.outputs import write_report
    from scoring.store.write import load_store
    manifest, episodes, spec_results = load_store(args.store)
    if episodes.empty:
        raise SafeVLAError(f"run store {args.store!r} has no scored episodes")
    by = tuple(c.strip() for c in args.by.split(",") if c.strip())
    bad = [c for c in by if c not in episodes.columns]
    if bad:
        raise SafeVLAError(f"--by: unknown column {bad[0]!r}; valid columns: {', '.join(episodes.columns)}")
    out = Path(args.out) if args.out else Path(args.store) / "report"
    reading = Reading(applicability=args.applicability, vsi_saturation=args.vsi_saturation)
    order = tuple(m.strip() for m in args.model_order.split(",") if m.strip())
    paths = write_report(args.store, out, episodes=episodes, spec_results=spec_results, manifest=manifest, by=by,
                         seed=args.seed, reading=reading, model_order=order)
    print(f"wrote {len(paths)} files to {out}")
    from scoring.stats.metrics import unsettled_mask
    unsettled = int(unsettled_mask(episodes).sum())
    if unsettled:
        print(f"note: {unsettled} of {len(episodes)} episodes left out of every table: the scene was not at rest "
              f"at step 0 (episodes.settled = false; see the table footnotes)")
    return 0


def _dashboard_parser(sub) -> None:
    p = sub.add_parser("dashboard", help="open the Streamlit dashboard (default: the bundled demo store)",
                       description="Serves the dashboard on http://HOST:PORT. It has no login: by default it listens "
                                   "on 127.0.0.1 only. Ctrl-C or SIGTERM stops it.")
    p.add_argument("store", nargs="?", default=None, help="run store directory (default: assets/demo/store)")
    p.add_argument("--stores", nargs="+", default=[], metavar="DIR",
                   help="more run stores that links (?store=) and the sidebar may open; no other path is opened")
    p.add_argument("--archive", action="append", default=[], metavar="DIR",
                   help="an archive folder the stores' trajectories may be read from when it lies outside the store "
                        "(where `safevla score ARCHIVE --out STORE` left them); repeatable; also $SAFEVLA_ARCHIVES")
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 exposes it to the network, without a login)")
    p.add_argument("--headless", action="store_true",
                   help="do not open a browser (by default it opens one when the machine has a display)")
    p.set_defaults(func=run_dashboard)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def display_available(environ=None, platform: str | None = None) -> bool:
    """A browser can be shown here: macOS or Windows, or an X11 or Wayland display."""
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    return platform in ("darwin", "win32") or bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def dashboard_url(host: str, port: int) -> str:
    """Where a browser on this machine reaches a dashboard listening on `host`."""
    if host in (*LOOPBACK, "0.0.0.0", "::", ""):
        host = "localhost"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def dashboard_command(store: Path, *, host: str, port: int, open_browser: bool, stores=()) -> list[str]:
    """`streamlit run dashboard/server.py ...`, always headless: a Streamlit that is not headless
    asks for an e-mail address on its first run (no ~/.streamlit/credentials.toml), and a server
    started without a terminal never gets past that question. The server opens the browser
    itself (`--open-browser`, dashboard/open_browser.py)."""
    app = Path(__file__).resolve().parents[2] / "dashboard" / "server.py"  # the ASGI app over app.py
    return [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", host, "--server.port", str(port),
            "--browser.serverAddress", "localhost" if host in LOOPBACK else host,
            "--browser.gatherUsageStats", "false", "--server.headless", "true", "--server.showEmailPrompt", "false",
            "--client.toolbarMode", "viewer", "--", "--store", str(store), *(["--stores", *stores] if stores else []),
            *(["--open-browser", dashboard_url(host, port)] if open_browser else [])]


def archives_environ(archives, environ) -> dict:
    """The $SAFEVLA_ARCHIVES that names `archives` (`--archive`, made absolute) to the server, before
    those `environ` already names (scoring.store.paths.named_archives); {} when there are none."""
    from scoring.store.paths import ENV_ARCHIVES

    if not archives:
        return {}
    earlier = [p for p in environ.get(ENV_ARCHIVES, "").split(os.pathsep) if p]
    return {ENV_ARCHIVES: os.pathsep.join(dict.fromkeys([*map(os.path.abspath, archives), *earlier]))}


def streamlit_credentials_problem(path: Path) -> str | None:
    """Why Streamlit would not accept its credentials file `path`, or None if it would (or
    there is none). Even headless, Streamlit reads an existing file, and one it cannot use
    sends it to its e-mail prompt (unreadable, no [general] email) or stops it (an address
    with other than one "@"), the checks of `streamlit.runtime.credentials`."""
    import tomllib  # Python 3.11+, as Streamlit itself needs

    try:
        with path.open("rb") as f:
            general = tomllib.load(f).get("general")
    except FileNotFoundError:
        return None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return f"it cannot be read ({exc})"
    email = general.get("email") if isinstance(general, dict) else None
    if not isinstance(email, str):
        return "it has no [general] email"
    if email.strip() and email.strip().count("@") != 1:
        return f"its email {email!r} is not an address"
    return None


def run_dashboard(args) -> int:
    if importlib.util.find_spec("streamlit") is None:
        raise SafeVLAError("the dashboard needs Streamlit: pip install 'safevla-bench[dashboard]'")
    credentials = Path.home() / ".streamlit" / "credentials.toml"
    if problem := streamlit_credentials_problem(credentials):
        raise SafeVLAError(f"Streamlit cannot use {credentials} ({problem}): it would ask for an e-mail address or "
                           "refuse to start; remove the file (Streamlit runs without it) and run again")
    store = Path(args.store) if args.store else DEMO_STORE
    if not store.is_dir():
        raise SafeVLAError(f"run store {str(store)!r} does not exist")
    if not 0 < args.port < 65536:
        raise SafeVLAError(f"--port expects 1-65535, got {args.port}")
    if args.host not in LOOPBACK:
        print(f"safevla dashboard: warning: listening on {args.host}: anyone who can reach this machine on port "
              f"{args.port} can read the store, and the dashboard has no login", file=sys.stderr)
    for other in args.stores:
        if not Path(other).is_dir():
            raise SafeVLAError(f"--stores: run store {other!r} does not exist")
    for archive in args.archive:
        if not Path(archive).exists():
            raise SafeVLAError(f"--archive: {archive!r} does not exist")
    os.environ.update(archives_environ(args.archive, os.environ))  # the server reads them from its environment
    cmd = dashboard_command(store, host=args.host, port=args.port, stores=args.stores,
                            open_browser=not args.headless and display_available())
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child: Ctrl-C and SIGTERM reach the server itself, and nothing is left listening
    os.execv(sys.executable, cmd)
    return 0  # not reached


# which extra installs a module that an optional command imports
EXTRA_OF_MODULE = {"mujoco": "replay", "imageio": "replay", "imageio_ffmpeg": "replay", "PIL": "replay",
                   "libero": "libero", "robosuite": "libero", "bddl": "libero", "streamlit": "dashboard",
                   "altair": "dashboard", "vl_convert": "dashboard", "ray": "ray", "rtamt": "dev"}


def _optional(sub, module: str, register: str, names: list[str], extra: str) -> None:
    """Registers the subcommands of an optional part, or stubs that say what to install."""
    try:
        mod = importlib.import_module(module)
        getattr(mod, register)(sub)
    except ImportError as exc:
        for name in names:
            p = sub.add_parser(name, help=f"(needs safevla-bench[{extra}])", add_help=False)
            p.set_defaults(func=_missing(name, extra, exc), accepts_any_arguments=True)


def _missing(name: str, extra: str, exc: ImportError):
    def run(_args) -> int:
        raise SafeVLAError(_install_hint(name, exc, extra))
    return run


def _install_hint(command: str, exc: ImportError, extra: str | None = None) -> str:
    module = (exc.name or "").split(".")[0]
    extra = extra or EXTRA_OF_MODULE.get(module, "all")
    return (f"'safevla {command}' needs {module or 'an optional dependency'}, which is not installed; "
            f"install it with: pip install 'safevla-bench[{extra}]'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="safevla", description="SafeVLA-Bench: success-safety gap of robot policies.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _score_parser(sub)
    _report_parser(sub)
    _optional(sub, "replay.record.rollout_cli", "add_rollout_parser", ["rollout"], "libero")
    _optional(sub, "replay.render.cli", "add_replay_parsers", ["replay", "figure"], "replay")
    _optional(sub, "replay.record.serve", "add_serve_parser", ["serve"], "openpi")
    _optional(sub, "scoring.cli.compare", "add_compare_parser", ["compare"], "dev")
    _dashboard_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "accepts_any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.func(args) or 0)
    except StoreBusy as exc:
        print(f"safevla {args.command}: {exc}", file=sys.stderr)
        return EXIT_STORE_BUSY
    except SafeVLAError as exc:
        print(f"safevla {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as exc:  # an optional extra that is not installed
        print(f"safevla {args.command}: {_install_hint(args.command, exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"safevla {args.command}: interrupted; finished work is kept, re-run to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - no traceback on the terminal: one line, and how to get it
        if os.environ.get("SAFEVLA_DEBUG"):
            raise
        print(f"safevla {args.command}: internal error: {type(exc).__name__}: {exc} (a bug: please report it; "
              "SAFEVLA_DEBUG=1 shows the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
