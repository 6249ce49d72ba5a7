"""One SpeedRunner inducer session: its requests to the model, each reply read as one tool call (the protocol)
and answered by the tool, writes through the write gate. Near the end of the request budget a session that has
written nothing is reminded to; under `constrained` its last requests may call `write_function` only, and in the
text protocol the reply is started for the model (`LAST_CHANCE_PREFILL`).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

from skillrepro.config import LLMConfig
from skillrepro.llm.client import LLMRequestError, Reply
from skillrepro.methods import InduceContext, InducerLimits
from skillrepro.methods.speedrunner_gate import Session, delete_function, write_function
from skillrepro.methods.speedrunner_history import notebook_library
from skillrepro.methods.speedrunner_protocol import (LAST_CHANCE_PREFILL, Action, cut_inside_code, drop_cut_function,
                                                     json_action, native_action, parse_action, render_exec,
                                                     reply_schema, text_call, tool_schemas)
from skillrepro.skills.sandbox import SandboxSession
from skillrepro.store import LLMCall

# Advice on a write whose reply stopped at its token cap
SHORTER = "write a shorter function (a loop over what the primitives return, not one branch per step)"


@dataclass
class Workbench:
    """What the tools act on: the working library, the interpreter (None without one), for the replay check
    (option replay_check) the benchmark and its recorded training tasks, and the limits of what they answer."""

    sess: Session
    sandbox: SandboxSession | None
    interpreter: bool
    bench: Any
    task_ids: list[str]
    replay: bool
    limits: InducerLimits
    llm: LLMConfig  # the sleep phase's: its context sizes read_library's answer where the limit is null

    def apply(self, action: Action) -> str:
        """Run one tool call; its answer to the model."""
        sess, sandbox, limits = self.sess, self.sandbox, self.limits
        if action.problem:
            return f"Error: {action.problem}"
        if action.name == "execute_code":
            if not self.interpreter:
                return "Error: execute_code is not available in this session."
            if not action.code.strip():
                return "Error: no code block found after Action: execute_code."
            return render_exec(sandbox.exec_code(action.code), limits.tool_output_chars)
        if action.name == "read_library":
            return library_view(sess.library_text(), action.offset, limits.read_library_room(self.llm))
        if action.name in ("write_function", "delete_function"):
            deleting = action.name == "delete_function"
            out = (delete_function(sess, action.target) if deleting
                   else write_function(sess, action.code, action.public, self.bench, self.task_ids, self.replay))
            if sandbox is not None and not out.startswith("Error"):  # the notebook holds what the library now holds
                sandbox.exec_code((f"globals().pop({action.target!r}, None)\n" if deleting else "")
                                  + notebook_library(sess))
            return out
        if action.name == "finish":
            sess.finished = True
            return "Finished."
        return f"Error: unknown tool {action.name!r}."


def library_view(source: str, offset: int, chars: int) -> str:
    """Up to `chars` characters of the library source from `offset`, ended at a line's end where the window holds
    one. A view that is not the whole library says how much it shows and, while there is more, the offset
    read_library goes on from: a cut never passes for the whole library (the first message's view and every
    read_library answer)."""
    total = len(source)
    if not 0 <= offset < max(total, 1):
        return f"Error: offset {offset} is past the end of the library ({total} characters); read from 0 to {total}."
    end = min(total, offset + chars)
    if end < total and (line_end := source.rfind("\n", offset, end)) > offset:
        end = line_end + 1
    if offset == 0 and end == total:
        return source
    if end == total:
        return f"{source[offset:]}\n(shown characters {offset} to {total} of {total}: the end of the library)"
    where = "" if offset == 0 else f", from offset {offset}"
    return (f"{source[offset:end]}\n(shown {end - offset} of {total} characters{where}; "
            f"call read_library(offset={end}) for the rest)")


def run_session(ctx: InduceContext, client, tools: Workbench, messages: list[dict], session_id: str,
                records: list[LLMCall]) -> None:
    """The session's requests, up to the request budget, each reply answered by the tool it calls; ends early at
    `finish` or a request the server refuses. `messages` grows with the conversation, `records` with the LLM calls
    made and `tools.sess.transcript` with every tool call, its input and its output."""
    sess, limits = tools.sess, ctx.limits
    native, constrained = ctx.llm.tool_calling == "native", ctx.llm.tool_calling == "constrained"
    max_tokens, ctx_chars = limits.reply_tokens(ctx.llm), limits.history_chars(ctx.llm)
    schemas = tool_schemas(tools.interpreter)
    for req in range(ctx.request_budget):
        prefill, allowed = _nudge(messages, sess, ctx.request_budget - req, limits, native, constrained, schemas)
        sent = _trim(messages, ctx_chars) + ([{"role": "assistant", "content": prefill}] if prefill else [])
        extra = {"response_format": {"type": "json_schema", "json_schema": {
            "name": "inducer_action", "schema": reply_schema(allowed)}}} if constrained else None
        try:
            # Small models go on to invent the tool's answer: stop them there.
            reply = client.chat(sent, role="inducer", session_id=session_id, tools=schemas if native else None,
                                max_tokens=max_tokens, stop=None if native or constrained else
                                ["\nObservation:", "\nThought:"], extra_body=extra)
        except LLMRequestError as e:
            if not e.context_full:
                raise  # a refusal for another reason is a setup problem: the job names it
            sess.transcript.append({"request": req, "error": str(e)})  # the context overflowed even after trimming
            break
        records.extend(reply.records)
        text, action = _read_reply(reply, prefill, native, constrained, tools.interpreter)
        t0 = time.time()
        observation = _answer(tools, req, action, reply, text, constrained, max_tokens)
        sess.transcript.append({"request": req, "prefill": prefill, "reply": reply.text, "tool": action.name,
                                "code": action.code, "public": action.public, "target": action.target,
                                # where a read started (the library page lists it beside the call)
                                **({"offset": action.offset} if action.name == "read_library" else {}),
                                "observation": observation, "tool_s": round(time.time() - t0, 3),
                                "prompt_tokens": reply.record.prompt_tokens,
                                "completion_tokens": reply.record.completion_tokens})
        tc = reply.tool_calls[0] if reply.tool_calls else None
        if tc is not None:  # the call stays in the conversation as made, answered by the tool's message
            messages.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": json.dumps(tc.arguments)}}]})
        else:
            messages.append({"role": "assistant", "content": text or json.dumps(
                {"name": action.name, "arguments": {"code": action.code}})})
        if sess.finished:
            break
        messages.append({"role": "tool", "tool_call_id": tc.id, "content": observation} if tc is not None
                        else {"role": "user", "content": f"Observation:\n{observation}"})


def _nudge(messages: list[dict], sess: Session, left: int, limits: InducerLimits, native: bool, constrained: bool,
           schemas: list[dict]) -> tuple[str, list[dict]]:
    """The reply's prefill and the tools it may call, with `left` requests left: near the end of a session that
    has written nothing, a reminder (appended to `messages`) that such a session leaves the library unchanged. In
    the text protocol the reply is also started for the model (servers continue a trailing assistant message),
    which is what gets a 135M model to write a function at all."""
    if left > limits.nudge_requests or sess.writes_ok != 0:
        return "", schemas
    when = "This is your last request" if left == 1 else f"You have {left} requests left"
    how = ("Call write_function with public true and the source of" if native else
           "Reply with Action: write_function(public=True) and one ```python block containing")
    messages.append({"role": "user", "content": f"{when} and you have not saved a function yet. {how} "
                     "a complete function that calls the primitive actions."})
    # constrained: the reply can only be a write_function call
    allowed = [t for t in schemas if t["function"]["name"] == "write_function"]
    return ("" if native or constrained else LAST_CHANCE_PREFILL), allowed


def _read_reply(reply: Reply, prefill: str, native: bool, constrained: bool, interpreter: bool) -> tuple[str, Action]:
    """The reply's text as the conversation keeps it, and the tool call it makes."""
    text = reply.text
    if reply.tool_calls:
        return text, native_action(reply.tool_calls[0].name, reply.tool_calls[0].arguments)
    if constrained:
        return text, json_action(text)
    if native:  # a call written out as text instead of made: read it (see speedrunner_protocol)
        return text, text_call(text, interpreter)
    # Servers differ: some return the continuation only, some a fresh reply (or prefix included).
    # The conversation keeps the whole reply, so that a later request sees what was written.
    if prefill and not text.lstrip().startswith(("Action", "```", "def ", "Thought")):
        text = prefill + text
    return text, parse_action(text, interpreter)


