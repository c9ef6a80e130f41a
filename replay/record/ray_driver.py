"""The driver of `safevla rollout --engine ray`: hands episodes to env workers, lands their records.

It plants the archive marker (`replay.record.ray_transport`), connects (`scoring.store.ray_connect`),
starts the policy server and the env workers (`replay.record.ray_engine`), and gives each free
worker the next episode, keeping a worker on its task while that task has episodes left.
Records that a worker shipped back (no shared filesystem) are written here. A worker
that is gone for good (its restarts used up, e.g. its node was lost and no other node
had room) gives its episode back to the queue for the others. Progress counts episodes
from every node, and the summary says which node and which worker did what.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scoring.errors import SafeVLAError


@dataclasses.dataclass
class RayRolloutResult:
    outcomes: list  # EpisodeOutcome
    worker_stats: dict[str, dict]
    server_stats: dict
    wall_s: float
    node_stats: dict[str, dict] = dataclasses.field(default_factory=dict)


def _check_jobs(jobs: Sequence[tuple]) -> tuple[dict, list[tuple[str, int, int]]]:
    kw = None
    episodes = []
    for suite, task, eps, kwargs in jobs:
        if kw is None:
            kw = dict(kwargs)
        elif dict(kwargs) != kw:
            raise SafeVLAError("--engine ray runs one policy and one archive per invocation")
        episodes.extend((suite, int(task), int(k)) for k in eps)
    return kw or {}, episodes


class _Dispatcher:
    """Which worker runs which episode next: one task per worker at a time, big tasks first."""

    def __init__(self, todo: Sequence[tuple[str, int, int]], n_workers: int):
        self.remaining: dict[tuple[str, int], list[int]] = defaultdict(list)
        for s, t, k in todo:
            self.remaining[(s, t)].append(k)
        self.current: dict[int, tuple[str, int] | None] = {i: None for i in range(n_workers)}

    def next_for(self, i: int) -> tuple[str, int, int] | None:
        key = self.current[i]
        if key is None or not self.remaining.get(key):
            # more workers than tasks is fine: a worker without a task of its own joins the
            # task with the most episodes left (and builds its own env for it)
            busy = {self.current[j] for j in self.current if j != i}
            free = [k for k, v in self.remaining.items() if v and k not in busy]
            pool = free or [k for k, v in self.remaining.items() if v]
            if not pool:
                return None
            key = max(pool, key=lambda k: len(self.remaining[k]))
            self.current[i] = key
        return key[0], key[1], self.remaining[key].pop(0)

    def give_back(self, i: int, job: tuple[str, int, int]) -> None:
        self.remaining[(job[0], job[1])].insert(0, job[2])
        self.current.pop(i, None)


def run_jobs_ray(jobs: Sequence[tuple], *, workers: int, address: str | None = None, progress: bool = True,
                 on_result: Callable[[Any, list], None] | None = None,
                 server_options: dict | None = None, worker_options: dict | None = None,
                 max_batch: int = 64, max_wait_s: float | None = None, summary: bool = True) -> RayRolloutResult:
    """Runs the same (suite, task, episodes, run_task kwargs) jobs as `rollout.run_jobs`, on Ray.

    `on_result(outcome, workers)` is called on the driver after every episode (tests use
    it to kill a worker or remove a node mid-run). Episodes already in the archive are skipped.
    """
    from tqdm import tqdm

    from replay.record import ray_engine
    from replay.record.observations import requested_spec
    from replay.record.policies import describe_policy, load_policy
    from replay.record.ray_transport import NOWHERE, land, land_uri, plant_marker, remove_marker
    from replay.record.rollout import episode_path
    from scoring.store.uri import existing, is_uri, join, open_uri
    ray = ray_engine._ray()
    kw, episodes = _check_jobs(jobs)
    policy_options = kw.get("policy_options") or {}
    name, factory = load_policy(kw["policy_spec"], **policy_options)
    model = kw.get("model") or name
    observations = kw.get("observations") or requested_spec(factory)
    provenance = describe_policy(kw["policy_spec"], factory, observations)
    from replay.record.protocols import load_protocol
    archive, protocol = kw["archive"], kw.get("protocol") or load_protocol()
    if protocol.init_states != "sequential":
        raise SafeVLAError(f"--protocol {protocol.name}: its init state for episode k depends on the outcomes of "
                           "episodes 0..k-1, which --engine ray runs side by side; use the local engine")
    if is_uri(archive):  # object storage every node reaches: records go there through the driver
        filesystem, root = open_uri(archive)
        there = existing(filesystem, [join(root, episode_path("", *e[:2], model, e[2])) for e in episodes])
        done = [e for e in episodes if join(root, episode_path("", *e[:2], model, e[2])) in there]
    else:
        filesystem = root = None
        done = [e for e in episodes if episode_path(archive, e[0], e[1], model, e[2]).exists()]
    done_set = set(done)
    todo = [e for e in episodes if e not in done_set]
    outcomes = [ray_engine.EpisodeOutcome(str(episode_path(archive, s, t, model, k)), s, t, k, None, 0, True, "-",
                                          0, 0, 0) for s, t, k in done]
    t_start = time.perf_counter()
    marker = None if not todo else NOWHERE if filesystem is not None else plant_marker(archive)
    started = False
    server = wlist = None
    try:
        started = ray_engine.ensure_ray(address) if todo else False
        n = max(1, min(int(workers), len(todo) or 1))
        if todo:
            server = ray_engine.policy_server_actor(kw["policy_spec"], options=server_options, max_batch=max_batch,
                                                    max_wait_s=max_wait_s, max_concurrency=max(64, 2 * n + 8),
                                                    policy_options=policy_options)
            server_name = ray.get(server.name.remote())
            wlist = ray_engine.env_worker_actors(n, server_name, archive=archive, policy_spec=kw["policy_spec"],
                                                 protocol=protocol, model=model,
                                                 options=worker_options, marker=marker,
                                                 host_options=observations.host_options(), provenance=provenance)
            plan = _Dispatcher(todo, len(wlist))
            inflight: dict[Any, tuple[int, tuple]] = {}
            lost: set[int] = set()
            per_node: Counter = Counter()
            recorded: set[tuple] = set()
            gone = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)

            def submit(i: int) -> None:
                job = plan.next_for(i)
                if job is not None:
                    # a lost policy server surfaces in the worker as an actor error: Ray
                    # retries the episode (the server restarts under the same name)
                    inflight[wlist[i].run.options(retry_exceptions=list(gone)).remote(*job)] = (i, job)

            for i in range(len(wlist)):
                submit(i)
            with tqdm(total=len(episodes), initial=len(done), unit="ep", disable=not progress,
                      desc="rollout (ray)") as bar:
                while inflight:
                    ready, _ = ray.wait(list(inflight), num_returns=1)
                    i, job = inflight.pop(ready[0])
                    try:
                        out = ray.get(ready[0])
                    except ray.exceptions.RayTaskError as exc:  # e.g. a policy server that is down: one line
                        raise ray_engine._plain_cause(exc) from None
                    except gone as exc:
                        # restarts used up: the episode goes to the workers that are left
                        lost.add(i)
                        plan.give_back(i, job)
                        live = [j for j in range(len(wlist)) if j not in lost]
                        if not live:
                            raise SafeVLAError(f"every env worker was lost (last: {' '.join(str(exc).split())[:160]})")
                        busy = {j for j, _ in inflight.values()}
                        for j in live:
                            if j not in busy:
                                submit(j)
                        continue
                    key = (out.suite, out.task, out.episode)
                    if out.shipped is not None:
                        if filesystem is not None:
                            land_uri(filesystem, root, out.shipped)
                        else:
                            land(archive, out.shipped)
                        out = dataclasses.replace(out, shipped=True)  # the bytes are written; keep the fact
                    if key in recorded:  # an episode Ray re-ran after its first result arrived
                        submit(i)
                        continue
                    recorded.add(key)
                    outcomes.append(out)
                    per_node[out.node] += 1
                    bar.update(1)
                    bar.set_postfix_str(", ".join(f"{node}: {c}" for node, c in sorted(per_node.items())),
                                        refresh=False)
                    if on_result is not None:
                        on_result(out, wlist)
                    submit(i)
        stats = ray.get(server.stats.remote()) if server is not None else {}
    finally:
        for actor in [*(wlist or []), *([server] if server is not None else [])]:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass
        remove_marker(marker)
        if started:
            ray.shutdown()
    wall = time.perf_counter() - t_start
    result = RayRolloutResult(outcomes, worker_summary(outcomes), stats, wall, node_summary(outcomes))
    if summary:
        print_summary(result, total=len(episodes), file=sys.stderr)
    return result


def worker_summary(outcomes: Sequence) -> dict[str, dict]:
    per: dict[str, dict] = {}
    for o in outcomes:
        if o.skipped:
            continue
        w = per.setdefault(o.worker, {"episodes": 0, "steps": 0, "busy_s": 0.0, "build_s": 0.0,
                                      "policy_wait_s": 0.0, "nodes": []})
        w["episodes"] += 1
        w["steps"] += o.steps
        w["busy_s"] += o.seconds
        w["build_s"] += o.build_s
        w["policy_wait_s"] += o.policy_wait_s
        if o.node and o.node not in w["nodes"]:
            w["nodes"].append(o.node)  # a worker restarted elsewhere ran on several nodes
    for w in per.values():
        run = max(w["busy_s"] - w["build_s"], 1e-9)
        w["episodes_per_s"] = w["episodes"] / max(w["busy_s"], 1e-9)
        w["steps_per_s"] = w["steps"] / run
    return dict(sorted(per.items()))


def node_summary(outcomes: Sequence) -> dict[str, dict]:
    """Per node: episodes, steps, the workers that ran there, and how records reached the archive."""
    per: dict[str, dict] = {}
    for o in outcomes:
        if o.skipped:
            continue
        n = per.setdefault(o.node or "?", {"episodes": 0, "steps": 0, "workers": [], "shipped": 0, "in_place": 0})
        n["episodes"] += 1
        n["steps"] += o.steps
        n["shipped" if o.shipped else "in_place"] += 1
        if o.worker not in n["workers"]:
            n["workers"].append(o.worker)
    for n in per.values():
        n["workers"].sort()
    return dict(sorted(per.items()))


def print_summary(result: RayRolloutResult, *, total: int, file=sys.stderr) -> None:
    from replay.record.rollout import summary_line, time_split

    ran = sum(not o.skipped for o in result.outcomes)
    print(f"{summary_line(result.outcomes, total, result.wall_s)} ({ran / max(result.wall_s, 1e-9):.2f} episodes/s)"
          f"{time_split(result.outcomes)}", file=file)
    for node, n in result.node_stats.items():
        how = ", ".join(part for part in (f"{n['in_place']} written in place" if n["in_place"] else "",
                                          f"{n['shipped']} shipped to the driver" if n["shipped"] else "") if part)
        print(f"  node {node}: {n['episodes']} episodes, {n['steps']} steps by {', '.join(n['workers'])} ({how})",
              file=file)
    for name, w in result.worker_stats.items():
        print(f"  worker {name}: {w['episodes']} episodes, {w['steps']} steps, {w['episodes_per_s']:.2f} ep/s, "
              f"{w['steps_per_s']:.0f} steps/s (env build {w['build_s']:.0f} s, policy wait "
              f"{w['policy_wait_s']:.1f} s)", file=file)
    s = result.server_stats
    if s:
        print(f"  policy server: {s['requests']} requests in {s['batches']} batches, mean batch "
              f"{s['mean_batch']:.2f}, {s['requests_per_s']:.0f} requests/s", file=file)

