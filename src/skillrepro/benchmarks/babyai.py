"""BabyAI-Text `pick_up_seq_go_to` as BALROG exposes it (SpeedRunner appendix C).

BALROG builds this task from `BabyAI-MixedTrainLocal-v0` (a level of the BabyAI-Text project that stock
minigrid 3.2.0 lacks), re-drawing the level until its action kind is "pick up seq go to". That level is
defined here on stock minigrid with the action kind fixed: one 8x8 room, the agent placed at random, then
`num_dists + 2` = 10 random keys, balls and boxes (duplicates allowed), all reachable; the object to pick up
and the one to go to are drawn from them, and the mission is phrased "pick up X, then go to Y" or "go to Y
after you pick up X" with equal odds. Missions that name a yellow box, red key, red door, green ball or grey
door are rejected and drawn again (MixedTrainLocal keeps those for its test level). BALROG's config line
`num_dists: 0` never reaches the level (its text wrapper swallows it), so the 8 distractors stay.

Option `level` (a deviation for SkillScaffold's laptop presets, off by default) swaps the level for one of
BabyAI's easier ones, in which the shipped small models' skill-free episodes sometimes succeed: `go_to_local`
(GoToLocal: "go to the X", the same 8x8 room and 8 distractors) and `go_to_obj` (GoToObj: "go to the X", one object,
no distractors, a 6x6 room), with the three moves as the only primitives. Task ids, pools and the text view are
the same for every level.

The view is BabyAI-Text's description of the 7x7 egocentric image, one item per line with BALROG's
"You see " prefix removed ("a red ball 1 step left and 2 steps forward").
"""
from __future__ import annotations

import contextlib
import io
import random
from dataclasses import dataclass
from typing import Any, Callable

from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT
from minigrid.core.roomgrid import RoomGrid
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.envs.babyai.core.verifier import AfterInstr, BeforeInstr, GoToInstr, ObjDesc, PickupInstr
from minigrid.envs.babyai.goto import GoToLocal, GoToObj
from minigrid.utils.baby_ai_bot import BabyAIBot

from skillrepro.benchmarks.base import Benchmark, Env, StepResult, TaskError, check_split, env_prompt, primitive

TRAIN_POOL, TEST_POOL = 200, 30
NUM_DISTS = 8  # MixedTrainLocal's default; the level places num_dists + 2 objects
EXCLUDED = ("yellow box", "red key", "red door", "green ball", "grey door")  # never named in a mission
_STATES = {0: "open", 1: "closed", 2: "locked"}
_ACTIONS = {"turn_left": 0, "turn_right": 1, "go_forward": 2, "pick_up": 3, "drop": 4, "toggle": 5}


class PickUpSeqGoTo(RoomGridLevel):
    """MixedTrainLocal with its action kind fixed to "pick up seq go to"."""

    def __init__(self, num_dists: int = NUM_DISTS, **kwargs):
        self.num_dists = num_dists
        super().__init__(num_rows=1, num_cols=1, room_size=8, **kwargs)

    def gen_mission(self):
        while True:
            RoomGrid._gen_grid(self, self.width, self.height)  # an empty room again after a rejection
            self.place_agent()
            objs = self.add_distractors(num_distractors=self.num_dists + 2, all_unique=False)
            if not self.check_objs_reachable(raise_exc=False):
                continue
            carry, goal = self._rand_elem(objs), self._rand_elem(objs)
            same = lambda a, b: (a.type, a.color) == (b.type, b.color)  # noqa: E731
            # "pick up the red ball, then go to the red ball" only when a second red ball exists.
            while same(carry, goal) and sum(same(carry, o) for o in objs) < 2:
                goal = self._rand_elem(objs)
            pick = PickupInstr(ObjDesc(carry.type, carry.color))
            go = GoToInstr(ObjDesc(goal.type, goal.color))
            self.instrs = BeforeInstr(pick, go) if self._rand_elem(["Before", "After"]) == "Before" \
                else AfterInstr(go, pick)
            surface = self.instrs.surface(self)
            if not any(name in surface for name in EXCLUDED):
                return


@dataclass(frozen=True)
class Level:
    make: Callable[[], RoomGridLevel]
    mission: str  # the "paper" prompt's {mission}: what the mission asks
    hint: str  # the "hints" prompt's {hint}: how to read the mission
    moves_only: bool = False  # offer only the moves (the GoTo levels use no other action)
    # (the default level's two keep the prompt files' line breaks, so its prompts stay byte for byte)


