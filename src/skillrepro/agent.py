"""The actor: a ReAct loop over a benchmark's primitives (and any public skills), one episode at a time.

Long because the actor's protocols (text, JSON, native, constrained) share one loop and one prompt builder.

The full observation history stays in context, as in the paper (appendices B.3, C.3); `history_window`
keeps only the last N steps for a model whose context cannot hold a long episode (a 2,000-step Crafter run),
and an episode whose prompt outgrew the context ends with termination "context". Actions come back either
as native tool calls or, for small models, as a lenient text protocol ("Action: go_forward()"). A
malformed, unknown or extra action becomes an observation the model reads next turn, and is counted; it
never ends the episode. The episode's wall clock also bounds a skill call: it gets what is left of it.
"""
from __future__ import annotations

import ast
import json
import re
import time
import uuid
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from skillrepro.benchmarks.base import ActionError, Env, Primitive
from skillrepro.config import ROLLOUT_WALL_S, ActorConfig
from skillrepro.llm.client import LLMClient, LLMRequestError
from skillrepro.llm.limits import ToolLimits
from skillrepro.skills.library import Library, parse_untrusted
from skillrepro.skills.isolation import SandboxLimits, SandboxPolicy
from skillrepro.skills.protocol import render_outcome
from skillrepro.skills.sandbox import SandboxSession
from skillrepro.store import Episode, LLMCall, SkillCall, Step

PROMPTS = Path(__file__).parent / "prompts"
# The one tool that calls any skill by name, listed in place of the skills when primitives and skills together
# exceed what the backend takes in one request, or a skill's name is not one it takes (llm.max_tools, llm/limits.py).
CALL_SKILL = "call_skill"


@dataclass(frozen=True)
class Tool:
    """Something the actor can call: a primitive, or a skill from the library."""

    name: str
    params: tuple[tuple[str, str], ...]
    doc: str
    # run(args, wall_s=None) -> observation; raises ActionError for arguments it cannot take. `wall_s` is
    # what is left of the episode's wall clock: a skill call stops when it runs out (a primitive ignores it).
    run: Callable[..., str]
    primitive: bool = False  # an env primitive (listed under the primitives), or a library skill
    returns: str = "str"  # "None": a primitive that returns nothing (Crafter's game-advancing actions, D.2)

    @property
    def signature(self) -> str:
        tail = "" if self.returns == "str" else f" -> {self.returns}"
        return f"{self.name}({', '.join(f'{n}: {t}' for n, t in self.params)}){tail}"

    def schema(self) -> dict[str, Any]:
        return Primitive(self.name, self.params, self.doc, True).json_schema()


def returns_sentence(primitives: list[Tool]) -> str:
    """What the actor's system prompt says a call returns ("{returns}"): true for the listing, and the
    sentence it always had where every primitive returns its observation (Crafter's `observe: every_step`)."""
    if all(t.returns == "str" for t in primitives):
        return "Each call returns what you observe afterwards."
    return ("A call of a function listed `-> None` returns None (it changes the world; the environment above "
            "says how to look); each other call returns what you observe.")


def primitive_tools(env: Env) -> list[Tool]:
    def runner(name: str) -> Callable[..., str]:
        return lambda args, wall_s=None: env.step(name, args).observation

    return [Tool(p.name, p.params, p.doc, runner(p.name), primitive=True, returns=p.returns)
            for p in env.listed_primitives()]


def skill_tools(library: Library, env: Env, record: Callable[[SkillCall], None], policy: SandboxPolicy,
                names: list[str] | None = None, limits: SandboxLimits | None = None) -> list[Tool]:
    """One Tool per skill in `names` (default: the public ones), all sharing one sandbox session for the
    episode; every function of the library stays callable from them, and each invocation's frames go to
    `record`. An empty library (ReAct, OPO, v0 of every method) adds none."""
    shown = set(names) if names is not None else {f.name for f in library.public()}
    if not shown:
        return []
    session = SandboxSession(source=library.source, env=env, limits=limits, record=record, policy=policy)
    state = {"step": 0}

    def runner(name: str) -> Callable[..., str]:
        def run(args: list[Any], wall_s: float | None = None) -> str:
            state["step"] += 1
            out = session.call_skill(name, list(args), step=state["step"] - 1, wall_s=wall_s)
            return render_outcome(name, out, session.limits.output_chars)

        run.session = session  # keeps the worker alive as long as the tool is
        return run

    return [Tool(f.name, _params(f.signature), f.doc, runner(f.name)) for f in library.functions if f.name in shown]


