"""BabyAI-Text, PickUpSeqGoTo: "pick up X, then go to Y" (or "go to Y after you pick up X") in one room.

minigrid 3.2.0 has no such level (BALROG used an unmerged fork), so it is defined here on stock minigrid,
with no distractors as BALROG's `num_dists=0`. The text view is written here from the 7x7 egocentric image.
"""
from __future__ import annotations

import contextlib
import io
import random

from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.envs.babyai.core.verifier import AfterInstr, BeforeInstr, GoToInstr, ObjDesc, PickupInstr

from skillrepro.envs.base import Benchmark, Env, StepResult, TaskError, check_split, primitive

TRAIN_POOL, TEST_POOL = 200, 30
_STATES = {0: "open", 1: "closed", 2: "locked"}
_ACTIONS = {"turn_left": 0, "turn_right": 1, "go_forward": 2, "pick_up": 3, "drop": 4, "toggle": 5}


class PickUpSeqGoTo(RoomGridLevel):
    """Pick up one object, then go to another, in a single 8x8 room with nothing else in it."""

    def __init__(self, **kwargs):
        super().__init__(num_rows=1, num_cols=1, room_size=8, **kwargs)

    def gen_mission(self):
        self.place_agent()
        carry, goal = self.add_distractors(num_distractors=2, all_unique=True)
        pick = PickupInstr(ObjDesc(carry.type, carry.color))
        go = GoToInstr(ObjDesc(goal.type, goal.color))
        # Both phrasings of the same task: BabyAI's grammar produces each half of the time.
        self.instrs = BeforeInstr(pick, go) if self._rand_bool() else AfterInstr(go, pick)


def _steps(n: int, word: str) -> str:
    return f"{n} step{'s' if n != 1 else ''} {word}"


def describe_view(image, carrying=None) -> str:
    """Text of the 7x7 egocentric view: the agent stands at image[3, 6] and faces y = 0."""
    lines = []
    for x in range(7):
        for y in range(7):
            kind = IDX_TO_OBJECT[int(image[x, y, 0])]
            if kind in ("unseen", "empty", "floor", "wall", "agent") or (x, y) == (3, 6):
                continue
            color = IDX_TO_COLOR[int(image[x, y, 1])]
            name = f"{_STATES[int(image[x, y, 2])]} {color} door" if kind == "door" else f"{color} {kind}"
            side = x - 3
            where = [_steps(abs(side), "left" if side < 0 else "right")] if side else []
            where += [_steps(6 - y, "forward")] if y < 6 else []
            lines.append(f"a {name} {' and '.join(where)}")
    # Walls only along the three straight lines the agent can act on.
    for label, cells in (
        ("forward", [(3, y) for y in range(5, -1, -1)]),
        ("left", [(x, 6) for x in range(2, -1, -1)]),
        ("right", [(x, 6) for x in range(4, 7)]),
    ):
        for dist, (x, y) in enumerate(cells, start=1):
            if IDX_TO_OBJECT[int(image[x, y, 0])] == "wall":
                lines.append(f"a wall {_steps(dist, label)}")
                break
    front = IDX_TO_OBJECT[int(image[3, 5, 0])]
    front_text = "nothing" if front in ("empty", "floor", "unseen") else (
        "a wall" if front == "wall" else f"a {IDX_TO_COLOR[int(image[3, 5, 1])]} {front}"
    )
    lines.append(f"Directly in front of you: {front_text}.")
    lines.append(f"You are carrying: {f'a {carrying.color} {carrying.type}' if carrying else 'nothing'}.")
    return "You see:\n" + "\n".join(lines)


class BabyAIEnv(Env):
    benchmark = "babyai"

    def __init__(self, task_id: str):
        super().__init__(task_id)
        self.seed = int(task_id)
        self._env = PickUpSeqGoTo()
        self._last_reward = 0.0

    @property
    def mission(self) -> str:
        return self._env.unwrapped.mission

    def reset(self) -> str:
        with contextlib.redirect_stdout(io.StringIO()):  # level generation prints "Sampling rejected"
            self._obs, _ = self._env.reset(seed=self.seed)
        return self.observe()

    def observe(self) -> str:
        # The mission is repeated in every observation: small models lose track of it in a long history.
        return f"Mission: {self.mission}\n" + describe_view(self._obs["image"], self._env.unwrapped.carrying)

    def _apply(self, name, args) -> StepResult:
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


class BabyAIBenchmark(Benchmark):
    name = "babyai"
    env_class = BabyAIEnv
    llm_call_budget = 30

    def describe(self) -> str:
        return (
            "You are an agent in a BabyAI grid world, a room with walls, seen from your own point of view. "
            "Objects are keys, balls and boxes of different colours. Positions are given as steps to your "
            "left or right and steps forward. You can only pick up an object that is directly in front of "
            "you, and you have gone to an object when it is directly in front of you. To reach an object "
            "that is to one side, turn toward that side and walk forward; objects block the cells they are "
            "on. The mission says which object to pick up and which to go to, and in which order."
        )

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
        return BabyAIEnv(str(task_id))