LEVELS = {
    "pick_up_seq_go_to": Level(PickUpSeqGoTo, "asks you to pick up one object and go to another, in the order it\n"
                               "states", 'The mission says which object to pick up and\nwhich to go to, and in which '
                               'order: "go to Y after you pick up X" means pick up X first.'),
    "go_to_local": Level(lambda: GoToLocal(room_size=8, num_dists=NUM_DISTS), "asks you to go to one of the objects",
                         "The mission says which object to go to.", moves_only=True),
    "go_to_obj": Level(lambda: GoToObj(room_size=6), "asks you to go to the one object in the room",
                       "The mission says which object to go to.", moves_only=True),
}


def _steps(n: int, word: str) -> str:
    return f"{n} step{'s' if n > 1 else ''} {word}"


def _name(kind: str, color: str, state: int) -> str:
    if kind != "door":
        return f"a {color} {kind}"
    word = _STATES[state]
    return f"{'an' if word == 'open' else 'a'} {word} {color} door"


def describe_view(image, carrying=None) -> str:
    """BabyAI-Text's description of the 7x7 egocentric view (the agent stands at image[3, 6], facing y = 0).

    In its order: what you carry; a wall straight ahead, to the left and to the right, each only when no
    object stands between; then every object, column by column from the left, far to near."""
    lines = [f"You carry a {carrying.color} {carrying.type}"] if carrying is not None else []
    for label, cells in (
        ("forward", [(3, y) for y in range(5, -1, -1)]),
        ("left", [(x, 6) for x in range(2, -1, -1)]),
        ("right", [(x, 6) for x in range(4, 7)]),
    ):
        for dist, (x, y) in enumerate(cells, start=1):
            kind = IDX_TO_OBJECT[int(image[x, y, 0])]
            if kind in ("unseen", "empty"):
                continue
            if kind == "wall":
                lines.append(f"a wall {_steps(dist, label)}")
            break
    for x in range(7):
        for y in range(7):
            kind = IDX_TO_OBJECT[int(image[x, y, 0])]
            if kind in ("unseen", "empty", "wall") or (x, y) == (3, 6):
                continue
            side, ahead = x - 3, 6 - y
            where = []
            if side:
                where.append(_steps(abs(side), "left" if side < 0 else "right"))
            if ahead or not side:
                where.append(_steps(ahead, "forward"))
            name = _name(kind, IDX_TO_COLOR[int(image[x, y, 1])], int(image[x, y, 2]))
            lines.append(f"{name} {' and '.join(where)}")
    return "\n".join(lines)


class BabyAIEnv(Env):
    benchmark = "babyai"

    def __init__(self, task_id: str, level: str = "pick_up_seq_go_to"):
        super().__init__(task_id)
        self.seed = int(task_id)
        self._env = LEVELS[level].make()
        self._last_reward = 0.0

    @property
    def mission(self) -> str:
        return self._env.unwrapped.mission

    def reset(self) -> str:
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints "Sampling rejected" on retries
            self._obs, _ = self._env.reset(seed=self.seed)
        # C.3: the opening prompt holds the mission and the opening observation; later ones the view only.
        return f"Mission: {self.mission}\n{self.observe()}"

    def observe(self) -> str:
        return describe_view(self._obs["image"], self._env.unwrapped.carrying)

    def _apply(self, name, args) -> StepResult:
        if name == "get_current_observation":  # option current_observation: a read, no step
            return StepResult(self.observe())
        self._obs, reward, terminated, truncated, _ = self._env.step(_ACTIONS[name])
        self._last_reward = max(self._last_reward, float(reward))
        text = self.observe()
        if terminated and reward > 0:
            text = "Mission complete.\n" + text
        elif truncated:
            text = "The environment's step limit was reached.\n" + text
        return StepResult(text, float(reward), bool(terminated or truncated))

    def score(self) -> float:
        return 1.0 if self._last_reward > 0 else 0.0

    def success(self) -> bool:
        return self._last_reward > 0

    @primitive
    def turn_left(self) -> str:
        """Turn 90 degrees to the left, staying in the same cell."""

    @primitive
    def turn_right(self) -> str:
        """Turn 90 degrees to the right, staying in the same cell."""

    @primitive
    def go_forward(self) -> str:
        """Move one cell forward, if that cell is free."""

    @primitive
    def pick_up(self) -> str:
        """Pick up the object directly in front of you (you can carry one object)."""

    @primitive
    def drop(self) -> str:
        """Drop the object you carry onto the cell directly in front of you."""

    @primitive
    def toggle(self) -> str:
        """Open, close or unlock the door or box directly in front of you."""


