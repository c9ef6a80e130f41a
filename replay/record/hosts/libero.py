"""LIBERO host adapter: builds LIBERO envs, derives body roles, runs recorded episodes.

Each episode follows the host's rollout protocol (`replay.record.protocols`; OpenPI's
LIBERO loop by default):
- numpy's global RNG is put where the harness has it (`ResetRng`), then `env.reset()`
  (which samples fixture and object placements from it) and
  `env.set_init_state(init_states[k])`;
- `wait_steps` no-op steps of the protocol's wait action (zero motion, gripper open). Only
  the `settled` protocol goes on stepping no-ops until every free body rests
  (`replay.record.settle`, capped); the native protocols only observe whether the scene is
  at rest then (`host.start`);
- the policy then acts for at most the protocol's horizon for the suite; the episode
  stops at LIBERO's own success (`done`, which is `env._check_success()`).

Recording starts after the wait steps (record step 0). The wait steps are not recorded;
`actions[0]` is the last wait no-op that produced step 0, and `actions[t]` is the action
of the control step that ended in step t. Objects that are still settling then are
handled in scoring, not by stepping (docs/scoring.md, "Displacement reference").

Roles: robot links `robot0_link0..7` are `robot`; the hand and every `gripper0_*` body
are `gripper`; the root bodies of the objects the BDDL goal moves are `target`
(`goal_targets`: the manipulated objects only); every other movable object, including
destinations and receptacles (plates, baskets), is `bystander`; fixtures and arena
furniture (table, floor) are `furniture`; the robot base, mount and world are `other`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np

from replay.record.hosts.scene_boxes import body_box, surface_under, world_box
from replay.record.observations import CAMERAS, DEFAULT_IMAGE_SIZE, EEF_MAT, ObservationSpec, controller_eef_mat
from replay.record.policy_api import Obstacle, TaskInfo
from replay.record.protocols import Protocol, ResetRng, load_protocol
from replay.record.recorder import Recorder
from replay.record.settle import SettleCriterion, SettleResult, settle
from replay.scene.assets import portable_scene

BASE_SUITES = {"libero_spatial": "libero-spatial", "libero_object": "libero-object",
               "libero_goal": "libero-goal", "libero_10": "libero-10", "libero_90": "libero-90"}


def _variant_suites() -> tuple[dict[str, str], dict[str, str]]:
    """(runnable LIBERO-PRO variant -> benchmark id, refused suite -> what is missing), from
    assets/perturbations.yaml (generated from the installed package)."""
    from scoring.registry.perturbations import load_perturbations
    data = load_perturbations()
    return ({s: p.benchmark for s, p in data.suites.items() if p.runnable},
            {s: p.why_not for s, p in data.suites.items() if not p.runnable})


_VARIANTS, REFUSED = _variant_suites()
#: Every suite `safevla rollout --suite` runs: the five base suites and the runnable variants.
SUITES = {**BASE_SUITES, **_VARIANTS}
CONTROL_DT = 0.05  # LIBERO controls at 20 Hz
EEF_SITE = "gripper0_grip_site"  # the site behind LIBERO's `robot0_eef_pos` observation
ARM_JOINTS = tuple(f"robot0_joint{i}" for i in range(1, 8))
CAMERA = "agentview"


# robosuite warns at import that it has no private macro file: noise for our users, who never
# configure robosuite, and it breaks the rollout progress bar. Only those three lines are dropped.
logging.getLogger("robosuite_logs").addFilter(
    lambda r: not any(k in r.getMessage() for k in ("macro file", "setup_macros.py")))

_BODY_TAG = re.compile(r'<body name="([^"]+)"([^>]*?)(/?)>')
_POS_QUAT = re.compile(r'\s(?:pos|quat)="[^"]*"')


def full_precision_bodies(xml: str, model: mujoco.MjModel) -> str:
    """Rewrites every named body's pos/quat in `xml` with the model's float64 values.

    MuJoCo's XML writer keeps 6 significant digits, which moves a fixture placed at
    y = -0.27763451 by up to 5e-7 m: too close to the 1e-6 replay tolerance.
    """
    def fix(match: re.Match) -> str:
        bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, match.group(1))
        if bid < 0:
            return match.group(0)
        rest = _POS_QUAT.sub("", match.group(2))
        pos = " ".join(repr(float(x)) for x in model.body_pos[bid])
        quat = " ".join(repr(float(x)) for x in model.body_quat[bid])
        return f'<body name="{match.group(1)}" pos="{pos}" quat="{quat}"{rest}{match.group(3)}>'
    return _BODY_TAG.sub(fix, xml)


def benchmark_id(suite: str) -> str:
    """The scoring registry's benchmark id for a LIBERO suite name."""
    if suite in REFUSED:
        raise ValueError(f"LIBERO suite {suite!r} does not run: {REFUSED[suite]}")
    if suite not in SUITES:
        raise ValueError(f"unknown LIBERO suite {suite!r}; supported: {', '.join(SUITES)}")
    return SUITES[suite]


