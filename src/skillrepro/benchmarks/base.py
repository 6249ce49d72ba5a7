"""The one interface every benchmark implements.

A benchmark module defines an `Env` subclass whose primitive actions are ordinary methods marked with
`@primitive`. Their signatures and docstrings are the single source for the tool list the actor sees and
for the functions skill code calls, so adding a primitive is adding one method.
"""
from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"


class TaskError(ValueError):
    """A task id, split or benchmark option that does not exist."""


class ActionError(ValueError):
    """A primitive call the env cannot apply (unknown name, wrong arguments).

    The agent turns it into an observation; it never ends an episode."""


@dataclass(frozen=True)
class Primitive:
    name: str
    params: tuple[tuple[str, str], ...]  # (name, type name)
    doc: str
    advances: bool  # False for read-only actions such as Crafter's get_current_observation
    returns: str = "str"  # "None" where a call returns nothing (Crafter's game-advancing actions, D.2)

    @property
    def signature(self) -> str:
        args = ", ".join(f"{n}: {t}" for n, t in self.params)
        return f"{self.name}({args}) -> {self.returns}"

    def json_schema(self) -> dict[str, Any]:
        """OpenAI function-calling schema (every parameter is required)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.doc,
                "parameters": {
                    "type": "object",
                    "properties": {n: {"type": _JSON_TYPES.get(t, "string")} for n, t in self.params},
                    "required": [n for n, _ in self.params],
                },
            },
        }


_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def primitive(fn: Callable | None = None, *, advances: bool = True):
    """Mark an Env method as a primitive action. Its docstring is what the agent reads."""

    def mark(f: Callable) -> Callable:
        f.__primitive__ = advances
        return f

    return mark(fn) if fn is not None else mark


@dataclass
class StepResult:
    observation: str
    reward: float = 0.0
    done: bool = False
    returns_none: bool = False  # the primitive returns None (a skill gets None; the actor and records read "None")


class Env(ABC):
    """One episode of one task. Subclasses add `@primitive` methods that return the observation text."""

    benchmark: ClassVar[str]

    def __init__(self, task_id: str):
        self.task_id = task_id
        self.done = False
        self.total_reward = 0.0
        self.n_primitive_steps = 0

    @classmethod
    def primitives(cls) -> tuple[Primitive, ...]:
        # Computed once per class: Env.step consults it on every action.
        if "_primitive_index" not in cls.__dict__:
            cls._primitive_index = {p.name: p for p in cls._collect_primitives()}
        return tuple(cls._primitive_index.values())

    @classmethod
    def _collect_primitives(cls) -> tuple[Primitive, ...]:
        out = []
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if not hasattr(fn, "__primitive__"):
                continue
            sig = inspect.signature(fn)
            params = tuple(
                (p.name, p.annotation if isinstance(p.annotation, str) else p.annotation.__name__)
                for p in list(sig.parameters.values())[1:]
            )
            out.append(Primitive(name, params, inspect.getdoc(fn) or "", fn.__primitive__))
        # Source order, so the tool list reads as the module declares it.
        line = {p.name: getattr(cls, p.name).__code__.co_firstlineno for p in out}
        return tuple(sorted(out, key=lambda p: line[p.name]))

    @abstractmethod
    def reset(self) -> str:
        """Start the episode; return the opening observation (the task statement included)."""

    @abstractmethod
    def _apply(self, name: str, args: list[Any]) -> StepResult:
        """Run one primitive that exists and has the right arity."""

    @abstractmethod
    def score(self) -> float:
        """Progression in [0, 1] of the episode so far (1.0 = solved)."""

    @abstractmethod
    def success(self) -> bool:
        """The benchmark's own success criterion for the state right now."""

    def step(self, name: str, args: list[Any] | None = None) -> StepResult:
        """Apply primitive `name`; unknown names and wrong arity raise ActionError."""
        args = list(args or [])
        self.primitives()
        prims = type(self)._primitive_index
        if name not in prims:
            raise ActionError(f"unknown action {name!r}; valid actions: {', '.join(prims)}")
        want = len(prims[name].params)
        if len(args) != want:
            raise ActionError(f"{prims[name].signature} takes {want} argument(s), got {len(args)}")
        if self.done:
            return StepResult("The episode is over.", 0.0, True)
        result = self._apply(name, args)
        if prims[name].advances:
            self.n_primitive_steps += 1
        self.total_reward += result.reward
        self.done = self.done or result.done
        return result

    def release(self) -> None:
        """Free what the episode holds (engines, JVM hold). Not `close`: ScienceWorld has a primitive of that name."""

    def listed_primitives(self) -> tuple[Primitive, ...]:
        """The primitives as this episode's agent is told of them (what each returns may depend on options)."""
        return self.primitives()


