"""Crafter (`crafter==1.8.3`) with a text observation and the zombie-frequency knob of the seed's appendix D.

Long because its 17 game-advancing primitives and the text view's rules are declared one by one.

Task ids are world seeds ("12345"). The 17 game-advancing primitives each advance the world by one tick;
`get_current_observation()` reads without advancing. An episode ends when the player dies or after 2,000
advancing primitives; its score is the fraction of the 22 achievements unlocked.

Pixels are never rendered (the agent reads text), but upstream's night-time rendering draws noise from the
world's random generator; `_World._obs` draws the same numbers so that at zombie_frequency 1 the dynamics stay
identical to upstream Crafter for the same seed and actions. One upstream quirk is fixed: the creature to
despawn is picked from a set ordered by memory address, which makes upstream irreproducible across instances;
we order it by position (see `_World._balance_chunk`).
"""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Any


from skillrepro.benchmarks.base import (Benchmark, Env, Primitive, StepResult, TaskError, check_split, env_prompt,
                                        primitive)

MAX_STEPS = 2000
VIEW_RADIUS = 4  # the 9x9 egocentric view of appendix D.3

# Appendix D.5's display order (upstream keys; the prompt shows them title-cased).
ACHIEVEMENTS = (
    "collect_wood", "place_table", "eat_cow", "collect_sapling", "collect_drink", "make_wood_pickaxe",
    "make_wood_sword", "place_plant", "defeat_zombie", "collect_stone", "place_stone", "eat_plant",
    "defeat_skeleton", "make_stone_pickaxe", "make_stone_sword", "wake_up", "place_furnace", "collect_coal",
    "collect_iron", "make_iron_pickaxe", "make_iron_sword", "collect_diamond",
)

# Our primitive name -> upstream action name.
ACTIONS = {
    "move_north": "move_up",
    "move_south": "move_down",
    "move_east": "move_right",
    "move_west": "move_left",
    "do": "do",
    "sleep": "sleep",
    "noop": "noop",
    "place_stone": "place_stone",
    "place_table": "place_table",
    "place_furnace": "place_furnace",
    "place_plant": "place_plant",
    "make_wood_pickaxe": "make_wood_pickaxe",
    "make_stone_pickaxe": "make_stone_pickaxe",
    "make_iron_pickaxe": "make_iron_pickaxe",
    "make_wood_sword": "make_wood_sword",
    "make_stone_sword": "make_stone_sword",
    "make_iron_sword": "make_iron_sword",
}

_DIRECTIONS = {(0, -1): "north", (0, 1): "south", (1, 0): "east", (-1, 0): "west"}
_MAX_PER_KIND = 4  # positions listed per kind of thing, nearest first; a stone field would flood the view


def _world_class():
    """Build the upstream subclass lazily, so importing this module does not import crafter."""
    import crafter
    from crafter import objects

    class _World(crafter.Env):
        def __init__(self, seed: int, zombie_frequency: float, length: int):
            super().__init__(seed=seed, length=length)
            self.zombie_frequency = float(zombie_frequency)

        def reset(self):
            super().reset()
            if self.zombie_frequency == 0:
                # D.6: at f = 0 every zombie that terrain generation placed is removed before the first step.
                for obj in self._world.objects:
                    if isinstance(obj, objects.Zombie):
                        self._world.remove(obj)
            return None

        def _obs(self):
            # Upstream's LocalView adds noise at night with world.random.uniform(32, 127, canvas_shape);
            # draw the same numbers (and discard them) so the world evolves exactly as upstream's does.
            if self._world.daylight < 0.5:
                unit = self._size // self._view
                self._world.random.uniform(32, 127, tuple(self._local_view._grid * unit))
            return None

        def _balance_chunk(self, chunk, objs):
            # Upstream's balancing with the zombie line scaled by f (D.6); f = 1 gives upstream's numbers exactly.
            # Upstream picks the creature to despawn from a set ordered by memory address, so two upstream
            # worlds with one seed drift apart after the first despawn; ordering by position makes a seed
            # reproducible and changes nothing else.
            objs = sorted(objs, key=_position)
            f = self.zombie_frequency
            light = self._world.daylight
            self._balance_object(
                chunk, objs, objects.Zombie, "grass", 6, 0, min(1.0, 0.3 * f), min(1.0, 0.4 * f),
                lambda pos: objects.Zombie(self._world, pos, self._player),
                lambda num, space: ((0 if space < 50 else 3.5 - 3 * light) * f, (3.5 - 3 * light) * f))
            self._balance_object(
                chunk, objs, objects.Skeleton, "path", 7, 7, 0.1, 0.1,
                lambda pos: objects.Skeleton(self._world, pos, self._player),
                lambda num, space: (0 if space < 6 else 1, 2))
            self._balance_object(
                chunk, objs, objects.Cow, "grass", 5, 5, 0.01, 0.1,
                lambda pos: objects.Cow(self._world, pos),
                lambda num, space: (0 if space < 30 else 1, 1.5 + light))

    return _World