def task_id(index: int) -> str:
    """The registry's task id for the task's index in LIBERO's suite order."""
    return f"task_{int(index)}"


@dataclasses.dataclass(frozen=True)
class LiberoTask:
    """One task of a LIBERO suite, identified as LIBERO and as the scoring registry names it."""

    suite: str
    index: int
    name: str
    language: str
    bddl_file: str
    n_init_states: int

    @property
    def benchmark(self) -> str:
        return benchmark_id(self.suite)

    @property
    def task_id(self) -> str:
        return task_id(self.index)


def _suite(suite: str):
    benchmark_id(suite)  # validates the name
    from libero.libero import benchmark
    with contextlib.redirect_stdout(io.StringIO()):  # LIBERO prints "[info] Applying task order ..." per call
        return benchmark.get_benchmark_dict()[suite]()


def libero_task(suite: str, index: int) -> LiberoTask:
    from libero.libero import get_libero_path
    s = _suite(suite)
    if not 0 <= index < s.n_tasks:
        raise ValueError(f"{suite} has tasks 0..{s.n_tasks - 1}, got {index}")
    t = s.get_task(index)
    bddl = os.path.join(get_libero_path("bddl_files"), t.problem_folder, t.bddl_file)
    n = len(s.get_task_init_states(index))
    return LiberoTask(suite=suite, index=index, name=t.name, language=t.language, bddl_file=bddl, n_init_states=n)


