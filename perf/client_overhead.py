"""What the `openai` SDK costs the LLM client: its import in a fresh process, and its per-call overhead.

    python perf/client_overhead.py [--calls 200] [--imports 5] [--turns 6] [--server canned|model]

1. Import: `python -c "import openai"` against `python -c "pass"` in fresh processes, median of --imports
   runs, wall and CPU; and whether `import skillrepro.llm.client` alone loads the SDK (it must not: the SDK
   is imported when the first client is made).
2. Per call: `LLMClient.chat` (through the SDK's `post`) against the same request body POSTed directly with
   httpx (the transport the client used first) and with httpx2 (the one the SDK runs on), each
   parsing the reply with json.loads; beside them `LLMClient._post` alone, and the SDK's typed
   `chat.completions.with_raw_response.create` (which the client does not use: it walks the whole request
   against its parameter types first). The server, in a child process, answers every POST with a canned
   chat completion at once (keep-alive, no model): what is measured is the client's own cost plus the same
   loopback round trip on every side. The series are interleaved in blocks, after a warm-up, so the shared
   machine's load falls on all of them alike.

   With `--server model` the same series run against the real embedded llama.cpp server (SmolLM2-135M, one
   slot, the reply capped at one token, the prompt cached after the first call): the request as a run sends
   it, where the client's cost sits beside the server's few milliseconds of work.

Target: `LLMClient.chat` within 1.2x of the direct httpx request at the median (httpx2 where
httpx is not installed). Timings on the shared 2-core machine move by +-25 %: re-run before relying on one
number.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

BODY = json.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "/models/fake.gguf",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Thought: the door is ahead.\nAction: go_forward()"}}],
    "usage": {"prompt_tokens": 812, "completion_tokens": 14, "total_tokens": 826,
              "prompt_tokens_details": {"cached_tokens": 768}},
    "timings": {"prompt_n": 44, "prompt_ms": 30.1, "predicted_n": 14, "predicted_ms": 80.2},  # llama.cpp's
}).encode()


def serve(port_q) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as llama.cpp and vLLM
        wbufsize = 1 << 16  # the reply in one send: headers and body in two would wait out delayed ACKs (40 ms)

        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_q.put(httpd.server_address[1])
    httpd.serve_forever()


def fresh_process(code: str, n: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `python -c code` in a fresh process."""
    wall, cpu = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        wall.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(wall), statistics.median(cpu)


def import_cost(n: int) -> None:
    base = fresh_process("pass", n)
    sdk = fresh_process("import openai", n)
    print(f"{'import, fresh process, median of ' + str(n):<48}{'wall (s)':>10}{'CPU (s)':>10}")
    for name, (w, c) in (("python -c pass", base), ("python -c 'import openai'", sdk)):
        print(f"  {name:<46}{w:>10.3f}{c:>10.3f}")
    print(f"  {'the import of openai alone':<46}{sdk[0] - base[0]:>10.3f}{sdk[1] - base[1]:>10.3f}")
    out = subprocess.run([sys.executable, "-c", "import sys, skillrepro.llm.client; print('openai' in sys.modules)"],
                         check=True, capture_output=True, text=True).stdout.strip()
    print(f"  `import skillrepro.llm.client` loads openai: {out} (expected False: loaded by the first client)")


