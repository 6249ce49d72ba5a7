"""Fixtures of the LLM client's tests: `fake_server`, a local OpenAI-compatible server that follows a script
(test_llm_client, test_ledger; its replies are in tests/scripted.py)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scripted import FAULTS, OK_BODY, Script


@pytest.fixture
def fake_server():
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, status, data, headers=()):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in dict(headers).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append((self.path, body))
            if self.path == "/apply-template":  # llama.cpp: the prompt the chat template makes
                text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"])
                return self.reply(200, json.dumps({"prompt": text + "<|im_start|>assistant\n"}).encode())
            if self.path == "/tokenize":  # one fake token per whitespace-separated word
                if "content" in body:  # llama.cpp
                    return self.reply(200, json.dumps({"tokens": list(range(len(body["content"].split())))}).encode())
                text = body.get("prompt") or " ".join(m["content"] for m in body["messages"])  # vLLM
                n = len(text.split()) + 3 * bool(body.get("messages"))
                return self.reply(200, json.dumps({"count": n, "tokens": list(range(n))}).encode())  # as vLLM
            action = script.actions[script.seen] if script.seen < len(script.actions) else "ok"
            script.seen += 1
            action = FAULTS.get(action, action) if isinstance(action, str) else action
            if action == "drop":
                self.connection.close()  # the client sees the connection die mid-request
                return
            if isinstance(action, tuple):
                _, status, data, headers = action
                return self.reply(status, data, headers)
            status, body = (200, OK_BODY) if action == "ok" else (action, {"error": {"message": f"fake {action}"}})
            self.reply(status, json.dumps(body).encode())

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    httpd.shutdown()
