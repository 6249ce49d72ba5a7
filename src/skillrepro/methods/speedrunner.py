"""SpeedRunner: a coding agent edits the skill library between rollout batches.

The inducer is an LLM with tools: `execute_code` (Python in the sandbox, with the run's history in a
read-only DuckDB), `read_library`, `write_function`, `delete_function`, `finish`. It works on a copy of
library v{k}; every write is checked before it is kept: it parses and the library loads in the sandbox.
The online protocol forbids replay (appendix E, section 2: a finished rollout's task is never re-run), so
no check steps an environment; `replay_check: true` re-runs a new zero-argument function on a fresh copy of
a past training task, a deviation kept as an explicit option (recorded in the manifest, off by default).
Whatever the model manages, the result is a valid v{k+1}: v{k} plus the writes that passed.

The method in five modules: this one (options, registration, `induce`: one sleep phase, step by step),
`speedrunner_protocol` (the tools, how a reply is read as a call: a lenient text protocol, native calls, or
JSON under `constrained`; the worked examples), `speedrunner_gate` (the working library and the checks a write
passes before it is kept), `speedrunner_history` (what the inducer is shown of the run: facts, an example
episode, the interpreter's database) and `speedrunner_session` (the requests, each reply answered by its tool).

Ablations (method options): prompt asi_style (the ASI-like prompt file), access all_public (every
function public), interpreter false (no execute_code; the recent trajectories are put in the context).

The notebook defines the working library's functions (after every write), with each primitive raising
there, so a cell can try a function's parsing on recorded observations. `inducer.example_steps` (a
deviation, 0 in the paper) puts one recorded episode's first steps in the first message. The protocol shows
a worked function (a deviation too: the paper's protocol shows none); the `example_file` option replaces the
built-in one, a loop over one primitive, with the functions of a file (src/skillrepro/resources/examples/).

Records: the session's LLM calls go to <run>/induce/v{k+1}/llm_calls.parquet (role "inducer") and every
tool call, its input and its output to transcript.jsonl beside it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from skillrepro.benchmarks import load_benchmark, primitive_returns
from skillrepro.methods import InduceContext, register
from skillrepro.methods.common import TOKEN_CHARS, read_traces, show_traces
from skillrepro.methods.speedrunner_gate import Session, final_functions
from skillrepro.methods.speedrunner_history import (example_episode, helper_api, history_facts, history_files,
                                                    open_interpreter)
from skillrepro.methods.speedrunner_protocol import NATIVE_DOCS, TOOL_DOCS, example_source, examples, observing
from skillrepro.methods.speedrunner_session import Workbench, library_view, run_session
from skillrepro.skills.library import Library
from skillrepro.store import LLMCall, write_records, write_text

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"


@dataclass(frozen=True)
class Options:
    prompt: Literal["default", "asi_style"] = "default"  # inducer prompt file prompts/inducer_{prompt}.txt
    access: Literal["split", "all_public"] = "split"  # all_public: every function is shown to the actor
    interpreter: bool = True  # false: no execute_code; recent trajectories go into the context instead
    inducer_prompt_file: str | None = None  # replaces the prompt file
    replay_check: bool = False  # deviation: run new functions on a past training task (not online)
    # deviation: the functions of this Python file (or files, in order) are the protocol's worked example of a
    # skill, in place of the built-in loop over one primitive (null)
    example_file: str | list[str] | None = None

    def check(self) -> None:
        if self.inducer_prompt_file and not Path(self.inducer_prompt_file).is_file():
            raise ValueError(f"inducer_prompt_file: {self.inducer_prompt_file} does not exist")
        if self.example_file:
            example_source(self.example_file)


def induce(ctx: InduceContext, client) -> Library:
    """Run one inducer session on library v{k} and return v{k+1} (not yet written)."""
    opts: Options = ctx.options
    prompt_file = Path(opts.inducer_prompt_file or PROMPTS / f"inducer_{opts.prompt}.txt")
    if not prompt_file.is_file():
        raise FileNotFoundError(f"method {ctx.method.variant}: inducer prompt file {prompt_file} does not exist")
    bench = load_benchmark(ctx.bench)
    files = history_files(ctx.history_dirs)
    summary = history_facts(files)
    # every past episode from the records (the online protocol never re-runs a task, not even to reset it)
    traces = read_traces(ctx.history_dirs)
    task_ids = sorted({t.task_id for t in traces})
    prims = bench.primitives()
    observes = observing(prims)
    sess = Session({f.name: f for f in ctx.library.functions}, {p.name for p in prims}, opts.access == "all_public",
                   ctx.sandbox, require_action=ctx.limits.require_action, require_defined=ctx.limits.require_defined,
                   observes=observes.name if observes else "")
    session_id = f"{ctx.run_id}/induce/v{ctx.library.version + 1}"

    system = _system_prompt(ctx, opts, prompt_file, bench, prims)
    source = sess.library_text()
    task_msg = [f"Training so far (per cycle):\n{_facts(summary)}",
                f"Current library (version {ctx.library.version}, {len(source)} characters):\n"
                f"{library_view(source, 0, ctx.limits.library_room(ctx.llm))}"]
    if example := example_episode(traces, ctx.limits.example_steps):
        task_msg.append(example)
    room = ctx.limits.history_chars(ctx.llm) // 2  # the first message's: half the conversation
    sandbox, shown, episode_room = None, None, None
    if opts.interpreter:
        task_msg.append(helper_api())
        sandbox = open_interpreter(ctx, sess, files, traces)
    else:
        # The interpreter-off ablation reads what every comparison method reads, under the same budget, but no
        # more than the first message holds beside its other parts: the episodes are fitted to that room (older
        # ones dropped whole, the newest cut if need be, as show_traces records), so that cutting the message
        # never takes its closing instruction, nor the end of an episode the record counts as whole.
        longest = max(len(_episodes_header(whole, cut, len(traces)))
                      for whole in range(len(traces) + 1) for cut in (0, 1) if whole + cut <= len(traces))
        # the rest of the message: its other parts, the longest header, the closing and the separators between
        rest = len("\n\n".join(task_msg)) + 2 + longest + 1 + 2 + len(CLOSING)
        episode_room = min(ctx.trajectory_tokens, max(0, room - rest) // TOKEN_CHARS)
        shown = show_traces(traces, episode_room, limit="budgets.trajectory_tokens" if
                            episode_room == ctx.trajectory_tokens else "the first message's room")
        task_msg.append(f"{_episodes_header(shown.episodes_whole, shown.episodes_cut, len(traces))}\n{shown.text}")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": _fit(task_msg, CLOSING, room)}]

    records: list[LLMCall] = []
    try:
        run_session(ctx, client, Workbench(sess, sandbox, opts.interpreter, bench, task_ids, opts.replay_check,
                                           ctx.limits, ctx.llm), messages, session_id, records)
    finally:
        if sandbox is not None:
            sandbox.close()
        write_records(ctx.record_dir / "llm_calls.parquet", records, LLMCall)
        write_text(ctx.record_dir / "transcript.jsonl",
                   "".join(json.dumps(t, default=str) + "\n" for t in sess.transcript))

    return Library(ctx.library.version + 1, tuple(final_functions(sess).values()), ctx.library.notes, {
        "method": "speedrunner", "variant": ctx.method.variant, "cycle": ctx.cycle, "session_id": session_id,
        "requests": len(records), "writes_accepted": sess.writes_ok, "finished": sess.finished,
        "prompt": opts.prompt, "access": opts.access, "interpreter": opts.interpreter,
        "replay_check": opts.replay_check, "trajectory_tokens": ctx.trajectory_tokens, "limits": asdict(ctx.limits),
        # the episodes' budget in the first message (at most trajectory_tokens) and what they took of it
        "trajectory_tokens_room": episode_room, "trajectory_tokens_shown": shown.tokens if shown else None,
        **(shown.record() if shown else {})})


CLOSING = "Improve the library now. One tool call per reply."  # the first message's last words


def _episodes_header(whole: int, cut: int, total: int) -> str:
    """The line over the interpreter-off ablation's episodes: how many of the `total` recorded ones follow."""
    if whole + cut == total:
        return "Recent episodes (newest first):"
    if whole + cut == 0:
        return f"Recent episodes (none of the {total} fit):"
    shown = f"the newest {whole} of {total}, whole" if whole else f"the newest of {total}, cut"
    left = total - whole - cut
    return f"Recent episodes ({shown}; {'the older one' if left == 1 else f'the {left} older ones'} did not fit):"