class LiberoHost:
    """One LIBERO env for one task, reused across episodes (building one takes ~9 s).

    `protocol` (default: OpenPI's) decides seeds, wait steps and horizon. `cameras` (short
    names, `replay.record.observations.CAMERAS`) are rendered into every observation at
    `image_size` (height, width); with none, nothing is rendered and no GL context is
    opened. `render_s` accumulates the seconds spent rendering them.
    """

    def __init__(self, suite: str, index: int, *, protocol: Protocol | None = None, cameras: Sequence[str] = (),
                 image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE, settle_criterion: SettleCriterion | None = None):
        from libero.libero.envs import OffScreenRenderEnv
        self.observation_spec = ObservationSpec(cameras=tuple(cameras), image_size=tuple(image_size))
        self.task = libero_task(suite, index)
        self._init_states = _suite(suite).get_task_init_states(index)
        render = {"has_offscreen_renderer": False, "use_camera_obs": False}
        if self.observation_spec.renders:
            h, w = self.observation_spec.image_size
            render = {"has_offscreen_renderer": True, "use_camera_obs": True,
                      "camera_names": [CAMERAS[c] for c in cameras], "camera_heights": h, "camera_widths": w}
        self.env = OffScreenRenderEnv(bddl_file_name=self.task.bddl_file, has_renderer=False, **render)
        self.render_s = 0.0
        self._ready = False
        self._xml = ""
        self._portable_xml: tuple[str | None, str] = (None, "")
        self.protocol = protocol or load_protocol()
        self.rng = ResetRng(self.protocol, seed=self.env.seed, reset=self.env.reset)
        self.settle_criterion = settle_criterion or SettleCriterion(min_steps=self.protocol.wait_steps)
        self.start: SettleResult | None = None  # how the scene was after the last reset()'s wait steps
        self.rng_after_reset: dict | None = None  # numpy's RNG state the last reset() left

    def _time_rendering(self) -> None:
        """Counts camera rendering time; reset rebuilds the sim, so this is re-installed after each."""
        sim = self.env.sim
        if not self.observation_spec.renders or getattr(sim.render, "_safevla_timed", False):
            return
        render = sim.render

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return render(*args, **kwargs)
            finally:
                self.render_s += time.perf_counter() - t0
        timed._safevla_timed = True
        sim.render = timed  # an instance attribute: robosuite looks up `self.sim.render` per frame

    # ------------------------------------------------------------------ episode control

    @property
    def horizon(self) -> int:
        """The most policy steps of an episode of this task under the host's protocol."""
        return self.protocol.horizon(self.task.suite)

    def reset(self, *, init_state: int, episode: int | None = None) -> dict:
        """Starts episode `episode` (default: `init_state`) from LIBERO init state `init_state`.

        Puts numpy's RNG where the protocol's harness has it before that episode's reset,
        resets, applies the init state and takes the protocol's wait steps; returns the obs.
        """
        if not 0 <= init_state < len(self._init_states):
            raise ValueError(f"{self.task.suite} task {self.task.index} has init states "
                             f"0..{len(self._init_states) - 1}, got {init_state}")
        episode = init_state if episode is None else int(episode)
        self.rng.before_reset(episode)
        self.env.reset()
        self.rng_after_reset = self.rng.after_reset(episode)
        self._time_rendering()
        # mj_saveLastXML writes the XML *last loaded in this process*: read it now, while
        # that is this env's (reset reloads the model), not after another host loaded one
        self._xml = full_precision_bodies(self.env.sim.model.get_xml(), self.model)
        obs = self.env.set_init_state(self._init_states[init_state])
        criterion = self.settle_criterion
        if not self.protocol.settle:  # exactly the wait steps; whether the scene rests is only observed
            criterion = dataclasses.replace(criterion, min_steps=self.protocol.wait_steps,
                                            max_steps=self.protocol.wait_steps)
        wait = np.array(self.protocol.wait_action)
        self.start, last = settle(lambda: self.env.step(wait.copy()), self.model, self.data, criterion=criterion)
        self._ready = True
        return self._observed(last[0] if last is not None else obs)

    def start_meta(self) -> dict:
        """The record's meta fields on how the last episode started."""
        if self.protocol.settle:
            return self.start.meta()
        return {"wait_steps": self.start.steps, "at_rest_after_wait": self.start.settled,
                "start_linear_speed": self.start.linear_speed, "start_angular_speed": self.start.angular_speed,
                **({"start_moving_body": self.start.moving_body} if self.start.moving_body else {})}

    @property
    def wait_action(self) -> np.ndarray:
        return np.array(self.protocol.wait_action)

    def step(self, action: np.ndarray):
        obs, reward, done, info = self.env.step(action)
        return self._observed(obs), reward, done, info

    def _observed(self, obs: dict) -> dict:
        """robosuite's observation plus the controller's end-effector matrix, which LeRobot's env gives."""
        obs[EEF_MAT] = controller_eef_mat(self.env)
        return obs

    def check_success(self) -> bool:
        """LIBERO's own success predicate for the task's goal."""
        return bool(self.env.env._check_success())

    @property
    def model(self) -> mujoco.MjModel:
        return self.env.sim.model._model

    @property
    def data(self) -> mujoco.MjData:
        return self.env.sim.data._data

    def mjcf(self) -> str:
        """The compiled scene as MJCF, including fixture placements sampled at reset.

        LIBERO places fixtures by editing `model.body_pos` after loading, which the init
        state does not cover; `mj_saveLastXML` writes the edited values. Mesh and texture
        files are named `package://ROOT/...` inside the installed robosuite and LIBERO asset
        packages (`replay.scene.assets`), never by this machine's absolute paths.
        """
        if not self._ready:
            raise RuntimeError("call reset() first: the scene (fixture placement) is sampled at reset")
        if self._portable_xml[0] is not self._xml:
            self._portable_xml = (self._xml, portable_scene(self._xml, origin=f"the {self.task.suite} scene"))
        return self._portable_xml[1]

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ roles

    def object_bodies(self) -> dict[str, str]:
        """LIBERO object/fixture name -> its root body name."""
        e = self.env.env
        return {**{k: v.root_body for k, v in e.objects_dict.items()},
                **{k: v.root_body for k, v in e.fixtures_dict.items()}}

    def target_objects(self) -> list[str]:
        """LIBERO names of the task's targets: the objects its BDDL goal moves (`goal_targets`)."""
        e = self.env.env
        return goal_targets(e.parsed_problem["goal_state"], e.objects_dict)

    def site_owner(self, site: str) -> str | None:
        """The object or fixture whose body carries `site` (None if the site is not found)."""
        m = self.model
        sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, site)
        if sid < 0:
            return None
        root = int(m.body_rootid[m.site_bodyid[sid]])
        for name, body in self.object_bodies().items():
            if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, body) == root:
                return name
        return None

    def body_roles(self) -> dict[str, str]:
        m = self.model
        e = self.env.env
        names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) or "" for b in range(m.nbody)]
        roles: dict[str, str] = {"world": "other"}
        for n in names:
            if n.startswith("robot0_link"):
                roles[n] = "robot"
            elif n in ("robot0_base", "mount0_base"):  # mount0_* children inherit mount0_base
                roles[n] = "other"
            elif n == "robot0_right_hand" or n.startswith("gripper0_"):
                roles[n] = "gripper"
        bodies = self.object_bodies()
        targets = set(self.target_objects())
        for name, body in bodies.items():
            if name in targets:
                roles[body] = "target"
            elif name in e.objects_dict:
                roles[body] = "bystander"
            else:
                roles[body] = "furniture"
        # arena furniture (table, floor): remaining roots welded to the world
        for b in range(1, m.nbody):
            if m.body_parentid[b] == 0 and names[b] not in roles:
                roles[names[b]] = "furniture"
        return roles

    def make_recorder(self, *, substep_peaks: bool = True, **options: Any) -> Recorder:
        """A `Recorder` for the current model (call after `reset`: reset rebuilds the model).

        With `substep_peaks` (the default) the recorder sees every physics substep of
        robosuite's control loop (`observe_substep`), until the next `reset` or recorder.
        """
        if not self._ready:
            raise RuntimeError("call reset() before make_recorder(): LIBERO rebuilds the model on reset")
        recorder = Recorder(self.model, self.body_roles(), eef_site=EEF_SITE, arm_joints=ARM_JOINTS,
                            substep_peaks=substep_peaks, **options)
        self._watch_substeps(recorder if substep_peaks else None)
        return recorder

    def _watch_substeps(self, recorder: Recorder | None) -> None:
        """Makes `env.sim.step` (robosuite's `mj_step`, 25 per control step) report to `recorder`.

        The wrapper shadows the method on this `MjSim` instance only, and only reads the
        data after each step; a hard reset builds a new `MjSim`, which drops it.
        """
        sim = self.env.sim
        sim.__dict__.pop("step", None)  # the plain class method again
        if recorder is None:
            return
        plain, data = sim.step, self.data

        def step(*args, **kwargs):
            plain(*args, **kwargs)
            recorder.observe_substep(data)
        sim.step = step

    def torque_limits(self) -> list[float]:
        """The simulated arm actuators' force limits (ctrlrange), N·m."""
        m = self.model
        ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, f"robot0_torq_j{i}") for i in range(1, 8)]
        return [float(m.actuator_ctrlrange[i, 1]) for i in ids]

    # ------------------------------------------------------------------ privileged task facts

    def task_info(self) -> TaskInfo:
        """Goal, object geometry and obstacles for scripted policies (privileged state)."""
        e, m, d = self.env.env, self.model, self.data
        bodies = self.object_bodies()
        root = {n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b) for n, b in bodies.items()}
        boxes = {n: world_box(m, d, r) for n, r in root.items()}
        geometry = {n: body_box(m, d, root[n]) for n in e.objects_dict}
        goal = next((g for g in e.parsed_problem["goal_state"]
                     if len(g) == 3 and g[0] in ("on", "in") and g[1] in e.objects_dict), None)
        if goal is None:
            return TaskInfo(language=self.task.language, pick=None, place=None, goal_offset=(0.0, 0.0, 0.0),
                            relation="on", support_dz=0.0, rim_dz=0.0, geometry=geometry,
                            obstacles=tuple(Obstacle(n, *boxes[n]) for n in boxes))
        relation, pick, where = goal
        if where in root:
            place, point = where, d.xpos[root[where]].copy()
            offset = np.zeros(3)
            top = boxes[where][1][2]
            support = rim = top - point[2]
        else:
            sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, where)
            point = d.site_xpos[sid].copy()
            owner = self.site_owner(where)
            lo, hi = boxes[owner] if owner else (point, point)
            if owner in e.objects_dict:  # a container that may move: track it live
                place, offset = owner, point - d.xpos[root[owner]]
                rim = hi[2] - point[2]
                support = rim if relation == "in" else 0.0
            else:  # a region of a fixture: a fixed point; rest on the fixture's surface there
                place, offset = None, point
                surf = surface_under(m, d, root[owner], point, m.site_size[sid]) if owner else point[2]
                support = rim = surf - point[2]
        return TaskInfo(language=self.task.language, pick=pick, place=place,
                        goal_offset=tuple(float(x) for x in offset), relation=relation,
                        support_dz=float(support), rim_dz=float(rim), geometry=geometry,
                        obstacles=tuple(Obstacle(n, *boxes[n]) for n in boxes if n != pick))