def _answer(tools: Workbench, req: int, action: Action, reply: Reply, text: str, constrained: bool,
            max_tokens: int) -> str:
    """The observation the model is shown for request `req`'s call: a notice for a read repeated since the
    library last changed (inducer.repeat_notice), else the tool's answer. A write that stopped at the reply's
    token cap inside its last function never saves that half function, even where the rest parses."""
    sess = tools.sess
    first = sess.asked.get(_call_key(action)) if tools.limits.repeat_notice else None
    if first is not None and action.name in ("execute_code", "read_library") and not action.problem:
        return (f"The same call as request {first + 1}, and nothing has changed since: its answer is "
                "above. Do something new: query other columns or episodes, or write a function.")
    if (reply.finish_reason == "length" and action.name == "write_function" and not reply.tool_calls
            and cut_inside_code(text, constrained) and (cut := drop_cut_function(action.code))[1]):
        code, name = cut
        why = (f"the reply stopped at its {max_tokens}-token limit inside {name}, so {name} is incomplete and "
               f"was not saved; {SHORTER}")
        return (tools.apply(replace(action, code=code)) + f" ({why})" if code.strip()
                else f"Error: {why}. Nothing was saved.")
    observation = tools.apply(action)
    if reply.finish_reason == "length" and observation.startswith("Error: the code does not parse"):
        observation += (f" The reply stopped at its {max_tokens}-token limit in the middle of the code: "
                        f"{SHORTER}.")
    if action.name in ("write_function", "delete_function") and observation.startswith(("Saved", "Deleted")):
        sess.asked.clear()  # the library changed: a read or a cell may now answer otherwise
    sess.asked.setdefault(_call_key(action), req)
    return observation


def _call_key(action: Action) -> tuple[str, str]:
    """A call as inducer.repeat_notice compares calls: its tool and what it was given (a cell's code; for
    read_library its offset, since each offset answers with another part of the library)."""
    return action.name, str(action.offset) if action.name == "read_library" else action.code


def _chars(message: dict) -> int:
    return len(message.get("content") or "") + sum(len(c["function"]["arguments"]) for c in message.get("tool_calls", ()))


def _trim(messages: list[dict], budget_chars: int) -> list[dict]:
    """System and task messages always; then as many of the latest turns as fit."""
    head, tail = messages[:2], messages[2:]
    size = sum(map(_chars, head))
    kept: list[dict] = []
    for m in reversed(tail):
        size += _chars(m)
        if size > budget_chars:
            break
        kept.insert(0, m)
    if kept and kept[0]["role"] != "assistant" and len(kept) < len(tail):
        kept = kept[1:]  # start on a full assistant/user pair
    return head + kept
