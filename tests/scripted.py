"""Scripted stand-ins for the LLM client, for unit tests and the harness benchmark only; and a scripted
OpenAI-compatible server, for tests that drive the real rules through Snakemake. A module beside
tests/conftest.py that test modules in every folder import (no test module imports another)."""
from __future__ import annotations

import http.server
import itertools
import json
import threading
import uuid
from typing import Callable

from skillrepro.llm.client import Reply, ToolCall
from skillrepro.store import LLMCall


class ScriptedClient:
    def __init__(self, replies: list[str | ToolCall]):
        self.replies = itertools.cycle(replies) if replies else iter(())
        self.requests: list[list[dict]] = []
        self.extra_bodies: list[dict | None] = []  # each request's extra fields (a constrained reply's schema)

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None) -> Reply:
        self.requests.append([dict(m) for m in messages])
        self.extra_bodies.append(extra_body)
        reply = next(self.replies)
        text, calls = (reply, []) if isinstance(reply, str) else ("", [reply])
        # prompt and response as JSON, as the real client records them (Voyager reads its goals back from them)
        rec = LLMCall(uuid.uuid4().hex, session_id, role, "scripted", "scripted", 10 * len(messages), 5, 4, 0,
                      0.0, 0, "stop", "0" * 64, json.dumps({"messages": messages, "tools": tools or []}),
                      json.dumps({"content": text, "tool_calls": [c.__dict__ for c in calls]}), 0.0)
        return Reply(text, calls, "stop", rec)


class Fake:
    """Scripted LLM for unit tests (test_speedrunner, test_traces): replays `replies` in a loop and records what it
    was sent."""

    def __init__(self, replies):
        self.replies, self.seen, self.extra = itertools.cycle(replies), [], []

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        self.seen.append(messages)
        self.extra.append(extra_body)
        text = next(self.replies)
        # the prompt as the real client records it: past episodes' openings are read back from it
        rec = LLMCall(uuid.uuid4().hex, session_id, role, "fake", "fake", 100, 0, 20, 0, 0.01, 0, "stop", "0" * 64,
                      json.dumps({"messages": messages, "tools": tools or []}), text, 0.0)
        return Reply(text, [], "stop", rec)


class RoleFake:
    """Scripted LLM for the methods' tests: replies per role (a list is cycled; a callable gets the messages);
    records requests."""

    def __init__(self, **replies):
        self.replies = {r: (v if callable(v) else _cycle(v)) for r, v in replies.items()}
        self.seen: list[tuple[str, str, list[dict]]] = []  # (role, session_id, messages)

    def chat(self, messages, *, role, session_id, tools=None, max_tokens=None, stop=None, seed=0, extra_body=None):
        self.seen.append((role, session_id, messages))
        text = self.replies[role](messages)
        rec = LLMCall(uuid.uuid4().hex, session_id, role, "fake", "fake", 100, 0, 20, 0, 0.01, 0, "stop", "0" * 64,
                      json.dumps({"messages": messages}), json.dumps({"content": text}), 0.0)
        return Reply(text, [], "stop", rec)

    def roles(self) -> list[str]:
        return [r for r, _, _ in self.seen]


def _cycle(items):
    state = {"i": 0}

    def nxt(_messages):
        state["i"] += 1
        return items[(state["i"] - 1) % len(items)]

    return nxt


def methods_config(**methods) -> dict:
    """The smallest config with BabyAI and Crafter and the given `methods` entries, for config checks."""
    return {"llm": {"backend": "embedded", "model": "smollm2-135m"},
            "benchmarks": {"babyai": {"env": "babyai"}, "crafter": {"env": "crafter"}},
            "methods": methods, "protocol": {"seeds": [0], "train_rollouts": 2, "sleep_every": 1, "eval_every": 2,
                                             "n_test": 1}, "budgets": {}, "pricing": {}}


class ChatServer:
    """An OpenAI-compatible endpoint in a thread at `url`: `answer(path, raw_body)` gives each POST's status
    and body; `completion(model, text)` is a chat completion's."""

    def __init__(self, answer: Callable[[str, bytes], tuple[int, bytes]]):
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                status, data = answer(self.path, self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def completion(model: str, text: str) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": model,
                       "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}).encode()


# ------------------------------------------------------------------ the LLM client's fake server
# What tests/llm/conftest.py's `fake_server` replies as its Script says (test_llm_client and test_ledger check
# the client's records against them): a chat completion, OK_BODY, or a fault.
OK_BODY = {
    "id": "x", "object": "chat.completion", "created": 0, "model": "/models/fake-model-2026-01-01.gguf",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Action: go_forward()"}}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127,
              "prompt_tokens_details": {"cached_tokens": 96},
              "completion_tokens_details": {"reasoning_tokens": 3}},
}
TRUNCATED = json.dumps(OK_BODY)[:-40].encode()


def raw(body, status=200, headers=()):
    return ("raw", status, body if isinstance(body, bytes) else json.dumps(body).encode(), dict(headers))


# Replies of an OpenAI-compatible server that misbehaves: each is (kind, status, body bytes, headers).
FAULTS = {
    "truncated_json": raw(TRUNCATED),
    "empty_choices": raw(OK_BODY | {"choices": []}),
    "null_message": raw(OK_BODY | {"choices": [{"index": 0, "finish_reason": "stop", "message": None}]}),
    "invalid_utf8": raw(json.dumps(OK_BODY).encode().replace(b"go_forward", b"go_\xff\xfe")),
    # valid JSON whose string holds a lone surrogate, which no UTF-8 text (nor Parquet) can carry
    "lone_surrogate": raw(json.dumps(OK_BODY).replace("go_forward", "go_\\udcff").encode()),
    "html_502": raw(b"<html>bad gateway</html>", status=502),
}


class Script:
    """What the fake server does for each successive request: an HTTP status, 'drop', 'ok', a FAULTS key or a
    raw(...) reply. `requests` keeps each request's path and JSON body."""

    def __init__(self, actions):
        self.actions = list(actions)
        self.seen = 0
        self.requests = []


# ------------------------------------------------------------------ a provider's error bodies
def openai_error(message: str, code: str | None, param: str | None = None) -> bytes:
    """An error body as OpenAI's API writes one."""
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": param,
                                 "code": code}}).encode()
