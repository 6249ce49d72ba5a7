"""The ALFWorld actor in each prompt format, with the prompt token ids of every request recorded.

`AlfWorldFormatter` plugs a format of `formats.py` into `skillrepro.agent.Actor` (its `formatter` hook): every
step's messages are rebuilt from the turns so far, the current observation and the game's admissible
actions, and the reply's `<action>...</action>` is sent to the game as one command. `prompt_ids_fn` asks the
server for the token ids of a request exactly as it tokenises it (llama.cpp: /apply-template + /tokenize;
vLLM: /tokenize with the messages). `run_format` plays a list of games and returns the records plus the
request stream (`StreamRequest`) the simulator replays.
"""
from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from skillrepro.agent import Actor, EpisodeRecords, EpisodeSpec, ParsedAction, PromptTurn, Tool, primitive_tools
from skillrepro.benchmarks import get_benchmark
from skillrepro.config import ROLLOUT_WALL_S, LLMConfig
from skillrepro.llm.client import session
from skillrepro.llm.tokenize import server_root, tokenize
from skillrepro.progress import Progress
from skillrepro.store import Episode, LLMCall, Step, write_records, write_text
from skillrepro.studies.kvcache import formats as F
from skillrepro.llm import vllm_metrics
from skillrepro.llm.servers import erase_slots
from skillrepro.llm.vllm_env import reset_prefix_cache

_ACTION = re.compile(r"<action>(.*?)(?:</action>|$)", re.IGNORECASE | re.DOTALL)
NO_ACTION = "no action found; put one admissible action in <action> </action> tags"
# what the runner (agent.Actor) shows after a reply without an action: the game is not stepped
NO_ACTION_OBSERVATION = f"Invalid action: {NO_ACTION}"


class AlfWorldFormatter:
    """One prompt format of the ALFWorld actor (SkillRL's protocol: reason in <think>, act in <action>)."""

    def __init__(self, fmt: str, bank: F.SkillBank | None = None, templates: F.Templates | None = None):
        if fmt not in F.FORMATS:
            raise ValueError(f"unknown prompt format {fmt!r}; choose one of {F.FORMATS}")
        self.fmt = fmt
        self.bank = bank or F.load_bank()
        self.templates = templates or F.Templates()

    def admissible(self, env) -> list[str]:
        return list(env.admissible_actions)

    @staticmethod
    def task_sentence(env) -> str:
        # SkillRL quotes the sentence as the game states it, with its full stop.
        task = env.task.strip()
        return task if task.endswith(".") else task + "."

    def messages(self, env, turns: list[PromptTurn], observation: str, admissible: list[str]) -> list[dict]:
        history = [F.Turn(t.observation, action_text(t.action), list(t.admissible), t.reply) for t in turns]
        return F.build_messages(self.fmt, self.bank, self.task_sentence(env), None, history, observation,
                                admissible, templates=self.templates)

    def parse(self, reply: str, tools: list[Tool]) -> ParsedAction:
        m = _ACTION.search(reply)
        reasoning = reply[: m.start()] if m else reply
        command = " ".join(m.group(1).split()).lower() if m else ""
        if not command:
            return ParsedAction("", [], reasoning, NO_ACTION)
        # The game itself answers a command it does not admit ("Nothing happens."), as in ALFWorld.
        return ParsedAction("act", [command], reasoning)


def action_text(action: ParsedAction) -> str:
    if action.name == "act" and action.args:
        return str(action.args[0])
    return action.name or "(none)"


# -- prompt token ids from the server -------------------------------------------------------------------


def prompt_ids_fn(llm: LLMConfig, base_url: str) -> Callable[[list[dict]], list[int]]:
    """messages -> the prompt token ids the server computes for them (chat template applied)."""
    if llm.backend not in ("embedded", "vllm"):
        raise ValueError(f"llm.backend {llm.backend!r}: prompt token ids need a server with /tokenize "
                         "(embedded or vllm), which the KV-cache study needs")
    return _named(lambda messages: tokenize(server_root(base_url), llm.backend, messages=messages, model=llm.model,
                                            add_special=True, parse_special=True, timeout_s=llm.timeout_s),
                  server_root(base_url))


