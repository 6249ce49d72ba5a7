"""What each backend accepts in one request, and how it says that a prompt did not fit: one table, with sources.

The actor shapes its tool list by `tool_limits` (agent.Actor.tool_schemas); the client tells a full context from
every other refusal by `context_overflow`, from what the provider's error says in its fields, never from the words
of its message: OpenAI's refusal of a 129th tool reads "array too long", which a word match once took for a full
context, ending every episode of a large library at step 0 as if its history had outgrown the model.

The limits are the providers' documented ones (none can be measured here: there is no network). `llm.max_tools`
overrides the tool limit for a provider this table does not know (an OpenAI-compatible endpoint other than
OpenAI's own).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

# Characters per token at the most a tokenizer packs into one on English prose: a prompt whose characters over
# this still exceed the window is past it by any tokenizer's count, so a refusal of it is a full context. Used only
# where the provider has no tokenizer endpoint and its error no field that says so (Gemini's).
LOW_CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class ToolLimits:
    """What a request's native tool list may hold: how many tools, and the names a tool may have."""

    max_tools: int | None = None  # None: no limit
    name_pattern: str | None = None  # a regular expression every tool name must match in full; None: any

    def name_ok(self, name: str) -> bool:
        return self.name_pattern is None or re.fullmatch(self.name_pattern, name) is not None


@dataclass(frozen=True)
class BackendLimits:
    backend: str
    tools: ToolLimits
    context_overflow: str  # how this backend's refusal says the prompt (with the reply's cap) did not fit
    source: str


LIMITS = {
    "openai": BackendLimits(
        "openai", ToolLimits(128, r"[a-zA-Z0-9_-]{1,64}"), 'error.code "context_length_exceeded"',
        "OpenAI API reference, Chat Completions `tools`: at most 128 functions, each name of a-z, A-Z, 0-9, _ and - "
        "up to 64 characters; past that a 400 invalid_request_error (\"Invalid 'tools': array too long. Expected an "
        "array with maximum length 128\"). A full context is a 400 with code context_length_exceeded. Google's "
        "OpenAI-compatible Gemini endpoint answers every bad request alike, {code: 400, message, status: "
        "INVALID_ARGUMENT} (the Gemini API's troubleshooting page), so there the client counts the prompt itself "
        "(`LOW_CHARS_PER_TOKEN`)."),
    "vllm": BackendLimits(
        "vllm", ToolLimits(), "a 400 on a prompt that, counted by the server's /tokenize, leaves less than the reply's cap",
        "vLLM's OpenAI-compatible server sets no tool limit (the chat template writes the tools into the prompt, "
        "which --max-model-len bounds); its length errors are a 400 BadRequestError whose code is the status, so "
        "the client measures the prompt instead of reading the message."),
    "embedded": BackendLimits(
        "embedded", ToolLimits(), 'error.type "exceed_context_size_error"',
        "llama.cpp's server (xllamacpp) sets no tool limit; a prompt past the slot's context is a 400 of type "
        "exceed_context_size_error."),
}


def tool_limits(backend: str, max_tools: int | None) -> ToolLimits:
    """The backend's documented tool limits, with llm.max_tools in place of its count where set."""
    documented = LIMITS[backend].tools
    return documented if max_tools is None else ToolLimits(max_tools, documented.name_pattern)


def context_overflow(backend: str, status: int, error: dict[str, Any], measured_full: Callable[[], bool]) -> bool:
    """Whether a refused request (`status`, the body's `error` object) was refused because its prompt and reply do
    not fit the context. `measured_full` counts the prompt, for the providers whose errors carry no code of their
    own: vLLM (by the server's /tokenize) and Gemini (by LOW_CHARS_PER_TOKEN: a prompt that is past the window only
    by a denser tokenizer's count fails its job, with the request's size in the error, rather than end an episode
    silently); it is called only there."""
    if status != 400:
        return False
    if backend == "openai":
        if isinstance(error.get("code"), int) and "status" in error:  # Google's body: no field names the cause
            return error["status"] == "INVALID_ARGUMENT" and measured_full()
        return error.get("code") == "context_length_exceeded"
    if backend == "embedded":
        return error.get("type") == "exceed_context_size_error"
    return measured_full()