def _fit(parts: list[str], closing: str, room: int) -> str:
    """`parts` and then `closing`, in at most `room` characters: where the parts do not fit (the facts of many
    cycles, a large explicit inducer.library_chars), their end is cut, saying so, and `closing` always stays."""
    body = "\n\n".join(parts)
    if len(body) + 2 + len(closing) <= room:
        return f"{body}\n\n{closing}"

    def note(cut: int) -> str:
        return f"\n[... {cut} characters of this message cut: the first message's room reached ...]"

    keep = max(0, room - 2 - len(closing) - len(note(len(body))))  # the count cut is never longer than len(body)
    return f"{body[:keep]}{note(len(body) - keep)}\n\n{closing}"


def _facts(summary: list[dict]) -> str:
    return "\n".join(json.dumps(r, default=str) for r in summary) or "(no episodes yet)"


def _system_prompt(ctx: InduceContext, opts: Options, prompt_file: Path, bench, prims) -> str:
    """The prompt file, filled in: the environment, its primitives, the access rule and the tool protocol in the
    form llm.tool_calling asks for (text, json under constrained, native), with its worked examples."""
    access_rule = ("Every function you write is offered to the agent." if opts.access == "all_public" else
                   "Make the few main functions public (the agent sees them) and helpers private (name them "
                   "with a leading underscore and write them with public=False); private functions stay callable "
                   "from other functions but are hidden from the agent.")
    native = ctx.llm.tool_calling == "native"
    form = {"native": "native", "constrained": "json"}.get(ctx.llm.tool_calling, "text")
    tools = [t for t in TOOL_DOCS if opts.interpreter or t != "execute_code"]
    protocol = (PROMPTS / f"inducer_tools_{form}.txt").read_text().format(
        tool_list="\n".join(f"- {NATIVE_DOCS[t] if native else TOOL_DOCS[t]}" for t in tools),
        examples=examples(opts.interpreter, prims, ctx.llm.tool_calling,
                          example_source(opts.example_file) if opts.example_file else ""))
    return prompt_file.read_text().format(
        environment=bench.describe(),
        primitives="\n".join(f"- {p.signature}: {p.doc}" for p in prims),
        returns=primitive_returns(prims), access_rule=access_rule, tools=protocol)


register("speedrunner", Options, induce)