def text_ids_fn(llm: LLMConfig, base_url: str) -> Callable[[str], list[int]]:
    """text -> token ids without special handling (for replies, which the server generated as plain text)."""
    return _named(lambda text: tokenize(server_root(base_url), llm.backend, text=text, model=llm.model,
                                        parse_special=False, timeout_s=llm.timeout_s),
                  server_root(base_url))


def _named(fn: Callable[[Any], list[int]], root: str) -> Callable[[Any], list[int]]:
    """`fn`, its request's errors raised as a RuntimeError naming the server."""
    def call(arg: Any) -> list[int]:
        try:
            return fn(arg)
        except (OSError, KeyError, ValueError) as e:
            raise RuntimeError(f"prompt token ids: {root}/tokenize failed: {e}") from e
    return call


# -- the server's cached-token count, required -------------------------------------------------------


class CachedTokensUnreported(RuntimeError):
    """A served run's server does not report each request's cached tokens: no measured figure can be made."""


# what each backend's server needs to report usage.prompt_tokens_details.cached_tokens
_COUNTER_HINTS = {
    "vllm": "start `vllm serve` with --enable-prompt-tokens-details (the project passes it when it starts vLLM "
            "itself: leave llm.base_url unset to let it)",
    "embedded": "use a llama.cpp server that reports usage.prompt_tokens_details.cached_tokens or timings.cache_n "
                "(the shipped xllamacpp does)",
    "openai": "this API does not report usage.prompt_tokens_details.cached_tokens; serve the model with vLLM "
              "(--enable-prompt-tokens-details) or llama.cpp instead",
}


def unreported_message(backend: str, where: str) -> str:
    """Why a served run cannot be measured, naming the server and what it needs."""
    hint = _COUNTER_HINTS.get(backend, "use a server that reports usage.prompt_tokens_details.cached_tokens")
    return (f"the {backend} server at {where} does not report cached tokens (usage.prompt_tokens_details."
            f"cached_tokens): the KV-cache study's measured reuse would read as unknown, not 0; {hint}")


class RequireCachedTokens:
    """The client, failing at the first reply whose server reports no cached-token count, before a whole run
    is played and recorded as if it had been measured."""

    def __init__(self, client, backend: str):
        self._client, self._backend = client, backend

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def chat(self, *args, **kwargs):
        reply = self._client.chat(*args, **kwargs)
        if reply.record.cached_tokens is None:
            raise CachedTokensUnreported(unreported_message(self._backend, self._client.base_url))
        return reply


# -- runs -----------------------------------------------------------------------------------------------


@dataclass
class StreamRequest:
    """One actor request as the server received it: one line of a request stream."""

    episode: str
    step: int
    task_id: str
    category: str  # SkillRL's keyword category of the task sentence
    started_at: float
    token_ids: list[int]
    completion_tokens: int
    server_cached_tokens: int | None  # None: no server count (a replay; never a served run, which fails first)
    response_token_ids: list[int] = field(default_factory=list)
    finish_reason: str = ""  # the server's ("length": cut at max_tokens); empty in replays and older streams


@dataclass
class FormatRun:
    records: list[EpisodeRecords]
    stream: list[StreamRequest]


class Lockstep:
    """The episodes of one group advance step by step together, as the simulator's lockstep batches do
    (`study.lockstep_requests`): an episode's request for step t goes out only once every episode of its group
    still playing has reached step t; an episode that ends leaves the group."""

    def __init__(self, members):
        self._cond = threading.Condition()
        self._active, self._arrived = set(members), set()
        self.round = 0

    def _release_if_all_arrived(self) -> None:
        if self._arrived and self._arrived >= self._active:
            self._arrived.clear()
            self.round += 1
            self._cond.notify_all()

    def arrive(self, member) -> None:
        with self._cond:
            here = self.round
            self._arrived.add(member)
            self._release_if_all_arrived()
            self._cond.wait_for(lambda: self.round != here)

    def leave(self, member) -> None:
        with self._cond:
            self._active.discard(member)
            self._arrived.discard(member)
            self._release_if_all_arrived()


