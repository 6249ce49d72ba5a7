"""A scripted stand-in for the LLM client, for unit tests and the harness benchmark only; and a scripted
OpenAI-compatible server, for tests that drive the real rules through Snakemake."""
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