def _params(signature: str) -> tuple[tuple[str, str], ...]:
    """Each parameter's name and type: its annotation, else its default's type where that is a number or a bool
    (`max_steps=4` is an int: typed "str", the 0.5B actor passed "3" and every call raised TypeError), else str."""
    node = parse_untrusted(f"def {signature}: pass").body[0]
    args = node.args.posonlyargs + node.args.args
    defaults = [None] * (len(args) - len(node.args.defaults)) + list(node.args.defaults)

    def kind(a: ast.arg, default: ast.expr | None) -> str:
        if a.annotation is not None:
            return ast.unparse(a.annotation)
        value = default.value if isinstance(default, ast.Constant) else None
        return type(value).__name__ if isinstance(value, (bool, int, float)) else "str"

    return tuple((a.arg, kind(a, d)) for a, d in zip(args, defaults))


def example_json(tool: Tool) -> str:
    """The same example as one JSON object, the shape a constrained reply takes."""
    args = ", ".join(f'"{n}": "<{n}>"' if t == "str" else f'"{n}": <{n}>' for n, t in tool.params)
    return f'{{"name": "{tool.name}", "arguments": {{{args}}}}}'


def call_schema(function: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of one constrained call of a tool, from its native schema's `function` entry:
    `{"name": <its name>, "arguments": <exactly its parameters>}` (the actor's and SpeedRunner's inducer's)."""
    arguments = {**function["parameters"], "additionalProperties": False}
    return {"type": "object", "properties": {"name": {"const": function["name"]}, "arguments": arguments},
            "required": ["name", "arguments"], "additionalProperties": False}


def reply_schema(tools: list[Tool]) -> dict[str, Any]:
    """The JSON schema a constrained reply is decoded under: one call of one of `tools`, each call's
    arguments exactly its parameters, skills first (the order the system prompt lists them in)."""
    return {"anyOf": [call_schema(t.schema()["function"]) for t in sorted(tools, key=lambda t: t.primitive)]}


def example_call(tool: Tool) -> str:
    """A call of `tool` as the protocol's example shows it: each argument a placeholder named after its
    parameter ("<mission>"), quoted for strings."""
    args = [f'"<{n}>"' if t == "str" else f"<{n}>" for n, t in tool.params]
    return f"{tool.name}({', '.join(args)})"


def dispatch_schema() -> dict[str, Any]:
    """The native schema of CALL_SKILL: a skill's name and its arguments by parameter name. The names are not an
    enum: Voyager's library reaches hundreds, and the system prompt lists them with their signatures."""
    return {"type": "function", "function": {
        "name": CALL_SKILL,
        "description": "Call one of the skills listed under Skills in the system prompt.",
        "parameters": {"type": "object", "properties": {
            "name": {"type": "string", "description": "the skill's name"},
            "arguments": {"type": "object", "description": "the skill's arguments, by parameter name"}},
            "required": ["name", "arguments"]}}}


def dispatch_example(tool: Tool) -> str:
    """A CALL_SKILL call of `tool`, as the dispatch prompt's example shows it."""
    args = ", ".join(f'"{n}": "<{n}>"' if t == "str" else f'"{n}": <{n}>' for n, t in tool.params)
    return f'{CALL_SKILL}(name="{tool.name}", arguments={{{args}}})'


@dataclass(frozen=True)
class Prompts:
    system: str = (PROMPTS / "actor_system.txt").read_text()
    text_protocol: str = (PROMPTS / "actor_text_protocol.txt").read_text()
    native_protocol: str = (PROMPTS / "actor_native_protocol.txt").read_text()
    json_protocol: str = (PROMPTS / "actor_json_protocol.txt").read_text()  # llm.tool_calling: constrained
    skills: str = (PROMPTS / "actor_skills.txt").read_text()  # the skills' own block; only when there are any
    # Added after every observation when there are skills ("{skills}": their signatures); empty, as in the
    # paper, lists the skills in the system prompt only. A small actor rarely calls a skill listed far above.
    skill_reminder: str = ""
    # Closes the native protocol when the skills go through CALL_SKILL ("{example}": a call of the first skill)
    skill_dispatch: str = (PROMPTS / "actor_skill_dispatch.txt").read_text()
    # Where a reply ends, as stop sequences; None: the protocol's own ("\nObservation:" for text, none for
    # native). A small model in native mode writes call after call as JSON lines; "}\n{" ends it after one.
    stop: tuple[str, ...] | None = None
    # A call with more arguments than its action takes: "refuse" (an invalid action) or "drop" the extras.
    extra_arguments: str = "refuse"

    # The placeholders each prompt is formatted with (native_protocol is used as written).
    PLACEHOLDERS = {"system": ("environment", "skills", "tools", "notes", "protocol", "returns"), "text_protocol": ("example",),
                    "json_protocol": ("example",), "native_protocol": None, "skills": ("skills",), "skill_reminder": ("skills",),
                    "skill_dispatch": ("example",)}

    @classmethod
    def configured(cls, actor: ActorConfig) -> "Prompts":
        """The prompts config section `actor` asks for: the shipped ones, each file in `actor.prompts`
        instead, the skill reminder only with `restate_skills`, and its stop sequences."""
        texts: dict[str, Any] = {name: Path(path).read_text() for name, path in actor.prompt_files}
        if actor.restate_skills:
            texts.setdefault("skill_reminder", (PROMPTS / "actor_skill_reminder.txt").read_text())
        else:
            texts.pop("skill_reminder", None)
        prompts = cls(**texts, stop=actor.stop, extra_arguments=actor.extra_arguments)
        prompts.check()
        return prompts

    def check(self) -> None:
        """ValueError naming the prompt whose placeholders are not the ones it is formatted with."""
        for name, keys in self.PLACEHOLDERS.items():
            if keys is None:
                continue
            try:
                getattr(self, name).format(**{k: "" for k in keys})
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"prompt {name}: {type(e).__name__} {e} while filling its placeholders; it may "
                                 f"use {', '.join('{' + k + '}' for k in keys)} and must write a literal brace "
                                 "as {{ or }}") from None


@dataclass(frozen=True)
class ParsedAction:
    name: str
    args: list[Any]
    reasoning: str
    problem: str = ""  # why it could not be used as is; empty when fine
    extra: int = 0  # further actions in the same reply, ignored
    named: dict[str, Any] | None = None  # the arguments by name, where the reply named them (a JSON call)


def drop_extra_arguments(parsed: ParsedAction, tool: Tool) -> tuple[ParsedAction, str]:
    """`parsed` with no more arguments than `tool` takes (actor.extra_arguments: drop), and the dropped ones
    written out ("" when none were). Named arguments the tool does not name are dropped, else the last ones;
    a call within the tool's arity is left as it is."""
    if len(parsed.args) <= len(tool.params):
        return parsed, ""
    if parsed.named is not None:
        names = [n for n, _ in tool.params]
        args = [parsed.named[n] for n in names if n in parsed.named]
        dropped = ", ".join(f"{k}={v!r}" for k, v in parsed.named.items() if k not in names)
    else:
        args, dropped = parsed.args[:len(tool.params)], ", ".join(repr(v) for v in parsed.args[len(tool.params):])
    return replace(parsed, args=args, named=None), dropped


def _dispatched(arguments: dict[str, Any], reasoning: str, extra: int) -> ParsedAction:
    """A CALL_SKILL call read as the call of the skill it names, so the step records that skill's name."""
    name, inner = str(arguments.get("name", "")), arguments.get("arguments", {})
    if isinstance(inner, dict):
        return ParsedAction(name, list(inner.values()), reasoning, extra=extra, named=dict(inner))
    if isinstance(inner, list):
        return ParsedAction(name, inner, reasoning, extra=extra)
    return ParsedAction(name, [], reasoning, f"{CALL_SKILL}: its arguments must be an object by parameter name, "
                        f"not {inner!r}", extra=extra)


_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(\((?:[^()]|\([^()]*\))*\))?")


def parse_text_action(text: str, names: list[str]) -> ParsedAction:
    """Read 'Action: name(args)' leniently: case, backticks, missing parentheses, JSON, keyword args.

    Without an 'Action:' line, the first known tool name written as a word in the reply is taken."""
    m = re.search(r"action\s*:\s*(.*)", text, re.IGNORECASE | re.DOTALL)
    reasoning = text[: m.start()] if m else text
    reasoning = re.sub(r"^\s*thought\s*:\s*", "", reasoning.strip(), flags=re.IGNORECASE)
    body = (m.group(1) if m else text).replace("`", " ").strip()
    body = re.sub(r"^json\s*(?=\{)", "", body)  # a JSON call in a ```json fence
    if body.startswith("{"):
        obj = _json_call(body)
        if obj is not None:
            args = obj.get("arguments") or obj.get("args") or []
            named = dict(args) if isinstance(args, dict) else None
            args = list(args.values()) if isinstance(args, dict) else list(args)
            return ParsedAction(str(obj.get("name", "")), args, reasoning, named=named)
    calls = list(_CALL.finditer(body))
    if not m:
        known = {n.lower() for n in names}
        calls = [c for c in calls if c.group(1).lower() in known]
    if not calls:
        return ParsedAction("", [], reasoning, "no action found; answer with 'Action: function_name(arguments)'")
    first = calls[0]
    # Only calls written with parentheses count as extra actions; bare words after the first are prose.
    extra = sum(1 for c in calls[1:] if c.group(2))
    name, argtext = first.group(1), first.group(2) or "()"
    try:
        node = ast.parse(f"f{argtext}", mode="eval").body
        args = [ast.literal_eval(a) for a in node.args] + [ast.literal_eval(k.value) for k in node.keywords]
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # model text: any parser failure
        return ParsedAction(name, [], reasoning, f"could not read the arguments of {name}{argtext}")
    return ParsedAction(name, args, reasoning, extra=extra)


def _json_call(body: str) -> dict[str, Any] | None:
    """The first JSON object of `body`, also when a stop sequence cut its closing braces; None if there is none."""
    end = body.rindex("}") + 1 if "}" in body else len(body)
    for closing in ("", "}", "}}"):
        try:
            obj = json.loads(body[:end] + closing)
        except (ValueError, RecursionError):
            continue
        return obj if isinstance(obj, dict) else None
    return None


@dataclass(frozen=True)
class PromptTurn:
    """One earlier step as a formatter sees it: what its prompt showed, the reply, the action taken."""

    observation: str
    admissible: tuple[str, ...]
    reply: str
    action: ParsedAction


class Formatter(Protocol):
    """Rebuilds the whole prompt of every step (a prompt-format study, e.g. skillrepro.studies.kvcache.actor).

    With a formatter the actor keeps no conversation of its own: each step's messages come from
    `messages(env, turns so far, current observation, admissible actions)`, and replies are read by `parse`."""

    def admissible(self, env: Env) -> list[str]: ...

    def messages(self, env: Env, turns: list[PromptTurn], observation: str,
                 admissible: list[str]) -> list[dict[str, Any]]: ...

    def parse(self, reply: str, tools: list[Tool]) -> ParsedAction: ...


@dataclass
class EpisodeRecords:
    episode: Episode
    steps: list[Step]
    llm_calls: list[LLMCall]


@dataclass
class EpisodeSpec:
    """Who the episode belongs to; copied into its records."""

    run_id: str
    benchmark: str
    method: str
    variant: str
    seed: int
    split: str
    cycle: int
    library_version: int


@dataclass
class Actor:
    client: LLMClient
    environment_text: str
    call_budget: int
    wall_s: float = float(ROLLOUT_WALL_S)
    # native: the server's tool calls; text: "Action: name(args)" read from the reply; constrained: the
    # reply is decoded under reply_schema (one JSON call of a listed tool), so it cannot name another
    tool_calling: str = "text"
    prompts: Prompts = field(default_factory=Prompts)
    notes: str = ""  # learned prompt text (a library's notes.md), empty for ReAct
    history_window: int | None = None  # None: the full history (the paper); N: only the last N steps
    # What one request's native tools may be (llm/limits.tool_limits); past them the skills go through CALL_SKILL
    tool_limits: ToolLimits = ToolLimits()
    formatter: Formatter | None = None  # None: the ReAct conversation below
    # When set, each actor call's LLMCall.prompt_token_ids is filled with what this returns for its messages.
    prompt_token_ids: Callable[[list[dict[str, Any]]], list[int]] | None = None

    def system_prompt(self, tools: list[Tool]) -> str:
        """The environment, then the library's skills (if any) under their own heading, the primitives, the
        notes and the reply protocol. The protocol's example is a call of the first skill when there is one
        (a small actor copies the example's shape), else of the first primitive without arguments."""
        def listing(ts: list[Tool]) -> str:
            return "\n".join(f"- {t.signature}: {t.doc}" for t in ts)

        skills = [t for t in tools if not t.primitive]
        primitives = [t for t in tools if t.primitive]
        first = skills[0] if skills else next((t for t in primitives if not t.params), tools[0])
        protocol = {"text": lambda: self.prompts.text_protocol.format(example=example_call(first)),
                    "constrained": lambda: self.prompts.json_protocol.format(example=example_json(first)),
                    "native": lambda: self.prompts.native_protocol}[self.tool_calling]()
        if self.dispatches(tools):
            protocol += self.prompts.skill_dispatch.format(example=dispatch_example(skills[0]))
        notes = f"\nNotes from earlier episodes:\n{self.notes}\n" if self.notes.strip() else ""
        skill_block = self.prompts.skills.format(skills=listing(skills)) if skills else ""
        return self.prompts.system.format(environment=self.environment_text, skills=skill_block,
                                          tools=listing(primitives), notes=notes, protocol=protocol,
                                          returns=returns_sentence(primitives))

    def reminder(self, tools: list[Tool]) -> str:
        """What follows every observation: the skill reminder with the skills' signatures, if there are skills."""
        skills = [t.signature for t in tools if not t.primitive]
        return self.prompts.skill_reminder.format(skills="; ".join(skills)) if skills else ""

    def dispatches(self, tools: list[Tool]) -> bool:
        """Whether the skills go through CALL_SKILL: native tool calls, and more tools than one request may list
        or a skill whose name the backend does not take (a model may name a function in any Unicode letters)."""
        limit = self.tool_limits.max_tools
        return self.tool_calling == "native" and (
            (limit is not None and len(tools) > limit)
            or not all(self.tool_limits.name_ok(t.name) for t in tools if not t.primitive))

    def tool_schemas(self, tools: list[Tool]) -> list[dict[str, Any]] | None:
        """The native protocol's tool schemas, skills before primitives as the system prompt lists them (a
        small model favours what comes first); past the tool limits, CALL_SKILL before the primitives, so every
        skill stays callable in a request the backend takes. None for the text protocol."""
        if self.tool_calling != "native":
            return None
        ordered = sorted(tools, key=lambda t: t.primitive)
        if not self.dispatches(tools):
            return [t.schema() for t in ordered]
        primitives = [t.schema() for t in ordered if t.primitive]
        if self.tool_limits.max_tools is not None and len(primitives) + 1 > self.tool_limits.max_tools:
            raise ValueError(f"{len(primitives)} primitives and {CALL_SKILL} exceed the {self.tool_limits.max_tools} "
                             "tools one request may list (llm.max_tools)")
        return [dispatch_schema(), *primitives]

    def decoding(self, tools: list[Tool]) -> dict[str, Any] | None:
        """The request fields that constrain the reply (`response_format`, which llama.cpp's server, vLLM and
        OpenAI-compatible APIs all take); None unless tool calling is constrained."""
        if self.tool_calling != "constrained":
            return None
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "action", "schema": reply_schema(tools)}}}

    def stop(self, native: bool) -> list[str] | None:
        """The reply's stop sequences: the configured ones, else the protocol's own."""
        if self.prompts.stop is not None:
            return list(self.prompts.stop) or None
        return None if native or self.formatter is not None else ["\nObservation:"]

    @property
    def history(self) -> str:
        """The history policy, as recorded in each Episode: "full" or "window:N"."""
        return "full" if self.history_window is None else f"window:{self.history_window}"

    def window(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the model is sent: the system prompt and the opening observation, then the last
        `history_window` steps (each step is one reply and one observation message)."""
        steps = (len(messages) - 2) // 2
        if self.history_window is None or steps <= self.history_window:
            return messages
        opening = dict(messages[1])
        opening["content"] += (f"\n\n(Only your last {self.history_window} of {steps} steps are shown below; "
                               "earlier ones are left out.)")
        return [messages[0], opening, *messages[len(messages) - 2 * self.history_window:]]

    def opening(self, tools: list[Tool], observation: str) -> list[dict[str, Any]]:
        """An episode's first messages: the system prompt, then the opening observation (with the skill
        reminder when `restate_skills` is on)."""
        return [{"role": "system", "content": self.system_prompt(tools)},
                {"role": "user", "content": observation + self.reminder(tools)}]

    def request(self, messages: list[dict[str, Any]], tools: list[Tool] | None, session_id: str, seed: int) -> Any:
        """One actor request, `tools` listed as the protocol lists them (native schemas, a constrained
        reply's schema, its stop sequences); None for a formatter's replies, which follow its own format."""
        schemas = self.tool_schemas(tools) if tools is not None else None
        return self.client.chat(messages, role="actor", session_id=session_id, tools=schemas,
                                stop=self.stop(schemas is not None),
                                extra_body=self.decoding(tools) if tools is not None else None, seed=seed)

    def read(self, reply: Any, names: list[str]) -> ParsedAction:
        """The action of a reply to `request` with tools: its first native tool call, else the text
        protocol's call among `names`."""
        if not reply.tool_calls:
            return parse_text_action(reply.text, names)
        tc = reply.tool_calls[0]
        args = tc.arguments.get("__unparsed__")
        if tc.name == CALL_SKILL and CALL_SKILL not in names and args is None:
            return _dispatched(tc.arguments, reply.text, len(reply.tool_calls) - 1)
        return ParsedAction(tc.name, list(tc.arguments.values()) if args is None else [], reply.text,
                            "" if args is None else f"could not read the arguments {args!r}",
                            extra=len(reply.tool_calls) - 1, named=dict(tc.arguments) if args is None else None)

    def run(self, env: Env, tools: list[Tool], spec: EpisodeSpec, log: Callable[[str], None] | None = None,
            episode_id: str | None = None,
            on_step: Callable[[str, Env], str | None] | None = None) -> EpisodeRecords:
        """Play one episode. `episode_id` names it (the batch runner derives one from the batch's settings, so a
        replayed batch keeps its ids); by default a random suffix after the seed key. `on_step(observation,
        env)` runs after each step of an episode not yet over; notes it returns replace the actor's from the
        next step on (the system prompt is rebuilt; a formatter builds its own prompts and is not told)."""
        seed_key = f"{spec.run_id}/{spec.split}/c{spec.cycle}/{env.task_id}"  # same episode, same draws
        episode_id = episode_id or f"{seed_key}/{uuid.uuid4().hex[:8]}"
        started = time.time()
        by_name = {t.name: t for t in tools}
        by_lower = {t.name.lower(): t for t in tools}
        shown = env.reset()  # the observation the next prompt shows
        fmt = self.formatter
        reminder = self.reminder(tools)
        messages: list[dict[str, Any]] = self.opening(tools, shown) if fmt is None else []
        turns: list[PromptTurn] = []
        listed = tools if fmt is None else None  # a formatter's replies follow its own format
        steps: list[Step] = []
        calls: list[LLMCall] = []
        invalid = 0
        termination = "budget"
        for step in range(self.call_budget):
            if time.time() - started > self.wall_s:
                termination = "wall_clock"
                break
            if fmt is not None:
                admissible = fmt.admissible(env)
                messages = fmt.messages(env, turns, shown, admissible)
            sent = messages if fmt is not None else self.window(messages)
            try:
                reply = self.request(sent, listed, episode_id, zlib.crc32(f"{seed_key}/{step}".encode()))
            except LLMRequestError as e:
                if not e.context_full:
                    raise  # a request the server refuses for another reason is a setup problem, not an outcome
                termination = "context"  # the history outgrew the context window; counted in the tables
                break
            if self.prompt_token_ids is not None:
                ids = list(self.prompt_token_ids(sent))
                for r in reply.records:  # a request asked again sent the same prompt
                    r.prompt_token_ids = ids
            calls.extend(reply.records)
            t0 = time.perf_counter()
            if fmt is not None:
                parsed = fmt.parse(reply.text, tools)
                tc = None
            else:
                parsed = self.read(reply, list(by_name))
                tc = reply.tool_calls[0] if reply.tool_calls else None
                messages.append({"role": "assistant", "content": reply.text, **({"tool_calls": [
                    {"id": tc.id, "type": "function",
                     "function": {"name": tc.name, "arguments": json.dumps(tc.arguments)}}]} if tc else {})})
            tool = by_name.get(parsed.name) or by_lower.get(parsed.name.lower())
            problem = parsed.problem or ("" if tool else f"unknown action {parsed.name!r}; valid actions: "
                                         + ", ".join(by_name))
            dropped = ""
            if not problem and self.prompts.extra_arguments == "drop":
                parsed, dropped = drop_extra_arguments(parsed, tool)
            env_ms, reward_before = 0.0, env.total_reward
            if not problem:
                t_env = time.perf_counter()
                try:
                    observation = tool.run(parsed.args, wall_s=max(0.0, self.wall_s - (time.time() - started)))
                except ActionError as e:
                    problem = str(e)
                env_ms = (time.perf_counter() - t_env) * 1000
            if problem:
                observation = f"Invalid action: {problem}"
            elif parsed.extra:
                observation += f"\n(Only one action per turn: {parsed.extra} further action(s) ignored.)"
            if dropped and not problem:
                observation += f"\n({tool.signature} takes no such argument: {dropped} ignored.)"
            valid = not problem and not parsed.extra
            invalid += not valid
            if fmt is not None:
                turns.append(PromptTurn(shown, tuple(admissible), reply.text, parsed))
            elif tc is not None:
                messages.append({"role": "tool", "tool_call_id": tc.id, "content": observation + reminder})
            else:
                messages.append({"role": "user", "content": f"Observation: {observation}{reminder}"})
            shown = observation
            harness_ms = (time.perf_counter() - t0) * 1000 - env_ms
            steps.append(Step(episode_id, step, parsed.reasoning, parsed.name, json.dumps(parsed.args), valid,
                              observation, env.total_reward - reward_before, env.done, harness_ms))
            if env.done:
                termination = "success" if env.success() else "env_done"
                break
            if on_step is not None:
                notes = on_step(observation, env)
                if notes is not None and fmt is None:
                    messages[0] = {"role": "system", "content": replace(self, notes=notes).system_prompt(tools)}
        episode = Episode(
            episode_id=episode_id, run_id=spec.run_id, benchmark=spec.benchmark, method=spec.method,
            variant=spec.variant, seed=spec.seed, split=spec.split, cycle=spec.cycle,
            library_version=spec.library_version, task_id=env.task_id, success=env.success(),
            progression=env.score(), score=env.total_reward, n_steps=len(steps), n_llm_calls=len(calls),
            n_invalid_actions=invalid, prompt_tokens=sum(c.prompt_tokens for c in calls),
            # unknown (None) when any call's server did not report it: a partial sum would read as measured
            cached_tokens=None if any(c.cached_tokens is None for c in calls) else sum(c.cached_tokens for c in calls),
            completion_tokens=sum(c.completion_tokens for c in calls),
            reasoning_tokens=sum(c.reasoning_tokens for c in calls), wall_s=time.time() - started,
            termination=termination, history=self.history,
        )
        env.release()
        if log:
            log(f"{spec.split} task={env.task_id} success={episode.success} steps={episode.n_steps} "
                f"output_tokens={episode.completion_tokens} termination={termination}")
        return EpisodeRecords(episode, steps, calls)