class _LockstepClient:
    """One episode's client: each request waits for its group's round (Lockstep.arrive)."""

    def __init__(self, client, lockstep: Lockstep, member):
        self._client, self._lockstep, self._member = client, lockstep, member

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def chat(self, *args, **kwargs):
        self._lockstep.arrive(self._member)
        return self._client.chat(*args, **kwargs)


def run_format(*, formatter: AlfWorldFormatter, benchmark, task_ids: list[str], client, spec: EpisodeSpec,
               call_budget: int, wall_s: float = float(ROLLOUT_WALL_S),
               prompt_ids: Callable[[list[dict]], list[int]] | None = None,
               reply_ids: Callable[[str], list[int]] | None = None, parallel: int = 1, lockstep: bool = False,
               log: Callable[[str], None] | None = None) -> FormatRun:
    """Play `task_ids` with `formatter`'s prompts; `parallel` episodes at a time (a batching server such as
    vLLM serves them together). Free-running (the default), a new episode starts as soon as one ends and each
    sends its next request when its last reply is in; `lockstep`: the games in groups of `parallel` (in task
    order), a group after the one before it has ended, its episodes' step-t requests sent together once all of
    them reached step t: the request order the simulator's lockstep concurrency `parallel` assumes. Records
    come back in task order; the stream in request start order."""
    lock = threading.Lock()

    def play(task_id: str, group: Lockstep | None = None, member: int = 0) -> tuple[str, EpisodeRecords]:
        try:
            with lock:
                env = benchmark.make(task_id)
            if parallel > 1:
                env = _Serialized(env, lock)
            actor = Actor(client if group is None else _LockstepClient(client, group, member), benchmark.describe(),
                          call_budget, wall_s, "text", formatter=formatter, prompt_token_ids=prompt_ids)
            rec = actor.run(env, primitive_tools(env), spec, log)
        finally:
            if group is not None:  # ended (or failed): the group's next rounds no longer wait for it
                group.leave(member)
        progress.update()
        return F.detect_category(env.task), rec

    with Progress(len(task_ids), f"{spec.variant} episodes") as progress:  # episodes done of N on the console
        if lockstep and parallel > 1:
            played = []
            with ThreadPoolExecutor(parallel) as pool:
                for g in range(0, len(task_ids), parallel):
                    members = range(g, min(g + parallel, len(task_ids)))  # the group's episodes, by task index
                    group = Lockstep(members)
                    played += list(pool.map(lambda i, grp=group: play(task_ids[i], grp, i), members))
        elif parallel > 1:
            with ThreadPoolExecutor(parallel) as pool:
                played = list(pool.map(play, task_ids))
        else:
            played = [play(t) for t in task_ids]
    stream = []
    for category, rec in played:
        step = 0
        for i, call in enumerate(rec.llm_calls):
            response = reply_content(call.response) if reply_ids else ""
            stream.append(StreamRequest(rec.episode.episode_id, step, rec.episode.task_id, category, call.started_at,
                                        list(call.prompt_token_ids), call.completion_tokens, call.cached_tokens,
                                        reply_ids(response) if reply_ids and response else [],
                                        call.finish_reason or ""))
            # a reply empty at its cap, asked again, is a server request of its own at the same step
            step += not (i + 1 < len(rec.llm_calls) and "empty_at_cap" in rec.llm_calls[i + 1].faults)
    stream.sort(key=lambda r: r.started_at)
    return FormatRun([rec for _, rec in played], stream)


class _Serialized:
    """An env whose every method call holds a shared lock: textworld's PDDL parser and the game engines are
    not thread-safe, while the model calls of parallel episodes may overlap freely."""

    def __init__(self, env, lock: threading.Lock):
        self._env, self._lock = env, lock

    def __getattr__(self, name: str):
        value = getattr(self._env, name)
        if not callable(value):
            return value

        def locked(*args, **kwargs):
            with self._lock:
                return value(*args, **kwargs)
        return locked


def reply_content(response: str) -> str:
    """The reply text of an LLMCall.response (the client stores {"content", "tool_calls"} as JSON)."""
    try:
        return str(json.loads(response).get("content") or "")
    except (ValueError, AttributeError):
        return response


def write_stream(path, stream: list[StreamRequest]) -> None:
    """JSONL in the simulator's input format (`skillrepro kvcache simulate --requests`), plus our columns."""
    import dataclasses

    write_text(path, "".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in stream))


