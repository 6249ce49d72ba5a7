"""Methods of the online loop: how a library (skills, notes) changes between rollout batches, and what the
actor is shown of it.

A method is a module in this folder that registers itself at import (a method's helpers, such as common.py or
speedrunner_gate.py, sit beside it and register nothing):

    @dataclass(frozen=True)
    class Options:                 # methods.<variant>.options, checked field by field
        rounds: int = 1

    def induce(ctx: InduceContext, client) -> Library: ...   # library v{k} + training history -> v{k+1}

    register("mymethod", Options, induce)

Optional hooks (keyword arguments of `register`) change what the actor gets from a library:
`notes(library, options) -> str` (the text put in the actor's prompt; OPO's rewritten notes),
`visible(library, options) -> list[str]` (the skills listed to the actor; the others stay callable from
them, as in Voyager's truncation), and `next_task(TaskContext) -> TaskChoice` (which training task comes
next, with what goal, which skills are listed for it, and the LLM calls the choice cost; Voyager's
curriculum and retrieval), and `initial(BenchmarkConfig, options) -> Library` (library v0: empty by
default, as skills are learned online from nothing; the reference method's fixed library). `sleeps=False`
says the sleep phase does no work (react, reference). `envs=(...)`
restricts a method to some benchmark envs: a variant that would run on another env is a config error,
unless its options set `any_benchmark: true`. Methods never see test episodes: `history_dirs` holds
training batches only.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from skillrepro.agent import Prompts
from skillrepro.config import BenchmarkConfig, ConfigError, LLMConfig, MethodConfig
from skillrepro.llm.client import session
from skillrepro.skills import Library
from skillrepro.skills.isolation import SandboxPolicy


@dataclass(frozen=True)
class InducerLimits:
    """Config section `inducer`: the sleep phase's limits, this project's (the paper states none). Every method's
    sleep phase gets them (InduceContext.limits); the SpeedRunner study reads them from its config
    (studies/speedrunner/settings.py, inducer_limits) and checks them against the context there."""

    min_reply_tokens: int = 256  # a sleep-phase reply (a rewrite, a function) needs room, whatever llm.max_tokens
    history_tokens: int | None = None  # SpeedRunner's conversation; None: what llm.ctx_per_slot leaves after a reply
    # the library source in the inducer's first message (ASI's listing too); None: sized from the context, library_room
    library_chars: int | None = None
    tool_output_chars: int = 3000  # each execute_code result shown
    read_library_chars: int | None = None  # a read_library result; None: sized from the context, read_library_room
    # the reminder (and text-protocol prefill) before each of a write-less session's last N requests; the
    # paper has none (0)
    nudge_requests: int = 0
    # the sleep phases' model (a name as llm.model takes); None: llm.model, the paper's one model for both roles
    model: str | None = None
    # SpeedRunner: the first message shows one recorded training episode's opening and first steps; the paper: 0
    example_steps: int = 0
    # the sleep phases' reply protocol (as llm.tool_calling); None: llm.tool_calling, the actor's
    tool_calling: str | None = None
    # SpeedRunner: a tool call repeated word for word is answered with a pointer to its first answer; the paper: no
    repeat_notice: bool = False
    # SpeedRunner: a public function that reaches no primitive action is refused (it cannot act); the paper: no
    require_action: bool = False
    # SpeedRunner: a function using a name bound nowhere a skill runs is refused; the paper: no
    require_defined: bool = False

    def reply_tokens(self, llm: LLMConfig) -> int:
        return max(llm.max_tokens, self.min_reply_tokens)

    def sleep_llm(self, llm: LLMConfig) -> LLMConfig:
        """The sleep phases' model settings: `llm`, with `model` and `tool_calling` in place where set."""
        changes = {k: v for k, v in (("model", self.model), ("tool_calling", self.tool_calling))
                   if v is not None and v != getattr(llm, k)}
        return dataclasses.replace(llm, **changes) if changes else llm

    def own_server(self, llm: LLMConfig) -> bool:
        """Whether a sleep phase starts a server of its own: its model is not the shared server's and the
        pipeline starts servers itself (embedded, or vllm without base_url); a served API takes any model id."""
        return self.sleep_llm(llm).model != llm.model and llm.backend != "openai" and not llm.base_url

    def trajectory_room(self, llm: LLMConfig) -> int:
        """Estimated tokens of episodes a sleep-phase prompt can hold: half of what the context leaves after a
        reply and its reasoning (the prompt's other parts need the rest); budgets.trajectory_tokens' default
        and its limit."""
        return max(0, llm.ctx_per_slot - llm.reply_cap("inducer", self.reply_tokens(llm))) // 2

    def history_chars(self, llm: LLMConfig) -> int:
        """Characters of conversation one sleep-phase request may carry (3 characters per token, to be safe): what
        the context leaves after the reply's cap, its reasoning room included."""
        tokens = (self.history_tokens if self.history_tokens is not None
                  else llm.ctx_per_slot - llm.reply_cap("inducer", self.reply_tokens(llm)))
        return max(2000, tokens * 3)

    def library_room(self, llm: LLMConfig) -> int:
        """Characters of library source a sleep phase's first message shows (SpeedRunner's source, ASI's listing):
        library_chars, or, null, a quarter of SpeedRunner's first message (which gets half the conversation,
        history_chars), so that the facts, the episodes and the instructions keep the rest. Sized from the
        context, not fixed: a paper-scale context shows a paper-scale library whole, an 8k-token one no more
        than the 3,000 characters a fixed default used to."""
        return self.library_chars if self.library_chars is not None else self.history_chars(llm) // 8

    def read_library_room(self, llm: LLMConfig) -> int:
        """Characters of library source one read_library answer holds: read_library_chars, or, null, a quarter of
        the conversation (history_chars), so that a read leaves room for the turns around it (an 8k-token
        context: no more than the 6,000 characters of the old fixed default)."""
        return self.read_library_chars if self.read_library_chars is not None else self.history_chars(llm) // 4


