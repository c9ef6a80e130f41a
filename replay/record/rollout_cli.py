"""`safevla rollout`: the subcommand's arguments and their checks, and the choice of engine.

The episodes themselves run in `replay.record.rollout` (the local process pool) or
`replay.record.ray_engine` (Ray actors). Both engines import `replay.record.rollout`; only this module
picks between them, so neither engine imports the other.
"""

from __future__ import annotations

import argparse
import sys

from replay.record.hosts.libero import BASE_SUITES, REFUSED, SUITES
from replay.record.observations import DEFAULT_IMAGE_SIZE, parse_cameras, parse_image_size, requested_spec
from replay.record.policies import load_policy
from replay.record.policy_files import absolute_spec
from replay.record.protocols import ProtocolError, load_protocol, protocol_names
from replay.record.rollout import run_jobs
from scoring.errors import SafeVLAError


def parse_episodes(text: str) -> list[int]:
    """'20' -> episodes 0..19; '5-9' or '0,3,5' -> those episodes."""
    text = str(text).strip()
    if text.isdigit():
        if int(text) < 1:
            raise SafeVLAError(f"--episodes expects a positive count or indices like 5-9; got {text!r}")
        return list(range(int(text)))
    return parse_tasks(text, flag="--episodes")


def parse_tasks(text: str, *, flag: str = "--tasks") -> list[int]:
    """'0-9', '0,3,5' or '2' -> sorted task indices."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            elif part:
                out.add(int(part))
    except ValueError:
        raise SafeVLAError(f"{flag} expects indices like 0-9 or 0,3,5; got {text!r}") from None
    if not out or min(out) < 0:
        raise SafeVLAError(f"{flag} expects non-negative indices; got {text!r}")
    return sorted(out)


def suite_listing() -> str:
    """Which suites run, and one line per refused suite naming what is missing."""
    import textwrap
    variants = [s for s in SUITES if s not in BASE_SUITES]
    lines = ["suites that run:", textwrap.fill(", ".join(BASE_SUITES), 100, initial_indent="  ",
                                                   subsequent_indent="  "),
             textwrap.fill(", ".join(variants), 100, initial_indent="  ", subsequent_indent="  "),
             "suites refused (what is missing):"]
    lines += [f"  {s}: {why}" for s, why in REFUSED.items()]
    return "\n".join(lines)


def add_rollout_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rollout", help="run a policy on LIBERO tasks and record trajectory archives",
        description="Run a policy on LIBERO under a reference harness's protocol (OpenPI's LIBERO loop by "
                    "default: its seeds, wait steps, horizons and init states, so the SR equals the harness's) and "
                    "record one .npz per episode. Re-running skips episodes already recorded.",
        epilog=suite_listing(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, metavar="SUITE",
                   help="LIBERO suite: libero_spatial, libero_object, libero_goal, libero_10, libero_90, or a "
                        "runnable LIBERO-PRO variant (listed below; docs/libero.md, 'Perturbation suites')")
    p.add_argument("--tasks", default="0-9", help="task indices, e.g. 0-9 or 0,3,5 (default 0-9)")
    p.add_argument("--episodes", default="20",
                   help="episodes per task: a count N (episodes 0..N-1) or indices such as 5-9 or 0,3 (default 20); "
                        "episode k is the protocol's episode k whatever else runs")
    p.add_argument("--protocol", choices=protocol_names(), default=load_protocol().name,
                   help="rollout protocol (default openpi: OpenPI's LIBERO loop; lerobot: LeRobot 0.4.4's "
                        "lerobot-eval; settled: OpenPI's with no-op steps until the scene rests, a departure). "
                        "See docs/libero.md")
    p.add_argument("--policy", required=True,
                   help="scripted profile (careful, hasty, sloppy); your own policy as module:callable or "
                        "path/to/file.py:callable (from the current directory); or a served model: "
                        "openpi://HOST:PORT (docs/libero.md)")
    p.add_argument("--replan-steps", type=int, default=None,
                   help="actions executed from each chunk before asking again (openpi://; default: the protocol's, "
                        "5 for openpi, the checkpoint's n_action_steps for lerobot)")
    p.add_argument("--policy-timeout", type=float, default=600.0,
                   help="seconds to wait for a policy server's answer (openpi://; default 600: a first request "
                        "may include the model's compile)")
    p.add_argument("--policy-wait", type=float, default=0.0,
                   help="seconds to wait for a policy server that is still starting (openpi://; default 0)")
    p.add_argument("--image-size", default=str(DEFAULT_IMAGE_SIZE[0]),
                   help="camera image size, N or HxW pixels (default 256: LIBERO's evaluation setting)")
    p.add_argument("--cameras", default=None,
                   help="cameras to render: agentview,wrist or none (default: what the policy asks for; "
                        "scripted profiles ask for none)")
    p.add_argument("--out", required=True, help="archive directory")
    p.add_argument("--workers", type=int, default=1, help="worker processes, one LIBERO env each (default 1)")
    p.add_argument("--seed", type=int, default=None,
                   help="override the protocol's seed (openpi: env.seed(7) once per task; lerobot: 1000+k)")
    p.add_argument("--max-steps", type=int, default=None, help="override the protocol's horizon for the suite")
    p.add_argument("--model-name", default=None, help="model name recorded in meta.model (default from --policy)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local process pool (default) or Ray actors: env workers + a policy server (docs/cluster.md)")
    p.add_argument("--address", default=None, help="Ray cluster address for --engine ray (default: start Ray locally)")
    p.add_argument("--num-gpus", type=float, default=None,
                   help="GPUs for the Ray policy-server actor (--engine ray; default: the policy's own "
                        "ray_actor_options, else 0)")
    p.set_defaults(func=run_rollout)
    return p


def run_rollout(args) -> int:
    if args.suite in REFUSED:
        raise SafeVLAError(f"--suite {args.suite}: does not run: {REFUSED[args.suite]}")
    if args.suite not in SUITES:
        raise SafeVLAError(f"--suite {args.suite}: unknown LIBERO suite; `safevla rollout --help` lists the "
                           "suites that run")
    spec = absolute_spec(args.policy)  # workers may start in another directory
    try:
        protocol = load_protocol(args.protocol).override(seed=args.seed, max_steps=args.max_steps,
                                                          replan_steps=args.replan_steps)
    except ProtocolError as exc:
        raise SafeVLAError(f"--protocol: {exc}") from None
    options = {"replan_steps": protocol.replan_steps, "timeout_s": args.policy_timeout, "wait_s": args.policy_wait}
    try:
        name, factory = load_policy(spec, **options)
    except ValueError as exc:
        raise SafeVLAError(f"--policy: {exc}") from None
    try:
        cameras = None if args.cameras is None else parse_cameras(args.cameras)
        observations = requested_spec(factory, image_size=parse_image_size(args.image_size), cameras=cameras)
    except ValueError as exc:
        raise SafeVLAError(f"--cameras/--image-size: {exc}") from None
    episodes = parse_episodes(args.episodes)
    if args.workers < 1:
        raise SafeVLAError(f"--workers expects a positive integer, got {args.workers}")
    if args.max_steps is not None and args.max_steps < 1:
        raise SafeVLAError(f"--max-steps expects a positive integer, got {args.max_steps}")
    if args.replan_steps is not None and args.replan_steps < 1:
        raise SafeVLAError(f"--replan-steps expects a positive integer, got {args.replan_steps}")
    tasks = parse_tasks(args.tasks)
    from scoring.store.uri import is_uri
    if is_uri(args.out) and getattr(args, "engine", "local") != "ray":
        raise SafeVLAError(f"--out {args.out}: a storage URI needs --engine ray (the local engine writes a directory)")
    try:
        from replay.record.hosts.libero import libero_task
        infos = [libero_task(args.suite, t) for t in tasks]
    except ImportError as exc:
        raise SafeVLAError(f"LIBERO is not installed ({exc}); pip install 'safevla-bench[libero]'") from None
    except ValueError as exc:
        raise SafeVLAError(f"--tasks: {exc}") from None
    short = min(i.n_init_states for i in infos)
    if max(episodes) >= short:
        raise SafeVLAError(f"--episodes {args.episodes}: LIBERO has only {short} init states per task "
                           f"(episodes 0-{short - 1})")
    departure = protocol.departure_line()
    if departure:
        print(f"safevla rollout: {departure}", file=sys.stderr)
    kwargs = {"policy_spec": spec, "archive": args.out, "protocol": protocol,
              "model": args.model_name or name, "policy_options": options, "observations": observations}
    jobs = [(args.suite, t, episodes, kwargs) for t in tasks]
    if getattr(args, "engine", "local") == "ray":
        from replay.record.ray_driver import run_jobs_ray  # Ray stays optional: imported only here
        gpus = getattr(args, "num_gpus", None)
        run_jobs_ray(jobs, workers=args.workers, address=args.address, progress=not args.no_progress,
                     server_options=None if gpus is None else {"num_gpus": gpus})
    else:
        run_jobs(jobs, workers=args.workers, progress=not args.no_progress)
    return 0