_WORLD_CLASS = None


def _position(obj: Any) -> tuple[int, int]:
    return int(obj.pos[0]), int(obj.pos[1])  # one object per cell, so this orders a chunk's objects totally


def make_world(seed: int, zombie_frequency: float = 1.0, length: int = MAX_STEPS):
    """An upstream `crafter.Env` with the zombie knob and no pixel rendering (`step` returns obs=None)."""
    global _WORLD_CLASS
    if _WORLD_CLASS is None:
        _WORLD_CLASS = _world_class()
    return _WORLD_CLASS(seed, zombie_frequency, length)


def _offset_text(dx: int, dy: int) -> str:
    parts = []
    if dx:
        parts.append(f"{abs(dx)}{'E' if dx > 0 else 'W'}")
    if dy:
        parts.append(f"{abs(dy)}{'S' if dy > 0 else 'N'}")
    return " ".join(parts) or "here"


def _thing_name(obj: Any) -> str:
    kind = type(obj).__name__.lower()
    if kind == "plant":
        return "ripe plant" if obj.ripe else "sapling (growing plant)"
    return kind


def render_observation(world: Any, step: int, max_steps: int, new_achievements: list[str] = ()) -> str:
    """The D.3 text view: vital status, inventory, visible things with offsets, and the thing in front."""
    player = world._player
    inv = player.inventory
    px, py = int(player.pos[0]), int(player.pos[1])
    lines = ["<<OBSERVATION_BEGIN>>"]
    daylight = float(world._world.daylight)
    lines.append(f"Step {step} of {max_steps}. It is {'day' if daylight >= 0.5 else 'night'} (daylight {daylight:.2f}).")
    state = "asleep" if player.sleeping else "awake"
    lines.append(
        f"Vitals: health {inv['health']}/9, food {inv['food']}/9, drink {inv['drink']}/9, "
        f"energy {inv['energy']}/9; you are {state}."
    )
    items = [f"{k} {v}" for k, v in inv.items() if k not in ("health", "food", "drink", "energy") and v > 0]
    lines.append("Inventory: " + (", ".join(items) if items else "empty") + ".")

    fx, fy = int(player.facing[0]), int(player.facing[1])
    material, obj = world._world[(px + fx, py + fy)]
    front = _thing_name(obj) if obj is not None else (material or "the edge of the world")
    lines.append(f"Facing {_DIRECTIONS[(fx, fy)]}; directly in front of you: {front}.")

    # Read the 9x9 window straight from the world's id maps: per-cell world[...] lookups cost more than the
    # simulation step itself.
    w = world._world
    x0, x1 = max(px - VIEW_RADIUS, 0), min(px + VIEW_RADIUS + 1, w.area[0])
    y0, y1 = max(py - VIEW_RADIUS, 0), min(py + VIEW_RADIUS + 1, w.area[1])
    mat_ids = w._mat_map[x0:x1, y0:y1].tolist()
    obj_ids = w._obj_map[x0:x1, y0:y1].tolist()
    seen: dict[str, list[tuple[int, int, int]]] = {}
    for i, column in enumerate(mat_ids):
        dx = x0 + i - px
        for j, mat in enumerate(column):
            dy = y0 + j - py
            if dx == 0 and dy == 0:
                continue
            obj_index = obj_ids[i][j]
            if obj_index:
                seen.setdefault(_thing_name(w._objects[obj_index]), []).append((abs(dx) + abs(dy), dx, dy))
            material = w._mat_names[mat]
            if material is not None and material != "grass":
                seen.setdefault(material, []).append((abs(dx) + abs(dy), dx, dy))
    lines.append(
        "You see (offsets from you: E/W = east/west, N/S = north/south; nearest first; everything else is grass):"
    )
    if not seen:
        lines.append("- only grass")
    for kind in sorted(seen, key=lambda k: (min(seen[k])[0], k)):
        spots = sorted(seen[kind])
        shown = ", ".join(_offset_text(dx, dy) for _, dx, dy in spots[:_MAX_PER_KIND])
        more = f" (+{len(spots) - _MAX_PER_KIND} more)" if len(spots) > _MAX_PER_KIND else ""
        lines.append(f"- {kind}: {shown}{more}")
    unlocked = sum(1 for a in ACHIEVEMENTS if player.achievements[a] > 0)
    lines.append(f"Achievements unlocked: {unlocked}/22.")
    for a in new_achievements:
        lines.append(f"New achievement: {_title(a)}!")
    if inv["health"] <= 0:
        lines.append("You died. The episode is over.")
    lines.append("<<OBSERVATION_END>>")
    return "\n".join(lines)


