"""ALFWorld (text): household tasks of six types, played by the real engine.

Long because it holds both game sources (generated and official) and the engine's adapter.

Every game, generated here or official, runs on textworld's `PddlEnv` with the `alfworld` wheel's
`AlfredDemangler`, from three texts: the PDDL domain (`alfred.pddl`), the grammar (`alfred.twl2`, with the
task sentence written in) and the PDDL problem. Generated games (`_alfworld_gen`) take the domain and grammar
from the wheel; official games bring their own in `game.tw-pddl`. After loading, both take the same path.

Task ids: `gen:<task type>:<seed>` for generated games (seeds >= _alfworld_gen.TEST_SEED_BASE are the test
split, played in rooms the training games never use), `official:<split folder>/<task folder>/<trial>` for
games under `data_path` (train = `json_2.1.1/train`, test = `json_2.1.1/valid_unseen`).
"""
from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

# Importing alfworld sets ALFWORLD_DATA to its default (~/.cache/alfworld) when unset, so read the user's
# value before the first import of it.
_USER_ALFWORLD_DATA = os.environ.get("ALFWORLD_DATA")
_ALFWORLD_DEFAULT_DATA = os.path.expanduser("~/.cache/alfworld")

from skillrepro.benchmarks import _alfworld_gen as gen  # noqa: E402  (imports alfworld)
from skillrepro.benchmarks.base import Benchmark, Env, StepResult, TaskError, check_split, env_prompt, primitive

TASK_TYPES = tuple(gen.TASK_TYPES)  # pick_and_place, look_at_obj_in_light, clean, heat, cool, pick_two
MAX_STEPS = 50
OFFICIAL_SPLITS = {"train": "train", "test": "valid_unseen"}
NOTHING_HAPPENS = "Nothing happens."
_TASK_RE = re.compile(r"Your task is to: (.+?)\.?\s*$", re.M)


@dataclass(frozen=True)
class AlfWorldGame:
    """Everything needed to play one game, whatever its source."""

    game_id: str
    task_type: str  # one of TASK_TYPES: the category prompts key skills by
    task: str  # the task sentence, e.g. "put a clean apple in fridge"
    split: str  # train | test
    pddl_domain: str
    grammar: str
    pddl_problem: str
    source: str  # generated | official
    path: str | None = None  # the game.tw-pddl of an official game


@lru_cache(maxsize=1)
def _wheel_logic() -> tuple[str, str]:
    import alfworld

    data = Path(alfworld.__file__).resolve().parent / "data"
    return (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()


def generated_game(task_type: str, seed: int, cache_dir: str | os.PathLike | None = None) -> AlfWorldGame:
    g = gen.cached_game(task_type, seed, cache_dir)
    domain, grammar = _wheel_logic()
    return AlfWorldGame(g.game_id, g.task_type, g.task, g.split, domain, grammar.replace("UNKNOWN GOAL", g.task),
                        g.pddl_problem, "generated")


# ---- official data ------------------------------------------------------------------------------------

def _json_root(data_path: Path) -> Path:
    """Accept the ALFWORLD_DATA folder itself or its json_2.1.1 subfolder."""
    return data_path / "json_2.1.1" if (data_path / "json_2.1.1").is_dir() else data_path


def index_official(data_path: str | os.PathLike, split: str) -> dict[str, Path]:
    """game id -> trial folder, for every playable game of `split`, as alfworld's own loader selects them:
    a traj_data.json and a game.tw-pddl marked solvable, one of the six task types, no movable-receptacle
    or sliced task."""
    root = _json_root(Path(data_path).expanduser())
    folder = root / OFFICIAL_SPLITS[split]
    out: dict[str, Path] = {}
    if not folder.is_dir():
        return out
    for traj in sorted(folder.rglob("traj_data.json")):
        trial = traj.parent
        game_file = trial / "game.tw-pddl"
        rel = trial.relative_to(root).as_posix()
        if not game_file.exists() or "movable" in rel or "Sliced" in rel:
            continue
        task_type = rel.split("/")[1].split("-")[0] if rel.count("/") >= 2 else ""
        if task_type not in gen.SHORT_TYPE:
            try:
                task_type = json.loads(traj.read_text()).get("task_type", "")
            except ValueError:
                continue
        if task_type not in gen.SHORT_TYPE:
            continue
        try:
            solvable = json.loads(game_file.read_text()).get("solvable")
        except ValueError:
            continue
        if solvable is not True:  # alfworld skips games never checked and games found unsolvable
            continue
        out[f"official:{rel}"] = trial
    return out


def load_official_game(game_id: str, trial: Path, split: str) -> AlfWorldGame:
    game_file = trial / "game.tw-pddl"
    try:
        data = json.loads(game_file.read_text())
        traj = json.loads((trial / "traj_data.json").read_text())
    except (OSError, ValueError) as e:
        raise TaskError(f"ALFWorld game {game_id}: cannot read {game_file} or its traj_data.json: {e}") from e
    missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if k not in data]
    if missing:
        raise TaskError(f"ALFWorld game file {game_file} lacks {', '.join(missing)}")
    if data.get("solvable") is False:
        raise TaskError(f"ALFWorld game {game_id} is marked unsolvable in {game_file}")
    long_type = traj.get("task_type", "")
    if long_type not in gen.SHORT_TYPE:
        raise TaskError(f"ALFWorld game {game_id}: task type {long_type!r} is not one of the six")
    grammar = data["grammar"]
    if "UNKNOWN GOAL" in grammar:
        # Game files written without a task sentence: fill in ALFRED's template, chosen by the game id so
        # that every run states the task the same way.
        import alfworld.gen.goal_library as goal_library

        p = traj["pddl_params"]
        template = random.Random(game_id).choice(goal_library.gdict[long_type]["templates"])
        sentence = template.format(obj=p["object_target"].lower(), recep=p["parent_target"].lower(),
                                   toggle=p.get("toggle_target", "").lower(), mrecep=p.get("mrecep_target", "").lower())
        grammar = grammar.replace("UNKNOWN GOAL", sentence)
    m = _TASK_RE.search(grammar.replace('\\n', '\n').replace('"', '\n'))
    task = m.group(1) if m else ""
    return AlfWorldGame(game_id, gen.SHORT_TYPE[long_type], task, split, data["pddl_domain"], grammar,
                        data["pddl_problem"], "official", str(game_file))