# LIBERO's goal predicates (libero.libero.envs.predicates) whose first argument is an
# object the robot moves: ("on"|"in", obj, where) and ("up", obj). The others, "open",
# "close", "turnon" and "turnoff", change a fixture's state and move no object.
MOVING_PREDICATES = frozenset({"on", "in", "up"})


def goal_targets(goal_state, objects) -> list[str]:
    """The objects a BDDL goal moves, in goal order: the first argument of each
    `MOVING_PREDICATES` predicate when it names a movable object (a key of `objects`).

    Destinations and receptacles (`plate_1`, `basket_1_contain_region`, the bowl that
    cream cheese goes into) are not targets: they become bystanders (paper, Appendix B:
    the plate is a bystander). Fixture-state goals (`open`, `close`, `turnon`,
    `turnoff`) move no object; on a task made only of them (libero_goal task 0, open
    the drawer; task 7, turn on the stove) there is no target, and the fixture keeps its
    furniture role, as the task registry's `targets: []` says (docs/libero.md, Roles).
    """
    out: list[str] = []
    for predicate in goal_state:
        if len(predicate) >= 2 and str(predicate[0]).lower() in MOVING_PREDICATES:
            moved = predicate[1]
            if moved in objects and moved not in out:
                out.append(moved)
    return out