class Benchmark(ABC):
    """A benchmark family: task sampling and the Env class that plays one task."""

    name: ClassVar[str]
    env_class: ClassVar[type[Env]]
    llm_call_budget: ClassVar[int]
    # True when the envs of one process share one simulator (ScienceWorld's JVM): the batch runner then
    # plays one episode at a time; parallelism comes from Snakemake jobs.
    one_episode_per_process: ClassVar[bool] = False
    # The Episode column a benchmark's tables and figures report: "success" (pass/fail benchmarks) or
    # "progression" (Crafter, scored by the fraction of achievements unlocked).
    headline: ClassVar[str] = "success"
    # The packages its envs import (lazily, where they are used), which pyproject's `benchmarks` extra installs:
    # the registry checks them before a benchmark is used, so a missing one is named with its install, up front.
    requires: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options: Any):
        if options:
            raise TaskError(f"benchmark {self.name!r} takes no options, got {sorted(options)}")

    @abstractmethod
    def describe(self) -> str:
        """What the agent is told about the world, for the system prompt."""

    @abstractmethod
    def sample_tasks(self, split: str, n: int, seed: int) -> list[str]:
        """`n` task ids of `split` ('train' or 'test'), drawn with `seed`; the splits never overlap."""

    def pool_size(self, split: str) -> int | None:
        """How many task ids `split` holds, where that is known without starting a simulator: the config
        check compares the protocol with it before any job. None: checked when the tasks are drawn."""
        return None

    @abstractmethod
    def make(self, task_id: str) -> Env:
        """An Env for `task_id`; an id this benchmark cannot produce raises TaskError."""

    def primitives(self) -> tuple[Primitive, ...]:
        return self.env_class.primitives()

    def run_task_seed(self, task_seed: int, run_seed: int) -> int:
        """The seed that draws the task lists of the run with `run_seed`. By default every run shares the
        protocol's lists (appendices B.1, C.1); a benchmark whose runs draw their own overrides this."""
        return task_seed


def prompt_path(benchmark: str, choice: str) -> Path:
    """The file of shipped prompt `choice` of `benchmark`: prompts/env_{benchmark}_{choice}.txt."""
    return PROMPTS / f"env_{benchmark}_{choice}.txt"


def env_prompt(benchmark: str, choice: str, names: tuple[str, ...], **fields: Any) -> str:
    """The environment description the actor's system prompt shows, read from a file.

    `choice` is a shipped name (prompts/env_{benchmark}_{name}.txt) or the path of a user's .txt file; its
    `{placeholders}` are filled from `fields`. A bad choice or placeholder is a TaskError naming it."""
    if str(choice).endswith(".txt"):
        path = Path(choice)
        if not path.is_file():
            raise TaskError(f"{benchmark}: prompt file {choice} does not exist")
    elif choice in names:
        path = prompt_path(benchmark, choice)
    else:
        raise TaskError(f"{benchmark}: unknown prompt {choice!r}; shipped: {', '.join(names)}, or a path to a .txt file")
    try:
        return path.read_text().strip().format(**fields)
    except (KeyError, IndexError, ValueError) as e:
        raise TaskError(f"{benchmark}: prompt file {path} has a placeholder that cannot be filled ({e}); "
                        f"known: {', '.join(sorted(fields)) or 'none'}") from None


def primitive_returns(primitives: tuple[Primitive, ...] | list[Primitive]) -> str:
    """What calling these primitives returns, in words a skill writer's prompt uses ("{returns}"): true for
    every listing, and the sentence prompts always had where every primitive returns its observation."""
    if all(p.returns == "str" for p in primitives):
        return "each returns the observation text that follows it"
    return ("each listed `-> None` returns None (it changes the world: read the world as the environment "
            "says), each listed `-> str` returns the text it shows")


def check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise TaskError(f"split must be 'train' or 'test', got {split!r}")
