"""What each backend accepts in one request, and how it says that a prompt did not fit: one table, with sources.

The actor sizes its tool list by `tool_limit` (agent.Actor.tool_schemas); the client tells a full context from
every other refusal by `context_overflow`, from what the provider's error says in its fields, never from the words
of its message: OpenAI's refusal of a 129th tool reads "array too long", which a word match once took for a full
context, ending every episode of a large library at step 0 as if its history had outgrown the model.

The limits are the providers' documented ones (none can be measured here: there is no network). `llm.max_tools`
overrides the tool limit for a provider this table does not know (an OpenAI-compatible endpoint other than
OpenAI's own).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class BackendLimits:
    backend: str
    max_tools: int | None  # functions one request may list; None: none documented
    context_overflow: str  # how this backend's refusal says the prompt (with the reply's cap) did not fit
    source: str


LIMITS = {
    "openai": BackendLimits(
        "openai", 128, 'error.code "context_length_exceeded"',
        "OpenAI API reference, Chat Completions `tools`: at most 128 functions; past that a 400 invalid_request_error "
        "(\"Invalid 'tools': array too long. Expected an array with maximum length 128\"). A full context is a 400 "
        "with code context_length_exceeded."),
    "vllm": BackendLimits(
        "vllm", None, "a 400 on a prompt that, counted by the server's /tokenize, leaves less than the reply's cap",
        "vLLM's OpenAI-compatible server sets no tool limit (the chat template writes the tools into the prompt, "
        "which --max-model-len bounds); its length errors are a 400 BadRequestError whose code is the status, so "
        "the client measures the prompt instead of reading the message."),
    "embedded": BackendLimits(
        "embedded", None, 'error.type "exceed_context_size_error"',
        "llama.cpp's server (xllamacpp) sets no tool limit; a prompt past the slot's context is a 400 of type "
        "exceed_context_size_error."),
}


def tool_limit(backend: str, max_tools: int | None) -> int | None:
    """Tools one request may list: llm.max_tools where set, else the backend's documented limit."""
    return max_tools if max_tools is not None else LIMITS[backend].max_tools


def context_overflow(backend: str, status: int, error: dict[str, Any], measured_full: Callable[[], bool]) -> bool:
    """Whether a refused request (`status`, the body's `error` object) was refused because its prompt and reply do
    not fit the context. `measured_full` counts the prompt with the server's tokenizer, for vLLM, whose errors
    carry no code of their own; it is called only there."""
    if status != 400:
        return False
    if backend == "openai":
        return error.get("code") == "context_length_exceeded"
    if backend == "embedded":
        return error.get("type") == "exceed_context_size_error"
    return measured_full()
