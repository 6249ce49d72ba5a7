"""ScienceWorld (`scienceworld==1.2.3`, needs Java): the electricity and classification families.

Long because its 25 typed primitives each build one command and are declared one by one.

The agent acts through 25 typed primitives that each build one command for ScienceWorld's text parser,
plus `submit_answer()`. It never sees ScienceWorld's valid-action list. Task ids are
"task-name:variation" (e.g. "test-conductivity:17").

Two things differ from using `scienceworld.ScienceWorldEnv` as shipped:
- The lean step: the shipped `step` also builds the ~2,700-string valid-action list and several free looks
  on every call (0.1-0.25 s); we call the simulator's `step` and `getScore`/`getCompleted` directly (~15 ms).
- One JVM per process: each simulator is a 350-480 MB JVM, so a process keeps one, capped by
  JAVA_TOOL_OPTIONS=-Xmx512m unless the user set that variable, and hands it to one episode at a time.
  Parallelism comes from processes (Snakemake jobs), never from threads sharing a simulator.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import random
import shutil
from dataclasses import dataclass
from typing import Any

from skillrepro.benchmarks.base import (ActionError, Benchmark, Env, StepResult, TaskError, check_split, env_prompt,
                                  primitive)

FAMILIES: dict[str, tuple[str, ...]] = {
    "electricity": (
        "power-component",
        "power-component-renewable-vs-nonrenewable-energy",
        "test-conductivity",
        "test-conductivity-of-unknown-substances",
    ),
    "classification": ("find-living-thing", "find-non-living-thing", "find-plant", "find-animal"),
}

JAVA_HEAP = "-Xmx512m"
JAVA_MISSING = (
    "ScienceWorld needs Java 17 on PATH, and `java` was not found. Install it with "
    "`sudo apt-get install openjdk-17-jre-headless` (Debian/Ubuntu), `conda install -c conda-forge openjdk=17`, "
    "or put a JDK's bin/ folder on PATH."
)


class JavaMissingError(RuntimeError):
    """`java` is not on PATH, so the ScienceWorld simulator cannot start."""


# ----------------------------------------------------------------------------------------------------------
# The process's one simulator
# ----------------------------------------------------------------------------------------------------------
_SIM: Any = None  # scienceworld.ScienceWorldEnv, started on first use
_OWNER: object | None = None  # the episode whose world is loaded right now


def simulator() -> Any:
    """The process's ScienceWorld simulator (a `scienceworld.ScienceWorldEnv`), started on first use."""
    global _SIM
    if _SIM is None:
        if shutil.which("java") is None:
            raise JavaMissingError(JAVA_MISSING)
        # The JVM inherits our environment; a user's own setting wins over our cap.
        os.environ.setdefault("JAVA_TOOL_OPTIONS", JAVA_HEAP)
        from scienceworld import ScienceWorldEnv as _Upstream

        # No task name: nothing is loaded until an episode asks for its task.
        _SIM = _Upstream("", envStepLimit=10**9)
        atexit.register(shutdown)
    return _SIM


def shutdown() -> None:
    """Stop this process's JVM (a later episode starts a new one)."""
    global _SIM, _OWNER
    if _SIM is not None:
        sim, _SIM, _OWNER = _SIM, None, None
        # py4j logs its own shutdown at INFO; at interpreter exit the handlers' streams may be closed (pytest's
        # capture), and each message became a "--- Logging error ---" traceback after the suite's summary
        logging.getLogger("py4j").setLevel(logging.WARNING)
        try:
            sim.close()
        except Exception:  # the JVM may already be gone at interpreter exit
            pass


def task_names() -> tuple[str, ...]:
    """Every ScienceWorld task name (read from the package's task table, no JVM needed)."""
    from scienceworld.constants import ID2TASK

    return tuple(ID2TASK.values())


@functools.lru_cache(maxsize=None)
def max_variations(task: str) -> int:
    return int(simulator().get_max_variations(task))


@functools.lru_cache(maxsize=None)
def partitions(task: str) -> dict[str, tuple[int, ...]]:
    """ScienceWorld's own train/dev/test variation partitions of `task` (disjoint by construction)."""
    global _OWNER
    sim = simulator()
    _OWNER = None  # loading a task to read its partitions replaces any live episode's world
    sim.load(task, 0, "", False)
    return {
        "train": tuple(sim.get_variations_train()),
        "dev": tuple(sim.get_variations_dev()),
        "test": tuple(sim.get_variations_test()),
    }


