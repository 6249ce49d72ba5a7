"""Retry logic and usage accounting of the one LLM client, against a local fake HTTP server."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skillrepro.config import LLMConfig
from skillrepro.llm import LLMClient, LLMFatalError
from skillrepro.llm.servers import vllm_command

OK_BODY = {
    "id": "x", "object": "chat.completion", "created": 0, "model": "fake-model",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Action: go_forward()"}}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127,
              "prompt_tokens_details": {"cached_tokens": 96},
              "completion_tokens_details": {"reasoning_tokens": 3}},
}


class Script:
    """What the fake server does for each successive request: an HTTP status, 'drop' or 'ok'."""

    def __init__(self, actions):
        self.actions = list(actions)
        self.seen = 0


@pytest.fixture
def fake_server():
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            action = script.actions[script.seen] if script.seen < len(script.actions) else "ok"
            script.seen += 1
            if action == "drop":
                self.connection.close()  # the client sees the connection die mid-request
                return
            status, body = (200, OK_BODY) if action == "ok" else (action, {"error": {"message": f"fake {action}"}})
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    httpd.shutdown()


def client(url, retries=3):
    c = LLMClient(LLMConfig(backend="openai", model="fake-model", max_retries=retries, timeout_s=5), url)
    c.backoff_base_s = 0.01
    return c


def test_transient_failures_are_retried_and_counted(fake_server):
    url, script = fake_server
    script.actions = [429, 500, "drop", 503, "ok"]
    c = client(url, retries=4)
    reply = c.chat([{"role": "user", "content": "hi"}], role="actor", session_id="ep1")
    assert reply.text == "Action: go_forward()"
    rec = reply.record
    assert rec.retries == 4 and script.seen == 5
    assert (rec.prompt_tokens, rec.cached_tokens, rec.completion_tokens, rec.reasoning_tokens) == (120, 96, 7, 3)
    assert rec.finish_reason == "stop" and rec.model == "fake-model" and rec.role == "actor"
    assert len(rec.prompt_sha256) == 64 and json.loads(rec.prompt)["messages"][0]["content"] == "hi"


def test_retries_give_up_at_the_limit(fake_server):
    url, script = fake_server
    script.actions = [500] * 10
    with pytest.raises(LLMFatalError, match="after 2 retries"):
        client(url, retries=2).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert script.seen == 3


@pytest.mark.parametrize("status, message", [(401, "401 unauthorized"), (404, "404 not found")])
def test_auth_and_not_found_fail_at_once(fake_server, status, message):
    url, script = fake_server
    script.actions = [status]
    with pytest.raises(LLMFatalError, match=message):
        client(url).chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")
    assert script.seen == 1


def test_connection_refused_is_retried_then_fatal():
    c = client("http://127.0.0.1:9/v1", retries=1)
    with pytest.raises(LLMFatalError, match="after 1 retries"):
        c.chat([{"role": "user", "content": "hi"}], role="actor", session_id="e")


def test_vllm_command_enables_cache_accounting():
    cmd = vllm_command(LLMConfig(backend="vllm", model="qwen2.5-coder-1.5b", slots=4, seed=7,
                                 vllm_args=("--gpu-memory-utilization", "0.8")), port=8123)
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    assert "--enable-prompt-tokens-details" in cmd and "--enable-prefix-caching" in cmd
    assert cmd[cmd.index("--port") + 1] == "8123" and cmd[cmd.index("--max-num-seqs") + 1] == "4"
    assert cmd[-2:] == ["--gpu-memory-utilization", "0.8"]
