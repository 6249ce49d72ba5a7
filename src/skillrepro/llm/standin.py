"""A local stand-in for a hosted chat-completions API, for rehearsing a paid preset before anyone pays
(`skillrepro rehearse`, studies/speedrunner/rehearsal.py).

It refuses what the provider refuses, with the provider's own error body: the request limits of `PROVIDERS` below
(OpenAI's, and Gemini's OpenAI-compatible endpoint's, told apart by the preset's base_url), each with its sources,
plus the preset's own context window (`llm.ctx_per_slot`). Every request
it accepts gets a scripted reply for the role it plays (told from the request's tools and its system prompt's
first line, the shipped prompts'): the actor calls the first tool it is offered; the skill writers (SpeedRunner's
inducer, ASI's inducer, Voyager's skill writer) write `skills_per_write` functions at once, so a short rehearsal
grows a library to the size the paper reports; Voyager's critic says yes; its curriculum and OPO answer in their
formats. What it says is not a model's behaviour: only the requests' shapes are rehearsed.

Nothing here can be checked against the live APIs (this machine has no network): the limits are the providers'
documentation's, as of the sources named.
"""
from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillrepro.llm.limits import LIMITS

# Characters per token for the stand-in's prompt count: 3, the project's cautious estimate (methods.common), so a
# prompt the stand-in accepts is one the provider's tokenizer (about 4 characters a token on English) accepts too.
CHARS_PER_TOKEN = 3


@dataclass(frozen=True)
class ProviderLimits:
    """What one provider's chat-completions endpoint refuses, besides the context window the preset states."""

    name: str
    hosts: tuple[str, ...]  # the base_url hosts that are this provider's ("" matches any: the fallback)
    max_tools: int
    tool_name: str  # a regular expression a function name must match in full
    max_completion_tokens: int
    reasoning_efforts: frozenset[str]
    # models that reason and so take max_completion_tokens, not max_tokens, and no temperature but their own
    reasoning_models: str  # a regular expression on the model name ("(?!)" for none)
    errors: str  # the error body's shape: "openai" ({message, type, param, code}) or "google" ({code, message, status})
    sources: str


PROVIDERS = {
    "gemini": ProviderLimits(
        "gemini", ("generativelanguage.googleapis.com",), 512, r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}", 65_536,
        frozenset({"none", "minimal", "low", "medium", "high"}), r"(?!)", "google",
        "Gemini API reference, FunctionDeclaration.name: a-z, A-Z, 0-9, underscores, colons, dots and dashes, at most "
        "64 characters (the API's error adds: starting with a letter or an underscore); at most 512 function "
        "declarations (the API's 400 INVALID_ARGUMENT \"At most 512 function declarations can be specified\", quoted "
        "in google-gemini/gemini-cli issues 19083 and 25440); Gemini 3 Flash's model page: 65,536 output tokens; the "
        "OpenAI compatibility page: reasoning_effort none, minimal, low, medium or high, max_tokens and temperature "
        "taken as sent. Errors are Google's bodies, {code, message, status}."),
    "openai": ProviderLimits(
        "openai", ("",), LIMITS["openai"].tools.max_tools, LIMITS["openai"].tools.name_pattern, 128_000,
        frozenset({"minimal", "low", "medium", "high"}), r"(gpt-5|o\d).*", "openai",
        "OpenAI API reference, Create chat completion: `tools` at most 128 functions, names [a-zA-Z0-9_-] up to 64; "
        "`reasoning_effort` minimal, low, medium or high (GPT-5 models); `parallel_tool_calls` only with `tools`; "
        "reasoning models reject `max_tokens` (use `max_completion_tokens`) and a `temperature` other than 1; "
        "GPT-5 mini's model page: 128,000 max output tokens (the gpt-5.4-mini limit is not published here). Any "
        "other OpenAI-compatible endpoint is held to these limits."),
}


def provider_of(base_url: str | None) -> ProviderLimits:
    """The provider whose limits hold for a preset's `llm.base_url`: by its host, OpenAI's for any other."""
    host = urllib.parse.urlparse(base_url or "").hostname or ""
    return next(p for p in PROVIDERS.values() if any(h in host for h in p.hosts))


def _error(provider: ProviderLimits, status: int, breach: str, message: str, param: str | None,
           google: str | None = None) -> tuple[int, dict]:
    """The provider's error body for a breach (`breach`: OpenAI's code for it, also what the stand-in records);
    `google`: Google's wording where its documented one differs."""
    if provider.errors == "google":
        return status, {"error": {"code": status, "message": google or message, "status": "INVALID_ARGUMENT"}}
    return status, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": breach}}