def _title(name: str) -> str:
    return name.replace("_", " ").title()


def _as_observed(primitives: tuple[Primitive, ...], observe: str) -> tuple[Primitive, ...]:
    """D.2: in the paper's mode (`observe: paper`) each game-advancing primitive returns None, listed `-> None`;
    `every_step` keeps `-> str` (each returns the observation after it)."""
    return tuple(replace(p, returns="None") if p.advances and observe == "paper" else p for p in primitives)


class CrafterEnv(Env):
    """One Crafter world, keyed by its integer seed."""

    benchmark = "crafter"


    def __init__(self, task_id: str, zombie_frequency: float = 1.0, max_steps: int = MAX_STEPS,
                 observe: str = "paper"):
        super().__init__(task_id)
        self.seed = _parse_seed(task_id)
        self.zombie_frequency = zombie_frequency
        self.max_steps = max_steps
        self.observe = observe
        self.world: Any = None

    def reset(self) -> str:
        self.world = make_world(self.seed, self.zombie_frequency, self.max_steps)
        self.world.reset()
        self.done, self.total_reward, self.n_primitive_steps = False, 0.0, 0
        self._unseen: list[str] = []
        return self.observation()

    def listed_primitives(self) -> tuple[Primitive, ...]:
        return _as_observed(self.primitives(), self.observe)

    def observation(self, new_achievements: list[str] = ()) -> str:
        return render_observation(self.world, self.world._step, self.max_steps, new_achievements)

    def unlocked(self) -> list[str]:
        return [a for a in ACHIEVEMENTS if self.world._player.achievements[a] > 0]

    def _apply(self, name: str, args: list[Any]) -> StepResult:
        if self.world is None:
            raise RuntimeError(f"Crafter episode {self.task_id!r} was not reset")
        if name == "get_current_observation":  # achievements unlocked since the last look are announced
            new, self._unseen = self._unseen, []
            return StepResult(self.observation(new))
        before = set(self.unlocked())
        _, reward, done, _ = self.world.step(self.world.action_names.index(ACTIONS[name]))
        new = [a for a in self.unlocked() if a not in before]
        if self.observe == "paper":  # D.2/D.3: the world is read with get_current_observation()
            self._unseen += new
            return StepResult("None", float(reward), bool(done), returns_none=True)
        return StepResult(self.observation(new), float(reward), bool(done))

    def score(self) -> float:
        return len(self.unlocked()) / len(ACHIEVEMENTS) if self.world is not None else 0.0

    def success(self) -> bool:
        # Crafter has no pass/fail: it is scored by progression (score). Success means every achievement.
        return self.world is not None and len(self.unlocked()) == len(ACHIEVEMENTS)

    # --- primitives (their docstrings are the agent's tool list) -------------------------------------------
    @primitive
    def move_north(self) -> str:
        """Face north and step north if the cell is free (grass, sand or path). One tick."""
        return self.step("move_north").observation

    @primitive
    def move_south(self) -> str:
        """Face south and step south if the cell is free. One tick."""
        return self.step("move_south").observation

    @primitive
    def move_east(self) -> str:
        """Face east and step east if the cell is free. One tick."""
        return self.step("move_east").observation

    @primitive
    def move_west(self) -> str:
        """Face west and step west if the cell is free. One tick."""
        return self.step("move_west").observation

    @primitive
    def do(self) -> str:
        """Act on the thing in front: collect a material (tree -> wood, stone, coal, iron, diamond, sapling from
        grass), drink from water, eat a cow or a ripe plant, or hit a zombie or skeleton. One tick."""
        return self.step("do").observation

    @primitive
    def sleep(self) -> str:
        """Fall asleep (when energy is below maximum) to restore energy; you wake up when it is full. One tick."""
        return self.step("sleep").observation

    @primitive
    def noop(self) -> str:
        """Do nothing for one tick."""
        return self.step("noop").observation

    @primitive
    def place_stone(self) -> str:
        """Place a stone in front (on grass, sand, path, water or lava); uses stone. One tick."""
        return self.step("place_stone").observation

    @primitive
    def place_table(self) -> str:
        """Place a crafting table in front (on grass, sand or path); uses wood. One tick."""
        return self.step("place_table").observation

    @primitive
    def place_furnace(self) -> str:
        """Place a furnace in front (on grass, sand or path); uses stone. One tick."""
        return self.step("place_furnace").observation

    @primitive
    def place_plant(self) -> str:
        """Plant a sapling on the grass in front; uses a sapling. One tick."""
        return self.step("place_plant").observation

    @primitive
    def make_wood_pickaxe(self) -> str:
        """Craft a wood pickaxe; needs wood and a nearby table. One tick."""
        return self.step("make_wood_pickaxe").observation

    @primitive
    def make_stone_pickaxe(self) -> str:
        """Craft a stone pickaxe; needs wood, stone and a nearby table. One tick."""
        return self.step("make_stone_pickaxe").observation

    @primitive
    def make_iron_pickaxe(self) -> str:
        """Craft an iron pickaxe; needs wood, coal, iron and a nearby table and furnace. One tick."""
        return self.step("make_iron_pickaxe").observation

    @primitive
    def make_wood_sword(self) -> str:
        """Craft a wood sword; needs wood and a nearby table. One tick."""
        return self.step("make_wood_sword").observation

    @primitive
    def make_stone_sword(self) -> str:
        """Craft a stone sword; needs wood, stone and a nearby table. One tick."""
        return self.step("make_stone_sword").observation

    @primitive
    def make_iron_sword(self) -> str:
        """Craft an iron sword; needs wood, coal, iron and a nearby table and furnace. One tick."""
        return self.step("make_iron_sword").observation

    @primitive(advances=False)
    def get_current_observation(self) -> str:
        """Return the current observation without advancing the world."""
        return self.step("get_current_observation").observation