def request(turns: int) -> list[dict]:
    system = "You are an agent in a grid world. " * 60  # ~2 KB, like the actor's instructions
    messages = [{"role": "system", "content": system}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Observation {i}: a wall ahead, a red key to the left. " * 4})
        messages.append({"role": "assistant", "content": "Thought: turn.\nAction: turn_left()"})
    messages.append({"role": "user", "content": "Observation: the door is ahead."})
    return messages


TOOLS = [{"type": "function", "function": {
    "name": "go_forward", "description": "Move one cell forward.",
    "parameters": {"type": "object", "properties": {"cells": {"type": "integer"}}, "required": []}}}]


@contextlib.contextmanager
def canned_server():
    """The canned server above in a child process; yields its /v1 URL."""
    port_q = multiprocessing.get_context("fork").Queue()
    server = multiprocessing.get_context("fork").Process(target=serve, args=(port_q,), daemon=True)
    server.start()
    try:
        yield f"http://127.0.0.1:{port_q.get(timeout=30)}/v1"
    finally:
        server.terminate()
        server.join()


@contextlib.contextmanager
def model_server():
    """The embedded llama.cpp server the workflow starts, on SmolLM2-135M; yields its /v1 URL."""
    from skillrepro.llm import servers

    with tempfile.TemporaryDirectory() as wd:
        server = servers.start(model_config(), workdir=wd)
        try:
            yield server.url
        finally:
            server.stop()


def model_config():
    from skillrepro.config import LLMConfig

    return LLMConfig(backend="embedded", model="smollm2-135m", slots=1, ctx_per_slot=4096, max_tokens=1,
                     temperature=0.0, threads=2, timeout_s=60)


def per_call(url: str, calls: int, turns: int, block: int = 20) -> dict[str, list[float]]:
    import httpx2

    try:
        import httpx  # no longer a dependency of skillrepro; other packages bring it
    except ImportError:
        httpx = None

    from skillrepro.llm.client import _SDK_FIELDS, LLMClient

    client = LLMClient(model_config(), url)
    messages = request(turns)
    kwargs = dict(role="actor", session_id="perf", tools=TOOLS, extra_body={"cache_prompt": True})

    # the body chat() sends, caught once, is what the direct clients send
    sent: list[dict] = []
    post = client._post
    client._post = lambda req: sent.append(req) or post(req)
    client.chat(messages, **kwargs)
    del client._post
    [body] = sent
    fields = {k: v for k, v in body.items() if k in _SDK_FIELDS}
    extra = {k: v for k, v in body.items() if k not in _SDK_FIELDS}
    create = client._sdk.chat.completions.with_raw_response.create

    headers = {"Authorization": "Bearer none", "Content-Type": "application/json"}
    direct = {"httpx2": httpx2.Client(timeout=30, headers=headers)}
    if httpx is not None:
        direct["httpx"] = httpx.Client(timeout=30, headers=headers)

    def post_direct(name):
        r = direct[name].post(url + "/chat/completions", content=json.dumps(body).encode())
        assert r.status_code == 200
        return json.loads(r.content.decode("utf-8"))

    series = {
        **({"direct POST, httpx": lambda: post_direct("httpx")} if httpx is not None else {}),
        "direct POST, httpx2": lambda: post_direct("httpx2"),
        "LLMClient._post (SDK post)": lambda: client._post(body),
        "SDK create(), with_raw_response":
            lambda: json.loads(create(**fields, extra_body=extra).http_response.content),
        "LLMClient.chat (SDK)": lambda: client.chat(messages, **kwargs),
    }
    times: dict[str, list[float]] = {n: [] for n in series}
    for fn in series.values():  # warm-up: connections open, caches filled
        for _ in range(block):
            fn()
    for _ in range(0, calls, block):
        for name, fn in series.items():
            for _ in range(min(block, calls - len(times[name]))):
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) * 1000)
        client.records.clear()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--imports", type=int, default=5)
    ap.add_argument("--turns", type=int, default=6, help="observation/action turns in the request")
    ap.add_argument("--server", choices=("canned", "model"), default="canned",
                    help="canned: a reply at once, the client's own cost; model: the embedded SmolLM2 server")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    import_cost(a.imports)
    with (canned_server() if a.server == "canned" else model_server()) as url:
        times = per_call(url, a.calls, a.turns)
    label = f"per call (ms), {a.server} server, n={a.calls}, {2 * a.turns + 2} messages"
    print(f"{label:<48}{'median':>10}{'mean':>10}{'p95':>10}")
    for name, xs in times.items():
        xs = sorted(xs)
        print(f"  {name:<46}{statistics.median(xs):>10.3f}{statistics.mean(xs):>10.3f}{xs[int(len(xs) * .95)]:>10.3f}")
    chat = statistics.median(times["LLMClient.chat (SDK)"])
    direct = [n for n in times if n.startswith("direct")]  # httpx first, where it is installed
    for base in direct:
        ratio = chat / statistics.median(times[base])
        print(f"LLMClient.chat / {base}: {ratio:.2f}x at the median, {chat - statistics.median(times[base]):+.3f} ms"
              + (f"; target <= 1.2x: {'met' if ratio <= 1.2 else 'MISSED'}" if base == direct[0] else ""))
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