# ---- the engine ---------------------------------------------------------------------------------------

def start_engine(game: AlfWorldGame, *, policy: bool = False):
    """textworld's PddlEnv behind alfworld's AlfredDemangler, loaded with `game` (not yet reset)."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs.pddl import PddlEnv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=policy)
    engine = AlfredDemangler(env=PddlEnv(infos))
    engine.load({"pddl_domain": game.pddl_domain, "grammar": game.grammar, "pddl_problem": game.pddl_problem})
    return engine


def stop_engine(engine) -> None:
    # Each PddlEnv loads its own copy of Fast Downward's library: free the planning task it holds. The
    # library itself stays mapped: unloading it (fast_downward.close_lib) crashed the interpreter at exit
    # once in our trials, and its code pages are file-backed, so the OS can drop them.
    lib = getattr(engine, "downward_lib", None)
    if lib is not None:
        lib.cleanup()


def policy_commands(game: AlfWorldGame) -> list[str]:
    """The bundled planner's command sequence from the start of `game` (textworld's `policy_commands`)."""
    engine = start_engine(game, policy=True)
    try:
        return list(engine.reset()["policy_commands"])
    finally:
        stop_engine(engine)


def _norm(text: Any) -> str:
    return " ".join(str(text).lower().split())


class AlfWorldEnv(Env):
    """One ALFWorld game. Every primitive issues one text command; a command the game does not admit
    returns ALFWorld's own "Nothing happens." and still uses a step."""

    benchmark = "alfworld"

    def __init__(self, task_id: str, game: AlfWorldGame, max_steps: int = MAX_STEPS, show_admissible: bool = True):
        super().__init__(task_id)
        self.game = game
        self.max_steps = max_steps
        self.show_admissible = show_admissible
        self._engine = None
        self._state = None
        self._won = False

    # -- what prompts need --
    @property
    def task(self) -> str:
        return self.game.task

    @property
    def task_type(self) -> str:
        return self.game.task_type

    @property
    def feedback(self) -> str:
        """The engine's text for the last command (or the intro after reset), without the action list."""
        return self._state.feedback.strip() if self._state is not None else ""

    @property
    def admissible_actions(self) -> list[str]:
        """The commands the game admits now, sorted; "help" left out, as ALFWorld agents usually do."""
        if self._state is None:
            return []
        return [c for c in self._state["admissible_commands"] if c != "help"]

    def render(self) -> str:
        text = self.feedback
        if self.show_admissible:
            text += "\n\nAdmissible actions: " + ", ".join(self.admissible_actions)
        return text

    # -- Env interface --
    def reset(self) -> str:
        if self._engine is None:
            self._engine = start_engine(self.game)
        self._state = self._engine.reset()
        self._won = bool(self._state["won"])
        self.done = False
        self.total_reward = 0.0
        self.n_primitive_steps = 0
        return self.render()

    def _apply(self, name: str, args: list[Any]) -> StepResult:
        if self._engine is None:
            self.reset()
        command = _COMMANDS[name].format(*(_norm(a) for a in args))
        self._state, _, _ = self._engine.step(command)
        reward = 1.0 if (self._state["won"] and not self._won) else 0.0
        self._won = self._won or bool(self._state["won"])
        text = self.render()
        out_of_steps = not self._won and self.n_primitive_steps + 1 >= self.max_steps
        if out_of_steps:
            text += f"\n\nYou have used all {self.max_steps} actions; the episode is over."
        return StepResult(text, reward, self._won or out_of_steps)

    def score(self) -> float:
        return 1.0 if self._won else 0.0

    def success(self) -> bool:
        return self._won

    def release(self) -> None:
        if self._engine is not None:
            stop_engine(self._engine)
            self._engine = None

    # -- primitives: each maps to one command of alfred.twl2 --
    @primitive
    def act(self, command: str) -> str:
        """Send one ALFWorld command as written in the admissible actions, e.g. "go to countertop 1"."""

    @primitive
    def go_to(self, receptacle: str) -> str:
        """Walk to a receptacle, e.g. go_to("cabinet 3"), and see what is on or in it."""

    @primitive
    def take(self, obj: str, receptacle: str) -> str:
        """Pick up an object from the receptacle you stand at, e.g. take("apple 1", "countertop 1")."""

    @primitive
    def put(self, obj: str, receptacle: str) -> str:
        """Place the object you carry in or on the receptacle you stand at (an open one if it opens)."""

    @primitive
    def open_receptacle(self, receptacle: str) -> str:
        """Open a closed receptacle you stand at (fridge, microwave, cabinet, drawer, safe)."""

    @primitive
    def close_receptacle(self, receptacle: str) -> str:
        """Close an open receptacle you stand at."""

    @primitive
    def clean(self, obj: str, receptacle: str) -> str:
        """Clean the object you carry with the sinkbasin you stand at, e.g. clean("apple 1", "sinkbasin 1")."""

    @primitive
    def heat(self, obj: str, receptacle: str) -> str:
        """Heat the object you carry with the microwave you stand at."""

    @primitive
    def cool(self, obj: str, receptacle: str) -> str:
        """Cool the object you carry with the fridge you stand at."""

    @primitive
    def use(self, obj: str) -> str:
        """Switch a lamp on or off (a desklamp or floorlamp at the receptacle you stand at)."""

    @primitive
    def examine(self, target: str) -> str:
        """Look closely at an object or at the receptacle you stand at."""

    @primitive
    def inventory(self) -> str:
        """Say what you are carrying."""

    @primitive
    def look(self) -> str:
        """Say where you are and what is next to you."""