@dataclass(frozen=True)
class InduceContext:
    library: Library  # version k
    cycle: int  # k
    history_dirs: tuple[Path, ...]  # training batch folders of cycles <= k (episodes/steps/llm_calls/skill_calls.parquet)
    library_root: Path  # folder holding v0..vk, for methods that compare versions
    out_dir: Path  # where v{k+1} will be written
    record_dir: Path  # the sleep phase's own records (llm_calls.parquet, transcript.jsonl, replay episodes)
    run_id: str
    bench: BenchmarkConfig
    method: MethodConfig
    llm: LLMConfig
    request_budget: int
    sandbox: SandboxPolicy = SandboxPolicy()  # config key sandbox.require, for every sandbox the phase starts
    trajectory_tokens: int | None = None  # config key budgets.trajectory_tokens; None: what the context holds
    prompts: Prompts = Prompts()  # the actor's (config section actor), for a phase that plays episodes (ASI's replays)
    limits: InducerLimits = InducerLimits()  # config section inducer

    def __post_init__(self) -> None:
        if self.trajectory_tokens is None:  # as studies.speedrunner.settings.trajectory_tokens resolves a null
            object.__setattr__(self, "trajectory_tokens", self.limits.trajectory_room(self.llm))

    @property
    def options(self) -> Any:
        """The variant's options as its method's typed dataclass."""
        return get_method(self.method.method).parse_options(self.method.options, self.method.variant)


@dataclass(frozen=True)
class TaskContext:
    """What a curriculum sees before a training episode: the library it will be played with, the batch's
    planned tasks, and the training history so far (earlier batches, and this batch's finished episodes)."""

    library: Library
    options: Any
    cycle: int
    index: int  # position of the episode in its batch
    planned: tuple[str, ...]  # the protocol's training tasks for this batch
    history_dirs: tuple[Path, ...]
    llm: LLMConfig
    bench: BenchmarkConfig
    client: Any = None  # the batch's LLM client, for curricula that ask the model
    run_id: str = ""  # for the session id of a curriculum's LLM calls


@dataclass(frozen=True)
class TaskChoice:
    task_id: str
    goal: str = ""  # shown to the actor with the task's own instruction; empty for none
    visible: tuple[str, ...] | None = None  # skills listed for this episode (retrieved for the goal); None: `visible`
    llm_calls: tuple[Any, ...] = ()  # LLMCall records the choice cost; stored with the episode's llm_calls
    # Asked after each actor step of the episode with (that step's observation, the env): a new choice, whose
    # goal the actor is shown from its next step on and whose llm_calls are stored with the episode too, or
    # None to keep the goal (Voyager proposes its next task once the last one is done).
    replan: Callable[[str, Any], "TaskChoice | None"] | None = None


def default_notes(library: Library, options: Any) -> str:
    return library.notes


def default_visible(library: Library, options: Any) -> list[str]:
    return [f.name for f in library.public()]


def default_next_task(ctx: TaskContext) -> TaskChoice:
    return TaskChoice(ctx.planned[ctx.index])


def default_initial(bench: BenchmarkConfig, options: Any) -> Library:
    return Library(version=0)


@dataclass(frozen=True)
class NoOptions:
    """A method without options."""


