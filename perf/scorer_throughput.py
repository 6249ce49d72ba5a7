"""Scoring throughput of the CPU teacher-forced scorer next to the embedded llama.cpp server's prompt
processing speed on the same model (its `timings.prompt_per_second`), on the same conversations.

    python perf/scorer_throughput.py [--model smollm2-135m] [--n 6] [--turns 12] [--threads 2]

The server is started here unless SKILLREPRO_LLM_URL names one already running (it must serve --model).
Both sides process every token of every conversation once: the server with its prefix cache off
(`cache_prompt: false`), the scorer in padded batches. Numbers depend on what else runs on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import urllib.request

from skillrepro.config import LLMConfig
from skillrepro.llm import servers
from skillrepro.llm.models import resolve
from skillrepro.llm.scorer import TransformersScorer


def conversations(n: int, turns: int) -> list[list[dict]]:
    out = []
    for k in range(n):
        msgs = [{"role": "system", "content": "You are an agent in a BabyAI grid world. Call one function per "
                 "turn: turn_left(), turn_right(), go_forward(), pick_up(), drop(), toggle()."},
                {"role": "user", "content": f"Mission: pick up the red ball, then go to the grey key. (task {k})"}]
        for t in range(turns + k):
            msgs.append({"role": "assistant", "content": f"Thought: the ball is {t % 4 + 1} steps ahead, slightly "
                         f"to the left.\nAction: {'go_forward' if t % 3 else 'turn_left'}()"})
            msgs.append({"role": "user", "content": f"Observation: You see a wall 4 steps forward, a red ball "
                         f"{t % 5} steps forward and 1 step left, a grey key 2 steps right."})
        out.append(msgs[:-1])
    return out


def server_prompt_speed(url: str, convs: list[list[dict]]) -> tuple[float, int, float]:
    """Mean of llama.cpp's own prompt_per_second, prompt tokens processed, wall seconds."""
    speeds, tokens, started = [], 0, time.perf_counter()
    for msgs in convs:
        body = {"messages": msgs, "max_tokens": 1, "temperature": 0, "cache_prompt": False}
        req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            t = json.loads(r.read())["timings"]
        speeds.append(t["prompt_per_second"])
        tokens += t["prompt_n"]
    return statistics.mean(speeds), tokens, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n", type=int, default=6, help="conversations")
    ap.add_argument("--turns", type=int, default=12, help="actor turns in the shortest conversation")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-tokens", type=int, default=8192)
    a = ap.parse_args()
    convs = conversations(a.n, a.turns)

    server = None
    url = os.environ.get(servers.URL_ENV)
    if not url:
        server = servers.start(LLMConfig(model=a.model, slots=1, ctx_per_slot=8192, threads=a.threads),
                               workdir="/tmp/skillrepro_bench")
        url = server.url
    try:
        server_speed, server_tokens, server_wall = server_prompt_speed(url, convs)
    finally:
        if server:
            server.stop()

    t0 = time.perf_counter()
    scorer = TransformersScorer(resolve(a.model), batch_tokens=a.batch_tokens, threads=a.threads)
    load_s = time.perf_counter() - t0
    seqs = [scorer.sequencer.build(c) for c in convs]
    scorer.score_sequences(seqs[:1])  # warm-up
    t0 = time.perf_counter()
    scores = scorer.score_sequences(seqs)
    wall = time.perf_counter() - t0
    fwd = sum(s.n_forward_tokens for s in scores)
    scored = sum(s.n_tokens for s in scores)

    print(f"model {a.model}, {a.n} conversations, {fwd} tokens in all ({scored} actor tokens scored), "
          f"{a.threads} threads")
    print(f"{'':38s}{'tokens/s':>12s}{'wall s':>10s}")
    print(f"{'llama.cpp server prompt processing':38s}{server_speed:12.1f}{server_wall:10.2f}   "
          f"(mean timings.prompt_per_second over {server_tokens} prompt tokens)")
    print(f"{'CPU scorer, all tokens processed':38s}{fwd / wall:12.1f}{wall:10.2f}   (model load {load_s:.1f} s, once)")
    print(f"{'CPU scorer, actor tokens scored':38s}{scored / wall:12.1f}")
    print(f"ratio scorer / server (all tokens): {fwd / wall / server_speed:.2f}")


if __name__ == "__main__":
    main()
