"""Model-free replay: the study's request streams from scripted or recorded trajectories, without an LLM.

A trajectory is what one game showed and what was done in it: per step the observation, the admissible
actions, the command and the reply. `record_trajectories` plays each game once, for real, with commands
from a source: `planner` (ALFWorld's bundled planner, the game's own solution), a JSON file mapping task
ids to command lists, or a recorded run folder (`runs/{format}/seed{n}` with episodes.parquet and
steps.parquet: the commands a model actually played). The reply is the command in the reply template
(`templates/replay_reply.txt`). `replay_stream` then builds every request of a prompt format from the
trajectories, token ids from a local tokenizer over Qwen2.5's chat template: no model and no game engine,
so each format's stream, simulation, table and figure takes seconds. Formats see the same games and the
same commands, so their differences are the prompts' alone.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from skillrepro.store import Episode, LLMCall, Step, read_records, write_records, write_text
from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.actor import (NO_ACTION_OBSERVATION, AlfWorldFormatter, StreamRequest, format_benchmark,
                                             reply_content, walk_views, write_counters, write_stream)
from skillrepro.studies.kvcache.tokenizers import get_tokenizer

PLANNER = "planner"


@dataclass
class Trajectory:
    task_id: str
    task: str  # the task sentence as the prompts quote it
    turns: list[F.Turn]  # step t: what the game showed, the command, the admissible actions, the reply
    rewards: list[float]
    success: bool


def load_commands(source: str, benchmark, task_ids: list[str]) -> dict[str, list[str]]:
    """task id -> commands, for every task of `task_ids` (a task the source lacks is an error)."""
    if source == PLANNER:
        # lazy: optional extra `benchmarks` (alfworld, textworld), needed only for the planner's commands
        from skillrepro.benchmarks.alfworld import policy_commands

        return {t: policy_commands(benchmark.game(t)) for t in task_ids}
    path = Path(source)
    if path.is_dir():
        found = commands_from_run(path)
    elif path.is_file():
        try:
            found = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"kvcache.replay: {path} is not JSON: {e}") from None
        if not isinstance(found, dict) or not all(
                isinstance(v, list) and all(isinstance(c, str) for c in v) for v in found.values()):
            raise ValueError(f"kvcache.replay: {path} must map task ids to lists of command strings")
    else:
        raise ValueError(f"kvcache.replay: {source!r} is neither 'planner' nor an existing file or run folder")
    missing = [t for t in task_ids if t not in found]
    if missing:
        raise ValueError(f"kvcache.replay: {source} has no trajectory for task(s) {', '.join(missing)}")
    return {t: list(found[t]) for t in task_ids}


def commands_from_run(run_dir: str | Path) -> dict[str, list[str]]:
    """The commands each episode of a recorded run issued, by task id (a task's first episode wins)."""
    run_dir = Path(run_dir)
    for name in ("episodes.parquet", "steps.parquet"):
        if not (run_dir / name).exists():
            raise ValueError(f"kvcache.replay: run folder {run_dir} has no {name}")
    task_of = {e.episode_id: e.task_id for e in read_records(run_dir / "episodes.parquet", Episode)}
    out: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    for s in sorted(read_records(run_dir / "steps.parquet", Step), key=lambda s: (s.episode_id, s.step)):
        task = task_of.get(s.episode_id)
        if task is None or first.setdefault(task, s.episode_id) != s.episode_id:
            continue
        args = json.loads(s.arguments or "[]")
        # a step whose reply had no action: "" (replayed as the actor plays it: the problem shown, no game step)
        out.setdefault(task, []).append(str(args[0]) if s.action == "act" and args else "")
    return out


def record_trajectories(source: str, benchmark, task_ids: list[str], call_budget: int,
                        reply: Callable[[str], str]) -> list[Trajectory]:
    """Play each game with its commands (at most `call_budget`, stopping when the game ends). A source
    that already holds recorded trajectories (a file `write_trajectories` wrote) is read instead."""
    recorded = _recorded(source)
    if recorded is not None:
        by_task = {t.task_id: t for t in recorded}
        missing = [t for t in task_ids if t not in by_task]
        if missing:
            raise ValueError(f"kvcache.replay: {source} has no trajectory for task(s) {', '.join(missing)}")
        return [_cut(by_task[t], call_budget) for t in task_ids]
    commands = load_commands(source, benchmark, task_ids)
    out = []
    for task_id in task_ids:
        env = benchmark.make(task_id)
        try:
            observation = env.reset()
            turns, rewards = [], []
            for command in commands[task_id][:call_budget]:
                if not command:  # a reply without an action: as the actor, show the problem, leave the game
                    turns.append(F.Turn(observation, "(none)", list(env.admissible_actions), reply(command)))
                    observation = NO_ACTION_OBSERVATION
                    rewards.append(0.0)
                    continue
                turns.append(F.Turn(observation, command, list(env.admissible_actions), reply(command)))
                result = env.step("act", [command])
                observation = result.observation
                rewards.append(result.reward)
                if env.done:
                    break
            out.append(Trajectory(task_id, AlfWorldFormatter.task_sentence(env), turns, rewards, bool(env.success())))
        finally:
            env.release()
    return out


def _recorded(source: str) -> list[Trajectory] | None:
    path = Path(source)
    if source == PLANNER or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"kvcache.replay: {path} is not JSON: {e}") from None
    if not isinstance(data, list):
        return None  # a command file
    try:
        return read_trajectories(path)
    except (TypeError, KeyError) as e:
        raise ValueError(f"kvcache.replay: {path} is not a trajectories file: {e}") from None