@dataclass(frozen=True)
class Method:
    name: str
    options: type
    induce: Callable[[InduceContext, Any], Library]  # (ctx, the LLM client: None for a method that sleeps=False)
    notes: Callable[[Library, Any], str] = default_notes
    visible: Callable[[Library, Any], list[str]] = default_visible
    next_task: Callable[[TaskContext], TaskChoice] = default_next_task
    initial: Callable[[BenchmarkConfig, Any], Library] = default_initial
    envs: tuple[str, ...] | None = None  # the benchmark envs it runs on by default; None: every env
    # False for a method whose sleep phase only carries the library forward (no model, a second's work):
    # the workflow runs it as a local job that asks a cluster for nothing (rules/speedrunner/learn.smk, carry_library).
    sleeps: bool = True

    def sleep(self, ctx: InduceContext, client: Any = None) -> Library:
        """One sleep phase, v{k} -> v{k+1}, on `client`; None opens the run's shared LLM server (or one started
        for this job) for a method that calls a model. The one place a phase's client is opened."""
        if client is not None or not self.sleeps:
            return self.induce(ctx, client)
        with session(ctx.llm) as opened:
            return self.induce(ctx, opened)

    def parse_options(self, raw: dict[str, Any] | None, variant: str) -> Any:
        """`raw` as an instance of the options class; a ConfigError names the key otherwise."""
        return parse_options(self.options, raw or {}, f"methods.{variant}.options")


_REGISTRY: dict[str, Method] = {}


def register(name: str, options: type, induce: Callable[[InduceContext, Any], Library], **hooks: Any) -> Method:
    if name in _REGISTRY and _REGISTRY[name].induce.__module__ != induce.__module__:
        raise ValueError(f"method {name!r} is registered twice ({_REGISTRY[name].induce.__module__}, {induce.__module__})")
    if not dataclasses.is_dataclass(options):
        raise TypeError(f"method {name!r}: options must be a dataclass")
    _REGISTRY[name] = method = Method(name, options, induce, **hooks)
    return method


def registry() -> dict[str, Method]:
    """Every method in this folder, by name (importing each module registers it)."""
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
    return dict(_REGISTRY)


def get_method(name: str) -> Method:
    methods = registry()
    if name not in methods:
        raise ConfigError(f"unknown method {name!r}; known: {', '.join(sorted(methods))}")
    return methods[name]


@dataclass(frozen=True)
class Variant:
    """A config variant bound to its method: what a job hands the runner, so that playing a batch looks
    nothing up by name."""

    config: MethodConfig
    impl: Method
    options: Any  # the method's options dataclass, parsed from config.options


def bind(config: MethodConfig) -> Variant:
    """`config` bound to its registered method, its options parsed (a ConfigError names a bad one)."""
    impl = get_method(config.method)
    return Variant(config, impl, impl.parse_options(config.options, config.variant))


def check_benchmarks(variant: str, method: str, options: dict[str, Any], envs: dict[str, str]) -> None:
    """A ConfigError when the variant would run on a benchmark whose env its method does not support.
    `envs`: the variant's benchmarks (name -> env)."""
    impl = get_method(method)
    if impl.envs is None or getattr(impl.parse_options(options, variant), "any_benchmark", False):
        return
    other = sorted(b for b, env in envs.items() if env not in impl.envs)
    if other:
        raise ConfigError(f"config key methods.{variant}.benchmarks: method {method} runs on {', '.join(impl.envs)} "
                          f"only, not on {', '.join(other)}; list its benchmarks, or set "
                          f"methods.{variant}.options.any_benchmark: true")


# ------------------------------------------------------------------------------------------ options
def parse_options(cls: type, raw: dict[str, Any], where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"config key {where}: expected a mapping of option names to values")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        allowed = ", ".join(fields) or "none"
        raise ConfigError(f"config key {where}: unknown option(s) {', '.join(unknown)}; allowed: {allowed}")
    values = {}
    for key, value in raw.items():
        if not _fits(value, hints[key]):
            raise ConfigError(f"config key {where}.{key}: {value!r} is not {_describe(hints[key])}")
        values[key] = value
    obj = cls(**values)
    check = getattr(obj, "check", None)
    if check is not None:
        try:
            check()
        except ValueError as e:
            raise ConfigError(f"config key {where}: {e}") from None
    return obj


def _fits(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")
    if origin in (tuple, list):
        return isinstance(value, (list, tuple)) and all(_fits(v, args[0]) for v in value)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if hint is type(None):
        return "null"
    if origin in (tuple, list):
        return f"a list of {_describe(args[0])}"
    return f"a {getattr(hint, '__name__', str(hint))}"