@dataclass
class Seen:
    """One request as the stand-in saw it."""

    role: str
    tools: int
    prompt_tokens: int  # estimated, CHARS_PER_TOKEN
    refused: str = ""  # OpenAI's error code for what it breached (whatever the provider), "" when answered


@dataclass
class StandIn:
    """The stand-in server: `start()` listens on 127.0.0.1 and `url` is its OpenAI-compatible base URL."""

    provider: ProviderLimits
    context_tokens: int  # the preset's llm.ctx_per_slot: the model's context window
    skills_per_write: int = 40
    seen: list[Seen] = field(default_factory=list)
    _written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "StandIn":
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                try:
                    status, reply = standin.answer(body)
                except Exception as e:  # a stand-in fault is the rehearsal's, said as a server error, never hidden
                    status, reply = 500, {"error": {"message": f"stand-in: {type(e).__name__}: {e}",
                                                    "type": "server_error", "code": None}}
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()

    # ------------------------------------------------------------------ the provider's checks
    def refusal(self, body: dict[str, Any], prompt_tokens: int) -> tuple[tuple[int, dict], str] | None:
        """The provider's error for `body` and OpenAI's code for the breach, or None where it would accept it."""
        p, tools, model = self.provider, body.get("tools") or [], str(body.get("model", ""))

        def refuse(breach: str, message: str, param: str | None, google: str | None = None):
            return _error(p, 400, breach, message, param, google), breach

        if len(tools) > p.max_tools:
            return refuse("array_above_max_length", f"Invalid 'tools': array too long. Expected an array with maximum "
                          f"length {p.max_tools}, but got an array with length {len(tools)} instead.", "tools",
                          "The GenerateContentRequest proto is invalid:\n  * tools[0].function_declarations: "
                          f"[FIELD_INVALID] At most {p.max_tools} function declarations can be specified.")
        for i, t in enumerate(tools):
            name = (t.get("function") or {}).get("name", "")
            if not re.fullmatch(p.tool_name, name):
                return refuse("invalid_value", f"Invalid 'tools[{i}].function.name': string does not match pattern. "
                              f"Expected a string that matches the pattern '^{p.tool_name}$'.",
                              f"tools[{i}].function.name",
                              f"The GenerateContentRequest proto is invalid:\n  * tools[0].function_declarations[{i}]"
                              ".name: [FIELD_INVALID] Invalid function name. Must start with a letter or an underscore. "
                              "Must be a-z, A-Z, 0-9, or contain underscores (_), dots (.), colons (:), or dashes (-), "
                              "with a maximum length of 64.")
        if "parallel_tool_calls" in body and not tools:
            return refuse("invalid_value", "Invalid value for 'parallel_tool_calls': only allowed when 'tools' are "
                          "specified.", "parallel_tool_calls")
        effort = body.get("reasoning_effort")
        if effort is not None and effort not in p.reasoning_efforts:
            return refuse("invalid_value", f"Invalid value: '{effort}'. Supported values are: "
                          f"{', '.join(sorted(p.reasoning_efforts))}.", "reasoning_effort")
        reasoning = re.fullmatch(p.reasoning_models, model) is not None
        if reasoning and "max_tokens" in body:
            return refuse("unsupported_parameter", "Unsupported parameter: 'max_tokens' is not supported with this "
                          "model. Use 'max_completion_tokens' instead.", "max_tokens")
        if reasoning and body.get("temperature", 1) != 1:
            return refuse("unsupported_value", "Unsupported value: 'temperature' does not support this value with "
                          "this model. Only the default (1) value is supported.", "temperature")
        cap = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
        if cap > p.max_completion_tokens:
            return refuse("invalid_value", f"max_tokens is too large: {cap}. This model supports at most "
                          f"{p.max_completion_tokens} completion tokens.", "max_tokens")
        if prompt_tokens + cap > self.context_tokens:
            return refuse("context_length_exceeded", f"This model's maximum context length is {self.context_tokens} "
                          f"tokens. However, you requested {prompt_tokens + cap} tokens ({prompt_tokens} in the "
                          f"messages, {cap} in the completion). Please reduce the length of the messages or "
                          "completion.", "messages", f"The input token count ({prompt_tokens}) exceeds the maximum "
                          f"number of tokens allowed ({self.context_tokens - cap}).")
        return None

    def answer(self, body: dict[str, Any]) -> tuple[int, dict]:
        prompt_tokens = len(json.dumps([body.get("messages"), body.get("tools") or []])) // CHARS_PER_TOKEN
        role = role_of(body)
        refused = self.refusal(body, prompt_tokens)
        with self._lock:
            self.seen.append(Seen(role, len(body.get("tools") or []), prompt_tokens, refused[1] if refused else ""))
        if refused:
            return refused[0]
        message = self.reply(role, body)
        return 200, {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": 0,
                     "model": body.get("model"), "system_fingerprint": "standin",
                     "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                  "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                     "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 16,
                               "total_tokens": prompt_tokens + 16, "prompt_tokens_details": {"cached_tokens": 0},
                               "completion_tokens_details": {"reasoning_tokens": 0}}}

    # ------------------------------------------------------------------ the scripted replies
    def skills(self) -> str:
        """`skills_per_write` new functions, each named once over the whole rehearsal."""
        with self._lock:
            first, self._written = self._written, self._written + self.skills_per_write
        return "\n\n".join(f'def rehearsal_skill_{i}():\n    """Stand-in skill {i} of the rehearsal."""\n'
                           f'    return "rehearsal skill {i}"\n' for i in range(first, first + self.skills_per_write))

    def reply(self, role: str, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for a request of `role`."""
        messages = body.get("messages") or []
        if role == "inducer":  # SpeedRunner's, native: one write of many functions, then finish
            if any(m.get("role") == "assistant" for m in messages):
                return _call("finish", {"summary": "rehearsal"})
            return _call("write_function", {"source": self.skills(), "public": True})
        if role == "actor":
            return _actor_call(body)
        if role == "skill_writer":  # ASI's inducer and Voyager's skill writer: a code block
            return {"content": f"```python\n{self.skills()}```"}
        if role == "critic":
            return {"content": "Success: yes\nCritique: none"}
        if role == "curriculum":
            return {"content": "Reasoning: rehearsal.\nTask: Collect wood"}
        if role == "optimizer":
            return {"content": "<notes>\nRehearsal notes: act, then observe.\n</notes>"}
        return {"content": "Thought: rehearsal.\nAction: look()"}


# The first line of each shipped prompt that plays a role without tools, read from the prompt files themselves
# (ASI's inducer and Voyager's skill writer open alike: both write code blocks).
_PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
_FIRST_LINES = {(_PROMPTS / f).read_text().splitlines()[0]: role for f, role in (
    ("asi_inducer.txt", "skill_writer"), ("voyager_skill.txt", "skill_writer"), ("voyager_critic.txt", "critic"),
    ("voyager_curriculum.txt", "curriculum"), ("opo_optimizer.txt", "optimizer"))}


def role_of(body: dict[str, Any]) -> str:
    """The role a request plays: SpeedRunner's inducer offers write_function, the actor its actions; the other
    roles are told by their system prompt's first line. A replaced prompt reads as the actor's."""
    names = {(t.get("function") or {}).get("name") for t in body.get("tools") or []}
    if "write_function" in names:
        return "inducer"
    if names:
        return "actor"
    system = next((m.get("content") or "" for m in body.get("messages") or [] if m.get("role") == "system"), "")
    return next((role for start, role in _FIRST_LINES.items() if system.startswith(start)), "actor")


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                                             "function": {"name": name, "arguments": json.dumps(arguments)}}]}


_PLACEHOLDER = {"string": "x", "integer": 1, "number": 1, "boolean": False, "object": {}, "array": []}


def _actor_call(body: dict[str, Any]) -> dict[str, Any]:
    """A call of the first tool offered (skills are listed first), each parameter a placeholder of its type; through
    call_skill, of the first skill the system prompt lists."""
    if not body.get("tools"):  # the text protocol
        return {"content": "Thought: rehearsal.\nAction: look()"}
    first = body["tools"][0]["function"]
    if first["name"] == "call_skill":
        system = body["messages"][0].get("content") or ""
        listed = re.search(r"^- (\w+)\(", system.split("Skills:", 1)[-1], re.MULTILINE)
        return _call("call_skill", {"name": listed.group(1) if listed else "", "arguments": {}})
    params = (first.get("parameters") or {}).get("properties") or {}
    return _call(first["name"], {k: _PLACEHOLDER.get(v.get("type"), "x") for k, v in params.items()})