# The grammar's templates (alfred.twl2): "move" is its word for putting something down.
_COMMANDS = {
    "act": "{}",
    "go_to": "go to {}",
    "take": "take {} from {}",
    "put": "move {} to {}",
    "open_receptacle": "open {}",
    "close_receptacle": "close {}",
    "clean": "clean {} with {}",
    "heat": "heat {} with {}",
    "cool": "cool {} with {}",
    "use": "use {}",
    "examine": "examine {}",
    "inventory": "inventory",
    "look": "look",
}

def _env_data_path() -> str | None:
    """ALFWORLD_DATA as the user set it. alfworld's own default folder counts only when it holds games
    (`alfworld-download` puts them there); an empty default is what importing alfworld leaves behind."""
    value = os.environ.get("ALFWORLD_DATA") if _USER_ALFWORLD_DATA is None else _USER_ALFWORLD_DATA
    if not value:
        return None
    if os.path.abspath(os.path.expanduser(value)) == os.path.abspath(_ALFWORLD_DEFAULT_DATA) and not any(
        index_official(value, s) for s in OFFICIAL_SPLITS
    ):
        return None
    return value


_OPTIONS = ("data_path", "cache_dir", "task_types", "max_steps", "show_admissible", "prompt")


class AlfWorldBenchmark(Benchmark):
    name = "alfworld"
    env_class = AlfWorldEnv
    requires = ("alfworld", "textworld")
    llm_call_budget = 50
    # The environment description's shipped prompt file (prompts/env_alfworld_default.txt; this project's wording,
    # ALFWorld is not a SpeedRunner benchmark); option `prompt` names another .txt file.
    PROMPTS = ("default",)

    def __init__(self, **options: Any):
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise TaskError(f"benchmark 'alfworld' has no option(s) {', '.join(unknown)}; options: {', '.join(_OPTIONS)}")
        self.cache_dir = options.get("cache_dir")
        self.max_steps = int(options.get("max_steps", MAX_STEPS))
        if self.max_steps < 1:
            raise TaskError(f"alfworld option max_steps must be >= 1, got {self.max_steps}")
        self.show_admissible = bool(options.get("show_admissible", True))
        self.prompt = env_prompt(self.name, options.get("prompt", "default"), self.PROMPTS, max_steps=self.max_steps)
        types = options.get("task_types") or list(TASK_TYPES)
        bad = [t for t in types if t not in TASK_TYPES]
        if bad:
            raise TaskError(f"alfworld option task_types: unknown type(s) {', '.join(map(str, bad))}; known: {', '.join(TASK_TYPES)}")
        self.task_types = tuple(types)
        self.data_path = options.get("data_path") or _env_data_path()
        self._official: dict[str, dict[str, Path]] | None = None
        if self.data_path:
            self._official = {s: index_official(self.data_path, s) for s in OFFICIAL_SPLITS}
            source = "option data_path" if options.get("data_path") else "environment variable ALFWORLD_DATA"
            for split, folder in OFFICIAL_SPLITS.items():
                if not self._official[split]:
                    raise TaskError(
                        f"alfworld {source} = {self.data_path!r} has no playable games for split {split!r}: expected "
                        f"json_2.1.1/{folder}/<task>/<trial>/ folders with game.tw-pddl and traj_data.json"
                    )

    def describe(self) -> str:
        return self.prompt

    # -- tasks --
    def sample_tasks(self, split: str, n: int, seed: int) -> list[str]:
        check_split(split)
        if n < 0:
            raise TaskError(f"alfworld: number of tasks must be >= 0, got {n}")
        rng = random.Random(f"alfworld-tasks:{split}:{seed}")
        if self._official is not None:
            ids = [i for i, trial in self._official[split].items() if self._type_of_official(i) in self.task_types]
            if n > len(ids):
                raise TaskError(f"alfworld data at {self.data_path} has {len(ids)} {split} games of the chosen types; asked for {n}")
            rng.shuffle(ids)
            return ids[:n]
        # Generated: the task types in turn (a shuffled order), each with a fresh game seed of the split;
        # drawing one by one keeps the first n ids the same whatever n is.
        order = list(self.task_types)
        rng.shuffle(order)
        base = gen.TEST_SEED_BASE if split == "test" else 0
        out, used = [], set()
        while len(out) < n:
            s = base + rng.randrange(gen.TEST_SEED_BASE)
            if s in used:
                continue
            used.add(s)
            out.append(gen.game_id(order[len(out) % len(order)], s))
        return out

    def _type_of_official(self, game_id: str) -> str:
        long_type = game_id.split("/")[1].split("-")[0] if game_id.count("/") >= 2 else ""
        return gen.SHORT_TYPE.get(long_type, "")

    def game(self, task_id: str) -> AlfWorldGame:
        """The game behind `task_id` (its task type and sentence, without starting the engine)."""
        task_id = str(task_id)
        if task_id.startswith("gen:"):
            parts = task_id.split(":")
            if len(parts) != 3 or parts[1] not in TASK_TYPES or not parts[2].isdigit():
                raise TaskError(f"alfworld task id {task_id!r} is not gen:<task type>:<seed> with a type among {', '.join(TASK_TYPES)}")
            return generated_game(parts[1], int(parts[2]), self.cache_dir)
        if task_id.startswith("official:"):
            if self._official is None:
                raise TaskError(f"alfworld task id {task_id!r} needs the official data: set option data_path or ALFWORLD_DATA")
            for split, games in self._official.items():
                if task_id in games:
                    return load_official_game(task_id, games[task_id], split)
            raise TaskError(f"alfworld task id {task_id!r} is not a playable game under {self.data_path}")
        raise TaskError(f"alfworld task id {task_id!r} must start with 'gen:' or 'official:'")

    def make(self, task_id: str) -> Env:
        return AlfWorldEnv(str(task_id), self.game(task_id), self.max_steps, self.show_admissible)