def write_counters(path, counters: dict) -> None:
    """The server's own cache counters for a run (`delta`: None where the backend has none)."""
    write_text(path, json.dumps(counters, indent=1))


def walk_views(benchmark, task_ids: list[str], step: int) -> list[F.EpisodeView]:
    """Each game at `step`, reached without a model by visiting receptacles in the order the game lists
    them (the history only has to be real ALFWorld text: every format's cross-episode prefix ends before
    it). For the static shared-prefix analysis."""
    views = []
    for task_id in task_ids:
        env = benchmark.make(task_id)
        try:
            observation = env.reset()
            history: list[F.Turn] = []
            visited: set[str] = set()
            for _ in range(step):
                admissible = list(env.admissible_actions)
                moves = [a for a in admissible if a.startswith("go to ") and a not in visited] or admissible
                command = moves[0]
                visited.add(command)
                history.append(F.Turn(observation, command, admissible))
                observation = env.step("act", [command]).observation
                if env.done:
                    break
            views.append(F.EpisodeView(task_id, AlfWorldFormatter.task_sentence(env), tuple(history), observation,
                                       tuple(env.admissible_actions)))
        finally:
            env.release()
    return views


def format_benchmark(bench):
    """The ALFWorld benchmark of `bench` (a config.BenchmarkConfig) with observations that leave the
    admissible actions out: each prompt format places them itself."""
    return get_benchmark(bench.env, **{**bench.options, "show_admissible": False})


def record_run(*, fmt: str, seed: int, bench, llm: LLMConfig, task_ids: list[str], call_budget: int,
               out_dir: str, split: str = "test", bank_path: str | None = None, templates_dir: str | None = None,
               max_tokens: int | None = None, parallel: int = 1, wall_s: float = float(ROLLOUT_WALL_S),
               lockstep: bool = False, log: Callable[[str], None] | None = None) -> FormatRun:
    """One (format, seed) run of the study: play the games with the server this job may use, record every
    request's prompt and reply token ids, and write episodes/steps/llm_calls.parquet and requests.jsonl."""
    import dataclasses
    from pathlib import Path

    llm = dataclasses.replace(llm, max_tokens=max_tokens or llm.max_tokens)
    formatter = AlfWorldFormatter(fmt, F.load_bank(bank_path), F.Templates(templates_dir))
    spec = EpisodeSpec(f"kvcache/{fmt}/seed{seed}", bench.name, "kvcache", fmt, seed, split, 0, 0)
    benchmark = format_benchmark(bench)
    counters: dict = {"backend": llm.backend, "delta": None}
    with session(llm, cache=False) as client:  # the study measures the server's cache: every request goes to it
        # every run starts from an empty cache, whichever runs the server served before
        if llm.backend == "vllm":  # the server's own cache counters, before and after this run's requests
            reset_prefix_cache(client.base_url)
            counters["cache"] = "reset before the run"
            before = vllm_metrics.scrape(client.base_url)
        elif llm.backend == "embedded":
            counters["cache"] = f"slots erased before the run ({erase_slots(client.base_url)} tokens)"
        run = run_format(formatter=formatter, benchmark=benchmark, task_ids=task_ids,
                         client=RequireCachedTokens(client, llm.backend), spec=spec,
                         call_budget=call_budget, wall_s=wall_s, prompt_ids=prompt_ids_fn(llm, client.base_url),
                         reply_ids=text_ids_fn(llm, client.base_url), parallel=parallel, lockstep=lockstep,
                         log=log)
        if llm.backend == "vllm":
            after = vllm_metrics.scrape(client.base_url)
            counters.update(before=dataclasses.asdict(before), after=dataclasses.asdict(after),
                            delta=dataclasses.asdict(after.minus(before)))
    out = Path(out_dir)
    write_counters(out / "server_counters.json", counters)
    write_records(out / "episodes.parquet", [r.episode for r in run.records], Episode)
    write_records(out / "steps.parquet", [s for r in run.records for s in r.steps], Step)
    write_records(out / "llm_calls.parquet", [c for r in run.records for c in r.llm_calls], LLMCall)
    write_stream(out / "requests.jsonl", run.stream)
    return run