def gold_path(task_id: str) -> list[str]:
    """ScienceWorld's own gold action sequence for `task_id` (`generateGoldPath=True`), as command strings."""
    global _OWNER
    name, variation = parse_task_id(task_id)
    _check_exists(name, variation)
    sim = simulator()
    _OWNER = None
    sim.load(name, variation, "", True)
    return list(sim.get_gold_action_sequence())


@dataclass(frozen=True)
class TaskRef:
    name: str
    variation: int

    @property
    def task_id(self) -> str:
        return f"{self.name}:{self.variation}"


def parse_task_id(task_id: str) -> tuple[str, int]:
    name, sep, var = str(task_id).rpartition(":")
    if not sep or not name or not var.strip().isdigit():
        raise TaskError(f"ScienceWorld task id must look like 'task-name:variation', got {task_id!r}")
    return name, int(var)


def _check_exists(name: str, variation: int) -> None:
    if name not in task_names():
        raise TaskError(f"unknown ScienceWorld task {name!r}; known: {', '.join(sorted(task_names()))}")
    n = max_variations(name)
    if not 0 <= variation < n:
        raise TaskError(f"ScienceWorld task {name!r} has variations 0..{n - 1}; variation {variation} is out of range")


# ----------------------------------------------------------------------------------------------------------
# Primitive -> command text. The docstrings of the Env methods below are what the agent reads.
# ----------------------------------------------------------------------------------------------------------
# ScienceWorld's simplifications (`load(..., simplificationStr)`); "easy" is all of them that the task
# allows (the simulator drops noElectricalAction from it on electrical tasks).
SIMPLIFICATIONS = ("easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors",
                   "noElectricalAction")


def teleports(simplifications: str) -> bool:
    return any(x in ("easy", "teleportAction") for x in simplifications.split(","))


COMMANDS: dict[str, str] = {
    "go": "go to {0}",
    "look_around": "look around",
    "look_at": "look at {0}",
    "look_in": "look in {0}",
    "pick_up": "pick up {0}",
    "put_down": "put down {0}",
    "move": "move {0} to {1}",
    "pour": "pour {0} in {1}",
    "dunk": "dunk {0} in {1}",
    "open": "open {0}",
    "close": "close {0}",
    "activate": "activate {0}",
    "deactivate": "deactivate {0}",
    "connect": "connect {0} to {1}",
    "disconnect": "disconnect {0}",
    "mix": "mix {0}",
    "focus_on": "focus on {0}",
    "read": "read {0}",
    "use": "use {0} on {1}",
    "inventory": "inventory",
    "task_description": "task",
    "eat": "eat {0}",
    "flush": "flush {0}",
    "disambiguate": "{0}",
}


