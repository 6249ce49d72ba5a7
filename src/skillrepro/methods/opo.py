"""OPO, online prompt optimisation (SpeedRunner section 4.1, after GEPA / TextGrad): after each training
batch one sleep-phase LLM call (role "optimizer") reads a concatenation of the recent trajectories and
rewrites the actor's prompt notes. The notes are library/v{k}/notes.md, shown to the actor through the
`notes` hook; OPO writes no skills. A reply with no usable notes keeps the previous ones.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from skillrepro.methods import InduceContext, register
from skillrepro.methods.common import (budget, check_prompt_file, prompt_text, read_traces, show_traces,
                                      save_records)
from skillrepro.skills import Library
from skillrepro.benchmarks import load_benchmark


@dataclass(frozen=True)
class Options:
    recent_batches: int = 1  # how many of the latest training batches the optimizer reads
    max_notes_chars: int = 4000  # the notes are cut to this length (the prompt asks for less)
    prompt_file: str | None = None  # replaces prompts/opo_optimizer.txt

    def check(self) -> None:
        if self.recent_batches < 1 or self.max_notes_chars < 100:
            raise ValueError("recent_batches must be >= 1 and max_notes_chars >= 100")
        check_prompt_file("prompt_file", self.prompt_file)


_NOTES = re.compile(r"<notes>\s*(.*?)\s*(?:</notes>|\Z)", re.DOTALL | re.IGNORECASE)


def parse_notes(reply: str) -> str:
    """The text between <notes> and </notes> (a missing closing tag is forgiven), else the whole reply."""
    m = _NOTES.search(reply)
    return (m.group(1) if m else reply).strip()


def induce(ctx: InduceContext, client) -> Library:
    opts: Options = ctx.options
    bench = load_benchmark(ctx.bench)
    max_tokens, _ = budget(ctx.llm, ctx.limits)
    traces = read_traces(ctx.history_dirs[-opts.recent_batches:])
    system = prompt_text(opts.prompt_file, "opo_optimizer.txt").format(
        environment=bench.describe(), primitives="\n".join(f"- {p.signature}: {p.doc}" for p in bench.primitives()),
        max_chars=opts.max_notes_chars)
    current = ctx.library.notes.strip() or "(no notes yet)"
    shown = show_traces(traces, ctx.trajectory_tokens)
    user = f"Current notes:\n{current}\n\nRecent episodes:\n{shown.text}"
    session_id = f"{ctx.run_id}/induce/v{ctx.library.version + 1}"
    reply = client.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                        role="optimizer", session_id=session_id, max_tokens=max_tokens)
    new = parse_notes(reply.text)[: opts.max_notes_chars]
    kept = not new
    save_records(ctx.record_dir, reply.records, [{"request": 0, "episodes": len(traces), "reply": reply.text,
                                                    "trajectory_tokens": ctx.trajectory_tokens, "trajectory_tokens_shown": shown.tokens,
                                                    **shown.record(),
                                                    "notes_changed": not kept and new != ctx.library.notes}])
    return ctx.library.next_version(notes=ctx.library.notes if kept else new, meta={
        "method": "opo", "variant": ctx.method.variant, "cycle": ctx.cycle, "session_id": session_id,
        "episodes_read": len(traces), "notes_kept": kept})


register("opo", Options, induce)  # the default `notes` hook shows library.notes, which OPO rewrites