class BabyAIReadingEnv(BabyAIEnv):
    """BabyAI with option `current_observation` (a deviation, off by default): the read Crafter's D.2 gives its
    skills. In every default run the inducer's refused BabyAI writes read the observation as a global
    (`observation`, `current_observation`), as a Crafter skill would with get_current_observation()."""

    @primitive(advances=False)
    def get_current_observation(self) -> str:
        """Return what you see now, without acting."""


class BabyAIMovesEnv(BabyAIEnv):
    """A GoTo level: turn_left, turn_right and go_forward only. Picking up, dropping and toggling do nothing
    for its mission, and the shipped small models spend most of their steps on them."""

    pick_up = drop = toggle = None  # not functions, so not primitives


class BabyAIReadingMovesEnv(BabyAIReadingEnv):
    __doc__ = BabyAIMovesEnv.__doc__
    pick_up = drop = toggle = None


def bot_moves(task_id: str, limit: int, level: str = "pick_up_seq_go_to") -> list[str] | None:
    """BabyAI's own bot (minigrid's BabyAIBot) solving `task_id` through this env: its primitive moves, or None
    when it needs more than `limit` or an action the text env lacks (a test's gold path, an expert Scout)."""
    env = BabyAIEnv(task_id, level)
    env.reset()
    bot, names, moves = BabyAIBot(env._env.unwrapped), {v: k for k, v in _ACTIONS.items()}, []
    try:
        while not env.done and len(moves) < limit:
            action = int(bot.replan())
            if action not in names:
                return None
            moves.append(names[action])
            env.step(moves[-1])
        return moves if env.success() else None
    finally:
        env.release()


class BabyAIBenchmark(Benchmark):
    name = "babyai"
    env_class = BabyAIEnv
    llm_call_budget = 30  # C.3
    # Prompt files shipped for the environment description: "paper" says what the task is and no more;
    # "hints" adds navigation advice (how to reach and pick up an object), beyond the paper's prompt.
    PROMPTS = ("paper", "hints")

    def __init__(self, prompt: str = "paper", current_observation: bool = False, level: str = "pick_up_seq_go_to",
                 **unknown: Any):
        if unknown:
            raise TaskError(f"babyai: unknown option(s) {sorted(unknown)}; known: prompt, current_observation, level")
        if not isinstance(current_observation, bool):
            raise TaskError(f"babyai: current_observation must be true or false, got {current_observation!r}")
        if level not in LEVELS:
            raise TaskError(f"babyai: unknown level {level!r}; known: {', '.join(LEVELS)}")
        self.level = level
        self.prompt = env_prompt(self.name, prompt, self.PROMPTS, mission=LEVELS[level].mission,
                                 hint=LEVELS[level].hint)
        self.env_class = {(False, False): BabyAIEnv, (True, False): BabyAIReadingEnv, (False, True): BabyAIMovesEnv,
                          (True, True): BabyAIReadingMovesEnv}[current_observation, LEVELS[level].moves_only]

    def describe(self) -> str:
        return self.prompt

    def _pools(self, seed: int) -> tuple[list[int], list[int]]:
        ids = random.Random(seed).sample(range(1_000_000), TRAIN_POOL + TEST_POOL)
        return ids[:TRAIN_POOL], ids[TRAIN_POOL:]

    def pool_size(self, split: str) -> int:
        check_split(split)
        return TRAIN_POOL if split == "train" else TEST_POOL

    def sample_tasks(self, split: str, n: int, seed: int) -> list[str]:
        check_split(split)
        pool = self._pools(seed)[0 if split == "train" else 1]
        if n > len(pool):
            raise TaskError(f"babyai has {len(pool)} {split} tasks per task seed; asked for {n}")
        return [str(s) for s in pool[:n]]

    def make(self, task_id: str) -> Env:
        if not str(task_id).isdigit():
            raise TaskError(f"babyai task id must be a non-negative integer seed, got {task_id!r}")
        return self.env_class(str(task_id), self.level)