class ScienceWorldEnv(Env):
    """One ScienceWorld episode: a (task, variation) pair played on the process's simulator."""

    benchmark = "scienceworld"


    def __init__(self, task_id: str, room_each_step: bool = True, simplifications: str = ""):
        super().__init__(task_id)
        self.task_name, self.variation = parse_task_id(task_id)
        self.room_each_step = room_each_step
        self.simplifications = simplifications
        self.raw_score = 0  # ScienceWorld's score, -100..100 (-100: the agent focused on the wrong thing)
        self.submitted = False
        self.task_text = ""

    # --- lifecycle -----------------------------------------------------------------------------------------
    def reset(self) -> str:
        global _OWNER
        _check_exists(self.task_name, self.variation)
        sim = simulator()
        # A fresh load is the initial state of the variation; the shipped reset() would load it again and
        # then take a slow shipped step.
        sim.load(self.task_name, self.variation, self.simplifications, False)
        _OWNER = self
        self.done, self.submitted, self.raw_score = False, False, 0
        self.total_reward, self.n_primitive_steps = 0.0, 0
        self.task_text = str(sim.server.getTaskDescription()).strip()
        room = str(sim.server.step("look around")).strip()
        return f"Task: {self.task_text}\n\n{room}"

    # --- the lean step -------------------------------------------------------------------------------------
    def _send(self, command: str) -> tuple[str, float]:
        if _OWNER is not self:
            raise RuntimeError(
                f"ScienceWorld episode {self.task_id!r} no longer owns this process's simulator "
                "(another episode was reset after it, or it was never reset); run one episode per process at a time"
            )
        server = _SIM.server
        ack = str(server.step(command)).strip()
        score = int(round(100 * server.getScore()))
        reward = (score - self.raw_score) / 100
        self.raw_score = score
        # B.3: only submit_answer (or the actor's call budget) ends an episode. Unlike the shipped step,
        # neither completion nor a negative score (wrong focus) does; success is read at the end.
        if self.room_each_step and command != "look around":
            ack = f"{ack}\n\n{str(server.freeActionLook()).strip()}"
        return ack, reward

    def _apply(self, name: str, args: list[Any]) -> StepResult:
        if name == "submit_answer":
            self.submitted = True
            verdict = "solved" if self.success() else "not solved"
            return StepResult(f"Answer submitted; the task is {verdict} (score {self.raw_score}/100).", 0.0, True)
        if name == "wait":
            ticks = _as_int(args[0], "wait(ticks)")
            if not 1 <= ticks <= 10:
                raise ActionError(f"wait(ticks) takes 1..10 ticks, got {ticks}")
            # ScienceWorld knows `wait1` (one tick) and `wait` (ten ticks).
            commands = ["wait"] if ticks == 10 else ["wait1"] * ticks
        elif name == "disambiguate":
            commands = [COMMANDS[name].format(_as_int(args[0], "disambiguate(choice)"))]
        elif name == "go" and teleports(self.simplifications):
            commands = [f"teleport to {_as_text(args[0], 'go argument 1')}"]
        else:
            texts = [_as_text(a, f"{name} argument {i + 1}") for i, a in enumerate(args)]
            commands = [COMMANDS[name].format(*texts)]
        obs, reward = "", 0.0
        for command in commands:
            obs, r = self._send(command)
            reward += r
        if name == "wait" and len(commands) > 1:
            # The simulator acknowledges only the last `wait1`; report the whole wait.
            obs = obs.replace("wait for 1 iterations", f"wait for {len(commands)} iterations", 1)
        return StepResult(obs, reward, False)

    def score(self) -> float:
        return max(0, self.raw_score) / 100

    def success(self) -> bool:
        # B.3: a success iff the score is at its maximum when the episode ends (submit or call budget).
        return self.raw_score >= 100

    # --- primitives (their docstrings are the agent's tool list) -------------------------------------------
    @primitive
    def go(self, location: str) -> str:
        """Go to an adjacent room or location, e.g. go("kitchen"). Its door must be open (under the easy
        simplification, any room: the move is ScienceWorld's teleport)."""
        return self.step("go", [location]).observation

    @primitive
    def look_around(self) -> str:
        """Describe the room you are in: its objects and its doors."""
        return self.step("look_around", []).observation

    @primitive
    def look_at(self, obj: str) -> str:
        """Describe one object, e.g. look_at("red light bulb")."""
        return self.step("look_at", [obj]).observation

    @primitive
    def look_in(self, container: str) -> str:
        """List what is inside a container, e.g. look_in("red box")."""
        return self.step("look_in", [container]).observation

    @primitive
    def pick_up(self, obj: str) -> str:
        """Move an object into your inventory."""
        return self.step("pick_up", [obj]).observation

    @primitive
    def put_down(self, obj: str) -> str:
        """Drop an object from your inventory into the current room."""
        return self.step("put_down", [obj]).observation

    @primitive
    def move(self, obj: str, container: str) -> str:
        """Move an object into a container or place, e.g. move("aluminum foil", "blue box")."""
        return self.step("move", [obj, container]).observation

    @primitive
    def pour(self, obj: str, container: str) -> str:
        """Pour a liquid or substance (or its container's contents) into a container."""
        return self.step("pour", [obj, container]).observation

    @primitive
    def dunk(self, obj: str, container: str) -> str:
        """Dunk an object into a container of liquid."""
        return self.step("dunk", [obj, container]).observation

    @primitive
    def open(self, obj: str) -> str:
        """Open a door or container, e.g. open("door to kitchen")."""
        return self.step("open", [obj]).observation

    @primitive
    def close(self, obj: str) -> str:
        """Close a door or container."""
        return self.step("close", [obj]).observation

    def release(self) -> None:
        # Give up this episode's hold on the simulator; the JVM stays up for the next episode.
        global _OWNER
        if _OWNER is self:
            _OWNER = None

    @primitive
    def activate(self, device: str) -> str:
        """Switch a device on, e.g. activate("stove")."""
        return self.step("activate", [device]).observation

    @primitive
    def deactivate(self, device: str) -> str:
        """Switch a device off."""
        return self.step("deactivate", [device]).observation

    @primitive
    def connect(self, terminal_a: str, terminal_b: str) -> str:
        """Connect two electrical terminals, e.g. connect("battery anode", "red wire terminal 1")."""
        return self.step("connect", [terminal_a, terminal_b]).observation

    @primitive
    def disconnect(self, obj: str) -> str:
        """Disconnect every electrical connection of an object."""
        return self.step("disconnect", [obj]).observation

    @primitive
    def mix(self, container: str) -> str:
        """Mix the contents of a container."""
        return self.step("mix", [container]).observation

    @primitive
    def focus_on(self, obj: str) -> str:
        """Declare the object the task is about. Focusing on the wrong object fails the task at once."""
        return self.step("focus_on", [obj]).observation

    @primitive
    def read(self, obj: str) -> str:
        """Read an object that carries text, e.g. a book or a thermometer."""
        return self.step("read", [obj]).observation

    @primitive
    def use(self, tool: str, target: str) -> str:
        """Use a tool on a target, e.g. use("thermometer", "water")."""
        return self.step("use", [tool, target]).observation

    @primitive
    def inventory(self) -> str:
        """List what you carry."""
        return self.step("inventory", []).observation

    @primitive
    def task_description(self) -> str:
        """Repeat the task description."""
        return self.step("task_description", []).observation

    @primitive
    def eat(self, obj: str) -> str:
        """Eat an object."""
        return self.step("eat", [obj]).observation

    @primitive
    def flush(self, obj: str) -> str:
        """Flush an object such as a toilet."""
        return self.step("flush", [obj]).observation

    @primitive
    def wait(self, ticks: int) -> str:
        """Let 1 to 10 time steps pass without acting (e.g. for a circuit or a process to take effect)."""
        return self.step("wait", [ticks]).observation

    @primitive
    def disambiguate(self, choice: int) -> str:
        """Answer the parser's 'Ambiguous request' question with the number of the option you meant."""
        return self.step("disambiguate", [choice]).observation

    @primitive(advances=False)
    def submit_answer(self) -> str:
        """Declare the task finished; the episode ends and is scored on the simulator's state now."""
        return self.step("submit_answer", []).observation