def _cut(tr: Trajectory, call_budget: int) -> Trajectory:
    if len(tr.turns) <= call_budget:
        return tr
    return Trajectory(tr.task_id, tr.task, tr.turns[:call_budget], tr.rewards[:call_budget], False)


def views_at(trajectories: list[Trajectory], step: int) -> list[F.EpisodeView]:
    """Each game at `step` (or its last step, if it ended sooner), for the static shared-prefix analysis."""
    views = []
    for tr in trajectories:
        t = min(step, len(tr.turns) - 1)
        turn = tr.turns[t]
        views.append(F.EpisodeView(tr.task_id, tr.task, tuple(tr.turns[:t]), turn.observation, tuple(turn.admissible)))
    return views


def prefix_views(kv, bench, tasks_path, trajectories_path) -> list[F.EpisodeView]:
    """The games at `kv.prefix_step` for the static analyses: the recorded games when the study replays
    (no engine needed), else the games walked in the engine without a model."""
    if kv.replay:
        return views_at(read_trajectories(trajectories_path), kv.prefix_step)
    tasks = json.loads(Path(tasks_path).read_text())["tasks"]
    return walk_views(format_benchmark(bench), tasks, kv.prefix_step)


def write_trajectories(path, trajectories: list[Trajectory]) -> None:
    write_text(path, json.dumps([asdict(t) for t in trajectories], indent=1))


def read_trajectories(path) -> list[Trajectory]:
    out = []
    for d in json.loads(Path(path).read_text()):
        d["turns"] = [F.Turn(**t) for t in d["turns"]]
        out.append(Trajectory(**d))
    return out


def replay_stream(fmt: str, trajectories: list[Trajectory], encode: Callable[[str], list[int]],
                  bank: F.SkillBank | None = None, templates: F.Templates | None = None,
                  episode_prefix: str = "") -> list[StreamRequest]:
    """Every request format `fmt` sends while the trajectories are played, episode after episode (as a
    one-slot server would receive them; `started_at` is the request's index)."""
    stream = []
    for tr, t, messages in harness_messages(fmt, trajectories, bank, templates):
        reply_ids = encode(tr.turns[t].reply)
        stream.append(StreamRequest(f"{episode_prefix}{tr.task_id}", t, tr.task_id, F.detect_category(tr.task),
                                    float(len(stream)), encode(F.render_chatml(messages)), len(reply_ids), None,
                                    reply_ids))
    return stream


def harness_messages(fmt: str, trajectories: list[Trajectory], bank: F.SkillBank | None = None,
                     templates: F.Templates | None = None):
    """(trajectory, step, messages) of every request format `fmt` sends while the trajectories are played:
    the harness's prompts, built from what the game showed without running the actor (seed 001, 2-0)."""
    bank = bank or F.load_bank()
    for tr in trajectories:
        for t, turn in enumerate(tr.turns):
            yield tr, t, F.build_messages(fmt, bank, tr.task, None, tr.turns[:t], turn.observation, turn.admissible,
                                          templates=templates)


@dataclass
class PromptCheckRow:
    """One run's prompts as the actor sent them against the harness's rebuild of them (seed 001, 2-0: the
    seminar's harness equalled SkillRL's official path on 1,259 prompts, character for character)."""

    prompts: int  # actor requests of the run
    compared: int  # those the harness rebuilt (same episode and step)
    equal: int  # character for character
    first_difference: str  # "<episode> step <t> char <i>: actor '...' / harness '...'" ("" when all equal)


