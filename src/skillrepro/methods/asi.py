"""ASI, Agent Skill Induction (Wang et al. 2025c) as SpeedRunner adapts it (section 4.1, appendix E): after
each training batch, an inducer call (role "inducer") reads each SUCCESSFUL episode of the batch and writes
new Python functions from it. The library is append-only: a function whose name exists is refused, nothing
is edited or deleted. No code interpreter; a new function is kept when the library with it still loads.

`asi` is the online adaptation: the original's replay verification is removed (no task is re-run).
`asi_replay` (appendix G.3) restores it: the functions induced from an episode are kept only if the actor,
with them available, solves that episode's task instance again. Those replay episodes are the only
environment steps outside rollout and evaluation jobs; they are recorded under induce/v{k}/replay/NNN/
(episodes with split "replay", steps, skill_calls) and their actor calls go to the sleep phase's
llm_calls.parquet with role "replay", so the method's cost includes them.

Crafter has no pass/fail (success means all 22 achievements): `min_progression` lets an episode that
reached that progression count as successful there.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, replace

from skillrepro.config import ROLLOUT_WALL_S
from skillrepro.methods import InduceContext, register, bind
from skillrepro.methods.common import (Trace, append_functions, budget, check_prompt_file, listing, prompt_text,
                                        read_traces, reply_code, show_traces, save_records)
from skillrepro.skills import Library
from skillrepro.store import LLMCall, read_records
from skillrepro.benchmarks import load_benchmark, primitive_returns
from skillrepro.agent import EpisodeSpec
from skillrepro.runner import run_batch


@dataclass(frozen=True)
class Options:
    max_new_per_episode: int = 3  # functions kept from one episode at most
    min_progression: float | None = None  # also learn from episodes at or above this progression (Crafter)
    prompt_file: str | None = None  # replaces prompts/asi_inducer.txt

    def check(self) -> None:
        if self.max_new_per_episode < 1:
            raise ValueError("max_new_per_episode must be >= 1")
        if self.min_progression is not None and not 0 < self.min_progression <= 1:
            raise ValueError("min_progression must be in (0, 1]")
        check_prompt_file("prompt_file", self.prompt_file)


@dataclass(frozen=True)
class ReplayOptions(Options):
    replay_wall_s: float = float(ROLLOUT_WALL_S)  # wall clock of one replay episode (as budgets.rollout_wall_s)


def solved(trace_or_episode, opts: Options) -> bool:
    if trace_or_episode.success:
        return True
    return opts.min_progression is not None and trace_or_episode.progression >= opts.min_progression


def _listing(library: Library, chars: int) -> str:
    """The library as the inducer's prompt lists it, a line per function (its signature and its docstring's first
    line), as many whole lines as `chars` (inducer.library_chars, sized from the context where null) holds."""
    return listing([f"- {f.signature}: {f.doc.splitlines()[0] if f.doc else ''}" for f in library.functions], chars)


def induce(ctx: InduceContext, client) -> Library:
    return _induce(ctx, client, replay=False)


def induce_replay(ctx: InduceContext, client) -> Library:
    return _induce(ctx, client, replay=True)


def _induce(ctx: InduceContext, client, replay: bool) -> Library:
    opts: Options = ctx.options
    bench = load_benchmark(ctx.bench)
    primitives = {p.name for p in bench.primitives()}
    max_tokens, _ = budget(ctx.llm, ctx.limits)
    template = prompt_text(opts.prompt_file, "asi_inducer.txt")
    session_id = f"{ctx.run_id}/induce/v{ctx.library.version + 1}"
    # Online: the sleep phase after batch k learns from batch k's episodes (earlier ones had their turn).
    batch = read_traces(ctx.history_dirs[-1:])
    wins = [t for t in batch if solved(t, opts)]
    library = ctx.library
    calls: list[LLMCall] = []
    transcript: list[dict] = []
    stats = {"episodes": len(batch), "successful": len(wins), "induced": 0, "replays": 0, "replays_solved": 0}
    listing_chars = ctx.limits.library_room(ctx.llm)
    for n, trace in enumerate(wins):
        system = template.format(environment=bench.describe(), existing=_listing(library, listing_chars),
                                 primitives="\n".join(f"- {p.signature}: {p.doc}" for p in bench.primitives()),
                                 returns=primitive_returns(bench.primitives()))
        shown = show_traces([trace], ctx.trajectory_tokens)
        user = shown.text
        reply = client.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                            role="inducer", session_id=session_id, max_tokens=max_tokens, seed=n)
        calls.extend(reply.records)
        added, refused = append_functions(library, reply_code(reply.text), primitives, ctx.sandbox)
        refused += [f"{f.name}: over max_new_per_episode" for f in added[opts.max_new_per_episode:]]
        added = added[: opts.max_new_per_episode]
        entry = {"episode_id": trace.episode_id, "task_id": trace.task_id, "reply": reply.text,
                 "trajectory_tokens": ctx.trajectory_tokens, "trajectory_tokens_shown": shown.tokens,
                 **shown.record(), "added": [f.name for f in added], "refused": refused}
        if added and replay:
            candidate = replace(library, functions=library.functions + tuple(added))
            ok, replay_calls = _replay(ctx, client, candidate, trace, n, opts)
            calls += replay_calls
            stats["replays"] += 1
            stats["replays_solved"] += ok
            entry["replay_solved"] = ok
            if not ok:
                added = []
        library = replace(library, functions=library.functions + tuple(added))
        stats["induced"] += len(added)
        transcript.append(entry)
    save_records(ctx.record_dir, calls, transcript)
    return Library(ctx.library.version + 1, library.functions, ctx.library.notes, {
        "method": ctx.method.method, "variant": ctx.method.variant, "cycle": ctx.cycle, "session_id": session_id,
        "replay_check": replay, **stats})


def _replay(ctx: InduceContext, client, candidate: Library, trace: Trace, n: int, opts: ReplayOptions) -> tuple[bool, list[LLMCall]]:
    """Re-run the inducing task instance with the candidate library; (solved again?, its actor calls as
    role "replay"). Its episode, steps and skill calls stay in induce/v{k}/replay/NNN/."""
    folder = ctx.record_dir / "replay" / f"{n:03d}"
    lib_dir = ctx.record_dir / "replay" / f".library{n:03d}"
    shutil.rmtree(lib_dir, ignore_errors=True)
    candidate.write(lib_dir)
    seed = int(m.group(1)) if (m := re.search(r"seed(\d+)$", ctx.run_id)) else 0
    spec = EpisodeSpec(ctx.run_id, ctx.bench.name, ctx.method.method, ctx.method.variant, seed, "replay",
                       ctx.cycle, candidate.version + 1)
    outcome = run_batch(bench=ctx.bench, llm=ctx.llm, library_dir=lib_dir, task_ids=[trace.task_id], spec=spec,
                        out_dir=folder, wall_s=opts.replay_wall_s, method=bind(ctx.method), client=client,
                        sandbox=ctx.sandbox, prompts=ctx.prompts)
    shutil.rmtree(lib_dir, ignore_errors=True)
    # The replay's calls are a sleep-phase cost: they move into the sleep phase's llm_calls table.
    calls = [replace(c, role="replay") for c in read_records(folder / "llm_calls.parquet", LLMCall)]
    (folder / "llm_calls.parquet").unlink()
    return solved(outcome.episodes[0], opts), calls


register("asi", Options, induce)
register("asi_replay", ReplayOptions, induce_replay)
