"""ALFWorld games generated offline from the room layouts the `alfworld` wheel ships.

The official ALFWorld game files come only from `alfworld-download` (internet). What the wheel does ship is
enough to build genuine games: the ALFRED object/receptacle tables (`alfworld.gen.constants`), the goal
formulas and task sentences of every task type (`alfworld.gen.goal_library`) and, for 120 AI2-THOR rooms,
which object types exist (`FloorPlanN-objects.json`) and where each receptacle stands
(`FloorPlanN-openable.json`). A game here is a PDDL problem over those rooms, played by the wheel's own
`alfred.pddl` rules and `alfred.twl2` grammar; only the placement of objects is ours.

Determinism: everything is drawn from `random.Random` seeded with a string of (version, task type, seed),
which Python hashes with SHA-512, so a game is the same on every machine and in every process.
Splits: seeds below TEST_SEED_BASE are training games in ALFRED's 96 training rooms; seeds from
TEST_SEED_BASE on are test games in the 24 rooms ALFRED holds out, as ALFWorld's valid_unseen split does.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import alfworld.gen.constants as C
import alfworld.gen.goal_library as goal_library

from skillrepro.store import write_text

# Bump when a change alters the games a seed produces; the cache folder is keyed by it.
GENERATOR_VERSION = 1
TEST_SEED_BASE = 1_000_000
# A room keeps at most this many object types besides the target. Fast Downward's planning time grows
# steeply with the number of carryable objects (a kitchen with all ~37 objects: 50-200 s per plan; with
# ~15-20: a few seconds), and the search over receptacles, which is what makes ALFWorld hard, is unchanged.
MAX_DISTRACTOR_TYPES = 10

# Our short names (the categories prompts key skills by) -> ALFRED's task type names.
TASK_TYPES = {
    "pick_and_place": "pick_and_place_simple",
    "look_at_obj_in_light": "look_at_obj_in_light",
    "clean": "pick_clean_then_place_in_recep",
    "heat": "pick_heat_then_place_in_recep",
    "cool": "pick_cool_then_place_in_recep",
    "pick_two": "pick_two_obj_and_place",
}
SHORT_TYPE = {long: short for short, long in TASK_TYPES.items()}

# The receptacle an action needs, and which objects it applies to (ALFRED's VAL_ACTION_OBJECTS).
_ACTION = {
    "clean": ("SinkBasin", "cleanable", C.VAL_ACTION_OBJECTS["Cleanable"]),
    "heat": ("Microwave", "heatable", C.VAL_ACTION_OBJECTS["Heatable"]),
    "cool": ("Fridge", "coolable", C.VAL_ACTION_OBJECTS["Coolable"]),
}
_STATIC_RECEPTACLES = frozenset(C.RECEPTACLES - C.MOVABLE_RECEPTACLES_SET)
# Objects an agent can carry: whatever some receptacle may hold, minus the sliced variants (ALFWorld drops
# sliced trajectories).
_PLACEABLE = frozenset(
    t for t in set().union(*C.VAL_RECEPTACLE_OBJECTS.values()) if not t.endswith("Sliced")
) - _STATIC_RECEPTACLES
_LAMPS = ("DeskLamp", "FloorLamp")
# Lamps are not in ALFRED's placement table; they stand on furniture like these.
_LAMP_SUPPORTS = ("Desk", "SideTable", "Dresser", "DiningTable", "CoffeeTable", "Shelf", "TVStand", "Ottoman")
_LAYOUTS = Path(C.__file__).resolve().parent / "layouts"


class GeneratorError(ValueError):
    """A task type or seed the generator cannot turn into a game."""


@dataclass(frozen=True)
class Receptacle:
    id: str  # ALFRED-style id, e.g. "Cabinet|+00.68|+00.50|-02.20" or "Sink|...|SinkBasin"
    type: str  # ALFRED class, e.g. "Cabinet", "SinkBasin"
    location: str


@dataclass(frozen=True)
class Scene:
    number: int
    room: str
    receptacles: tuple[Receptacle, ...]
    object_types: tuple[str, ...]  # carryable types present in the room, sorted
    lamps: tuple[str, ...]

    def receptacle_types(self) -> set[str]:
        return {r.type for r in self.receptacles}


@dataclass(frozen=True)
class GeneratedGame:
    game_id: str
    task_type: str  # short name, a key of TASK_TYPES
    task: str  # the task sentence, as the intro states it after "Your task is to: "
    seed: int
    split: str
    scene: int
    object_type: str
    parent_type: str
    toggle_type: str
    pddl_problem: str
    version: int = GENERATOR_VERSION


def split_of_seed(seed: int) -> str:
    return "test" if seed >= TEST_SEED_BASE else "train"


def game_id(task_type: str, seed: int) -> str:
    return f"gen:{task_type}:{seed}"


def _room(number: int) -> str:
    return next(room for room, numbers in C.SCENE_TYPE.items() if number in numbers)


def scene_numbers(split: str) -> list[int]:
    wanted = C.TEST_SCENE_NUMBERS if split == "test" else C.TRAIN_SCENE_NUMBERS
    return sorted(n for n in wanted if (_LAYOUTS / f"FloorPlan{n}-objects.json").exists())


def _loc(x: float, z: float, rotation: float, horizon: float) -> str:
    # ALFRED's location names: grid cells of 0.25 m, rotation in quarter turns, camera horizon in degrees.
    return "loc|%d|%d|%d|%d" % (round(x / C.AGENT_STEP_SIZE), round(z / C.AGENT_STEP_SIZE), round(rotation / 90) % 4,
                                round(horizon))


def _receptacle_type(rid: str) -> str:
    parts = rid.split("|")
    # Sinks and bathtubs are listed as "Sink|x|y|z|SinkBasin": the basin is the receptacle.
    return parts[-1] if len(parts) > 4 else parts[0]


@lru_cache(maxsize=None)
def load_scene(number: int) -> Scene:
    objects_file = _LAYOUTS / f"FloorPlan{number}-objects.json"
    points_file = _LAYOUTS / f"FloorPlan{number}-openable.json"
    if not objects_file.exists() or not points_file.exists():
        raise GeneratorError(f"the alfworld wheel has no layout for FloorPlan{number} (looked in {_LAYOUTS})")
    present = set(json.loads(objects_file.read_text()))
    points = json.loads(points_file.read_text())
    receptacles = []
    for rid in sorted(points):
        rtype = _receptacle_type(rid)
        if rtype in _STATIC_RECEPTACLES:
            receptacles.append(Receptacle(rid, rtype, _loc(*points[rid])))
    # Receptacles the room has but the layout gives no standing point for (stove burners, toasters,
    # coffee machines, most garbage cans): each gets a place of its own, away from the real grid points.
    known = {r.type for r in receptacles}
    for k, rtype in enumerate(sorted((present & _STATIC_RECEPTACLES) - known)):
        count = 4 if rtype == "StoveBurner" else 1  # AI2-THOR stoves have four burners, two per standing point
        for i in range(count):
            loc = "loc|%d|%d|%d|%d" % (100 + k, 100 + i // 2, 0, 30)
            receptacles.append(Receptacle(f"{rtype}|synthetic|{i + 1:02d}", rtype, loc))
    return Scene(
        number=number,
        room=_room(number),
        receptacles=tuple(receptacles),
        object_types=tuple(sorted(present & _PLACEABLE)),
        lamps=tuple(t for t in _LAMPS if t in present),
    )


def _can_hold(rtype: str, otype: str) -> bool:
    return otype in C.VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def task_options(task_type: str, scene: Scene) -> list[tuple[str, str, str]]:
    """Every (object type, parent receptacle type, lamp type) this room supports for `task_type`."""
    rtypes = scene.receptacle_types()
    if task_type == "look_at_obj_in_light":
        if not any(r.type in _LAMP_SUPPORTS for r in scene.receptacles):
            return []
        return [
            (o, "", lamp)
            for o in scene.object_types
            for lamp in scene.lamps
            if any(_can_hold(r, o) for r in rtypes)
        ]
    action_rtype, _, action_objects = _ACTION.get(task_type, (None, None, None))
    if action_rtype is not None and action_rtype not in rtypes:
        return []
    out = []
    for o in scene.object_types:
        if action_objects is not None and o not in action_objects:
            continue
        for parent in sorted(rtypes):
            # The parent must accept the object, must not be the appliance the task uses, and the room
            # must offer another receptacle to start the object in (else the goal would hold at once).
            if parent == action_rtype or not _can_hold(parent, o):
                continue
            if any(_can_hold(r, o) for r in rtypes - {parent}):
                out.append((o, parent, ""))
    return out


def _pddl_name(alfred_id: str) -> str:
    # ALFRED's escaping of ids into PDDL names; AlfredDemangler undoes it ("Cabinet|..." -> "cabinet 3").
    for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        alfred_id = alfred_id.replace(a, b)
    return alfred_id


def generate(task_type: str, seed: int) -> GeneratedGame:
    """The game of `task_type` for `seed`: same inputs, same game."""
    if task_type not in TASK_TYPES:
        raise GeneratorError(f"unknown ALFWorld task type {task_type!r}; known: {', '.join(TASK_TYPES)}")
    if not isinstance(seed, int) or seed < 0:
        raise GeneratorError(f"game seed must be a non-negative integer, got {seed!r}")
    long_type = TASK_TYPES[task_type]
    rng = random.Random(f"skillrepro-alfworld:{GENERATOR_VERSION}:{task_type}:{seed}")
    split = split_of_seed(seed)
    rooms = [n for n in scene_numbers(split) if _room(n) in C.GOALS_VALID[long_type]]
    rng.shuffle(rooms)
    for number in rooms:
        scene = load_scene(number)
        options = task_options(task_type, scene)
        if options:
            break
    else:
        raise GeneratorError(f"no {split} room of the alfworld wheel supports task type {task_type!r}")
    obj, parent, toggle = rng.choice(options)
    problem = _problem(rng, task_type, scene, obj, parent, toggle)
    template = rng.choice(goal_library.gdict[long_type]["templates"])
    task = template.format(obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
    return GeneratedGame(
        game_id=game_id(task_type, seed), task_type=task_type, task=task, seed=seed, split=split,
        scene=scene.number, object_type=obj, parent_type=parent, toggle_type=toggle, pddl_problem=problem,
    )


def _problem(rng: random.Random, task_type: str, scene: Scene, obj: str, parent: str, toggle: str) -> str:
    receptacles = list(scene.receptacles)
    # Objects: up to MAX_DISTRACTOR_TYPES carryable types of the room, 1-2 of each; the target 1-3 (2-3 for
    # pick_two), never starting in a receptacle of the goal's type.
    placed: list[tuple[str, str, Receptacle]] = []  # (object id, type, receptacle)
    others = [t for t in scene.object_types if t != obj]
    kept = set(rng.sample(others, min(MAX_DISTRACTOR_TYPES, len(others)))) | {obj}
    for otype in scene.object_types:
        if otype not in kept:
            continue
        if otype == obj:
            count = rng.randint(2, 3) if task_type == "pick_two" else rng.randint(1, 3)
        else:
            count = rng.randint(1, 2)
        homes = [r for r in receptacles if _can_hold(r.type, otype) and not (otype == obj and r.type == parent)]
        if not homes:
            continue
        for i in range(count):
            placed.append((f"{otype}|{scene.number:03d}|{i + 1:02d}", otype, rng.choice(homes)))
    for lamp in scene.lamps:
        supports = [r for r in receptacles if r.type in _LAMP_SUPPORTS]
        if supports:
            placed.append((f"{lamp}|{scene.number:03d}|01", lamp, rng.choice(supports)))

    agent_loc = "loc|start|0|0|30"
    locations = sorted({r.location for r in receptacles} | {agent_loc})
    otypes = sorted({t for _, t, _ in placed})
    rtypes = sorted({r.type for r in receptacles})
    objects = (
        ["agent1 - agent"]
        + [f"{_pddl_name(oid)} - object" for oid, _, _ in placed]
        + [f"{_pddl_name(r.id)} - receptacle" for r in receptacles]
        + [f"{_pddl_name(loc)} - location" for loc in locations]
        + [f"{t}Type - otype" for t in otypes]
        + [f"{t}Type - rtype" for t in rtypes]
    )
    init = [f"(atLocation agent1 {_pddl_name(agent_loc)})"]
    for r in receptacles:
        name = _pddl_name(r.id)
        init.append(f"(receptacleType {name} {r.type}Type)")
        init.append(f"(receptacleAtLocation {name} {_pddl_name(r.location)})")
        if r.type in C.OPENABLE_CLASS_SET:
            init.append(f"(openable {name})")
    for oid, otype, r in placed:
        name = _pddl_name(oid)
        init.append(f"(objectType {name} {otype}Type)")
        init.append(f"(inReceptacle {name} {_pddl_name(r.id)})")
        init.append(f"(objectAtLocation {name} {_pddl_name(r.location)})")
        if otype in _LAMPS:
            init.append(f"(toggleable {name})")
            continue
        init.append(f"(pickupable {name})")
        if otype in C.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {name})")
        for _, predicate, allowed in _ACTION.values():
            if otype in allowed:
                init.append(f"({predicate} {name})")
    init += [f"(canContain {rt}Type {ot}Type)" for rt in rtypes for ot in otypes if _can_hold(rt, ot)]
    # The goal formula is ALFRED's own, from the wheel's goal library ('#' is its escaped '-').
    goal = goal_library.gdict[TASK_TYPES[task_type]]["pddl"].format(obj=obj, recep=parent, toggle=toggle, mrecep="")
    goal = goal.replace("#", "-").strip()
    lines = "\n        ".join
    return (
        f"(define (problem skillrepro_{task_type}_{scene.number})\n"
        f"    (:domain alfred)\n"
        f"    (:objects\n        {lines(objects)}\n    )\n"
        f"    (:init\n        {lines(init)}\n    )\n"
        f"    {goal}\n"  # the library's goal text closes the (define ...) itself
    )


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("SKILLREPRO_CACHE", Path.home() / ".cache" / "skillrepro")) / "alfworld"


def cached_game(task_type: str, seed: int, cache_dir: str | os.PathLike | None = None) -> GeneratedGame:
    """`generate(task_type, seed)`, read from the cache folder when an earlier call wrote it there."""
    path = cache_root(cache_dir) / f"gen-v{GENERATOR_VERSION}" / task_type / f"{seed}.json"
    if path.exists():
        try:
            data = json.loads(path.read_text())
            if data.get("version") == GENERATOR_VERSION:
                return GeneratedGame(**data)
        except (ValueError, TypeError):
            pass  # a damaged cache file is regenerated below
    game = generate(task_type, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so parallel jobs never read half a file.
    write_text(path, json.dumps(asdict(game)))
    return game