def prompt_check(actor_calls: list[LLMCall], episode_task: dict[str, str], trajectories: list[Trajectory], fmt: str,
                 bank: F.SkillBank | None = None, templates: F.Templates | None = None) -> PromptCheckRow:
    """Compare every actor request of a run (its messages as sent, `LLMCall.prompt`) with the prompt the
    harness builds for the same game and step from the run's commands replayed in the game engine. Formats
    that quote earlier replies get the run's own replies (the harness has no model)."""
    calls: dict[str, list[LLMCall]] = {}
    for c in sorted(actor_calls, key=lambda c: c.started_at):
        calls.setdefault(c.session_id, []).append(c)
    trs = {tr.task_id: tr for tr in trajectories}
    compared = equal = 0
    first = ""
    for episode, cs in calls.items():
        tr = trs.get(episode_task.get(episode, ""))
        rebuilt = {}
        if tr is not None:
            replies = [reply_content(c.response) for c in cs]
            turns = [dataclasses.replace(turn, reply=replies[t]) if t < len(replies) else turn
                     for t, turn in enumerate(tr.turns)]
            tr = dataclasses.replace(tr, turns=turns)
            rebuilt = {t: m for _, t, m in harness_messages(fmt, [tr], bank, templates)}
        for step, call in enumerate(cs):
            if step not in rebuilt:
                continue
            compared += 1
            sent = _render(json.loads(call.prompt)["messages"])
            built = _render(rebuilt[step])
            if sent == built:
                equal += 1
            elif not first:
                i = next((k for k, (a, b) in enumerate(zip(sent, built)) if a != b), min(len(sent), len(built)))
                first = (f"{episode} step {step} char {i}: actor {sent[max(0, i - 20):i + 40]!r} / "
                         f"harness {built[max(0, i - 20):i + 40]!r}")
    return PromptCheckRow(sum(len(cs) for cs in calls.values()), compared, equal, first)


def _render(messages: list[dict]) -> str:
    """The text the model reads: Qwen2.5's chat template over the messages' roles and contents."""
    return F.render_chatml([{"role": m["role"], "content": m.get("content") or ""} for m in messages])


def replay_records(fmt: str, seed: int, bench_name: str, split: str, trajectories: list[Trajectory],
                   stream: list[StreamRequest], model: str):
    """The episode, step and llm-call records of a replayed run, shaped as a model run's."""
    run_id = f"kvcache/{fmt}/seed{seed}"
    by_episode: dict[str, list[StreamRequest]] = {}
    for r in stream:
        by_episode.setdefault(r.episode, []).append(r)
    episodes, steps, calls = [], [], []
    for tr in trajectories:
        eid = f"{run_id}/{split}/{tr.task_id}"
        reqs = by_episode.get(tr.task_id, [])
        for t, (turn, r) in enumerate(zip(tr.turns, reqs)):
            nxt = tr.turns[t + 1].observation if t + 1 < len(tr.turns) else ""
            steps.append(Step(eid, t, turn.reply, "act", json.dumps([turn.action]), bool(turn.action), nxt,
                              tr.rewards[t], t == len(tr.turns) - 1 and tr.success, 0.0))
            calls.append(LLMCall(f"{eid}/{t}", eid, "actor", model, "replay", len(r.token_ids), None,
                                 r.completion_tokens, 0, 0.0, 0, "stop",
                                 hashlib.sha256(str(r.token_ids).encode()).hexdigest(), "", turn.reply,
                                 r.started_at, list(r.token_ids)))
        termination = "success" if tr.success else "budget"
        episodes.append(Episode(eid, run_id, bench_name, "kvcache", fmt, seed, split, 0, 0, tr.task_id, tr.success,
                                float(tr.success), sum(tr.rewards), len(tr.turns), len(reqs),
                                sum(not t.action for t in tr.turns), sum(len(r.token_ids) for r in reqs), None,  # no server: cached unknown
                                sum(r.completion_tokens for r in reqs), 0, 0.0, termination))
    return episodes, steps, calls


def replay_run(*, fmt: str, seed: int, bench_name: str, split: str, trajectories: str, out_dir: str,
               tokenizer: str = "qwen2.5", bank_path: str | None = None, templates_dir: str | None = None,
               model: str = "replay") -> list[StreamRequest]:
    """One (format, seed) run replayed: the same files as `actor.record_run` writes. The seed changes
    nothing (a replay has no sampling); it only names the run, as a model run's does."""
    trs = read_trajectories(trajectories)
    stream = replay_stream(fmt, trs, get_tokenizer(tokenizer).encode, F.load_bank(bank_path), F.Templates(templates_dir))
    episodes, steps, calls = replay_records(fmt, seed, bench_name, split, trs, stream, model)
    out = Path(out_dir)
    write_records(out / "episodes.parquet", episodes, Episode)
    write_records(out / "steps.parquet", steps, Step)
    write_records(out / "llm_calls.parquet", calls, LLMCall)
    write_stream(out / "requests.jsonl", stream)
    write_counters(out / "server_counters.json", {"backend": "replay", "delta": None})
    return stream