def _as_text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ActionError(f"{what} must be a non-empty string naming an object, got {value!r}")
    return " ".join(value.split())


def _as_int(value: Any, what: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ActionError(f"{what} must be an integer, got {value!r}") from None


def parse_command(command: str) -> tuple[str, list[Any]]:
    """Map a ScienceWorld command string (e.g. a gold-path step) onto the primitive call that issues it."""
    text = " ".join(command.strip().split())
    if text.isdigit():
        return "disambiguate", [int(text)]
    if text == "wait1":
        return "wait", [1]
    if text == "wait":
        return "wait", [10]
    if text == "look around":
        return "look_around", []
    if text == "inventory":
        return "inventory", []
    if text == "task":
        return "task_description", []
    # Two-argument templates: split at the last separator so names like "door to kitchen" stay whole.
    for name, head, sep in (
        ("move", "move ", " to "),
        ("connect", "connect ", " to "),
        ("pour", "pour ", " in "),
        ("pour", "pour ", " into "),
        ("dunk", "dunk ", " in "),
        ("dunk", "dunk ", " into "),
        ("use", "use ", " on "),
    ):
        if text.startswith(head) and sep in text[len(head):]:
            a, b = text[len(head):].rsplit(sep, 1)
            return name, [a, b]
    for name, head in (
        ("go", "go to "),
        ("go", "go "),
        ("look_at", "look at "),
        ("look_in", "look in "),
        ("pick_up", "pick up "),
        ("put_down", "put down "),
        ("put_down", "drop "),
        ("focus_on", "focus on "),
        ("open", "open "),
        ("close", "close "),
        ("activate", "activate "),
        ("deactivate", "deactivate "),
        ("disconnect", "disconnect "),
        ("mix", "mix "),
        ("read", "read "),
        ("eat", "eat "),
        ("flush", "flush "),
    ):
        if text.startswith(head) and len(text) > len(head):
            return name, [text[len(head):]]
    raise ValueError(f"no primitive issues the ScienceWorld command {command!r}")


# ----------------------------------------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------------------------------------
class ScienceWorldBenchmark(Benchmark):
    name = "scienceworld"
    env_class = ScienceWorldEnv
    requires = ("scienceworld",)
    llm_call_budget = 100  # B.3
    one_episode_per_process = True  # the process's one JVM holds one episode's world at a time
    PROMPTS = ("paper",)  # prompts/env_scienceworld_paper.txt: the interface, no strategy (B.3: no hints)

    DRAWS = ("union", "stratified")

    def __init__(self, family: str = "electricity", room_each_step: bool = True, prompt: str = "paper",
                 simplifications: str = "", draw: str = "union", **unknown: Any):
        if unknown:
            raise TaskError(f"scienceworld: unknown option(s) {sorted(unknown)}; known: family, room_each_step, "
                            "prompt, simplifications, draw")
        if draw not in self.DRAWS:
            raise TaskError(f"scienceworld: option draw: {draw!r} is not one of {', '.join(self.DRAWS)} (union: "
                            "the paper's draw from the family's pooled partition; stratified: an equal share per task)")
        if family not in FAMILIES:
            raise TaskError(f"scienceworld: unknown family {family!r}; known: {', '.join(FAMILIES)}")
        bad = [x for x in simplifications.split(",") if x and x not in SIMPLIFICATIONS]
        if bad:
            raise TaskError(f"scienceworld: unknown simplification(s) {bad} in option simplifications; known: "
                            f"{', '.join(SIMPLIFICATIONS)} (comma-separated)")
        if "noElectricalAction" in simplifications and family == "electricity":
            raise TaskError("scienceworld: option simplifications: noElectricalAction removes the actions the "
                            "electricity tasks need")
        self.simplifications = simplifications
        self.draw = draw
        self.family = family
        self.tasks = FAMILIES[family]
        self.room_each_step = bool(room_each_step)
        self.prompt = env_prompt(self.name, prompt, self.PROMPTS, family=family, tasks=", ".join(self.tasks))

    def describe(self) -> str:
        return self.prompt

    def sample_tasks(self, split: str, n: int, seed: int) -> list[str]:
        """`n` (task, variation) pairs from ScienceWorld's own `split` partition of this family
        (get_variations_train/dev/test, disjoint by construction).

        Option `draw`: `union` (default, appendix B.1) draws `n` pairs uniformly from the family's pairs
        pooled over its tasks, so a task appears in proportion to its partition (electricity's two
        power-component tasks have 10 train variations each against test-conductivity's 450: about 2 of 200).
        `stratified` (this project's earlier draw, not the paper's) gives each task an equal share (a task whose
        partition is too small gives all it has and the rest goes to the others).
        """
        check_split(split)
        rng = random.Random(seed)
        pools = {task: list(partitions(task)[split]) for task in self.tasks}
        total = sum(len(p) for p in pools.values())
        if n > total:
            raise TaskError(f"scienceworld family {self.family!r} has only {total} {split} variations; asked for {n}")
        if self.draw == "union":
            pooled = [TaskRef(t, v).task_id for t in self.tasks for v in pools[t]]
            return rng.sample(pooled, n)
        for pool in pools.values():
            rng.shuffle(pool)
        quota = {t: 0 for t in self.tasks}
        left = n
        while left:
            open_tasks = [t for t in self.tasks if quota[t] < len(pools[t])]
            share = max(1, left // len(open_tasks))
            for t in open_tasks:
                take = min(share, len(pools[t]) - quota[t], left)
                quota[t] += take
                left -= take
        picked = [TaskRef(t, v).task_id for t in self.tasks for v in pools[t][: quota[t]]]
        rng.shuffle(picked)  # interleave tasks so any prefix of the rollout order mixes them
        return picked

    def make(self, task_id: str) -> ScienceWorldEnv:
        name, variation = parse_task_id(task_id)
        if name not in task_names():
            _check_exists(name, variation)  # raises: names the unknown task
        if name not in self.tasks:
            raise TaskError(
                f"ScienceWorld task {name!r} (from task id {task_id!r}) is not in family {self.family!r}: "
                f"{', '.join(self.tasks)}"
            )
        _check_exists(name, variation)
        return ScienceWorldEnv(task_id, room_each_step=self.room_each_step, simplifications=self.simplifications)