def _parse_seed(task_id: str) -> int:
    text = str(task_id).strip()
    if not text.isdigit():
        raise TaskError(f"Crafter task id must be a non-negative integer world seed, got {task_id!r}")
    return int(text)


def _recipes() -> str:
    # Read from the installed crafter's rules so the prompt can never disagree with the engine.
    from crafter import constants

    lines = []
    for name, info in constants.place.items():
        uses = ", ".join(f"{n} {k}" for k, n in info["uses"].items())
        lines.append(f"- place_{name}: {uses}")
    for name, info in constants.make.items():
        uses = ", ".join(f"{n} {k}" for k, n in info["uses"].items())
        lines.append(f"- make_{name}: {uses}; near {' and '.join(info['nearby'])}")
    for name, info in constants.collect.items():
        need = ", ".join(info["require"]) or "nothing"
        lines.append(f"- do() on {name}: needs {need}; gives {', '.join(info['receive'])}")
    return "\n".join(lines)


class CrafterBenchmark(Benchmark):
    name = "crafter"
    env_class = CrafterEnv
    requires = ("crafter",)
    llm_call_budget = 2000  # D.4
    headline = "progression"  # D.4: an episode scores the fraction of the 22 achievements it unlocked

    # World seeds of the two splits come from disjoint ranges, so they never overlap for any top-level seed.
    _SEED_RANGES = {"train": (0, 2**30), "test": (2**30, 2**31 - 1)}

    # Prompt files for the environment description: "paper" names the 22 achievements and no more (D.5);
    # "recipes" adds survival advice and every recipe read from the engine, beyond the paper's prompt.
    PROMPTS = ("paper", "recipes")

    # What an advancing primitive returns: "paper" (D.2/D.3) None, the world read with
    # get_current_observation(); "every_step" the whole observation after every action (a deviation).
    OBSERVE = ("paper", "every_step")

    def __init__(self, zombie_frequency: float = 1.0, max_steps: int = MAX_STEPS, prompt: str = "paper",
                 observe: str = "paper", **unknown: Any):
        if unknown:
            raise TaskError(f"crafter: unknown option(s) {sorted(unknown)}; known: zombie_frequency, max_steps, "
                            f"prompt, observe")
        if observe not in self.OBSERVE:
            raise TaskError(f"crafter: observe must be one of {', '.join(self.OBSERVE)}, got {observe!r}")
        self.observe = observe
        try:
            f = float(zombie_frequency)
        except (TypeError, ValueError):
            raise TaskError(f"crafter: zombie_frequency must be a number >= 0, got {zombie_frequency!r}") from None
        if not f >= 0 or f == float("inf"):
            raise TaskError(f"crafter: zombie_frequency must be a finite number >= 0, got {zombie_frequency!r}")
        if int(max_steps) < 1:
            raise TaskError(f"crafter: max_steps must be >= 1, got {max_steps!r}")
        self.zombie_frequency = f
        self.max_steps = int(max_steps)
        observing = ("Action functions return None: call get_current_observation() to see the world."
                     if observe == "paper" else "Each action function returns the observation after it.")
        self.prompt = env_prompt(self.name, prompt, self.PROMPTS, max_steps=self.max_steps, observing=observing,
                                 recipes=_recipes(),
                                 achievements=", ".join(_title(a) for a in ACHIEVEMENTS))

    def describe(self) -> str:
        return self.prompt

    def run_task_seed(self, task_seed: int, run_seed: int) -> int:
        # D.1: the three runs play different worlds (each run its own top-level seed); every method of one
        # run plays the same ones.
        return task_seed + run_seed

    def pool_size(self, split: str) -> int:
        check_split(split)
        lo, hi = self._SEED_RANGES[split]
        return hi - lo

    def sample_tasks(self, split: str, n: int, seed: int) -> list[str]:
        check_split(split)
        lo, hi = self._SEED_RANGES[split]
        return [str(s) for s in random.Random(seed).sample(range(lo, hi), n)]

    def primitives(self) -> tuple[Primitive, ...]:
        return _as_observed(super().primitives(), self.observe)

    def make(self, task_id: str) -> CrafterEnv:
        _parse_seed(task_id)
        return CrafterEnv(task_id, zombie_frequency=self.zombie_frequency, max_steps=self.max_steps,
                          observe=self.observe)
