"""Harness overhead per actor step: everything except env.step and the LLM call, with a scripted LLM.

Prints our per-step overhead beside the raw env step it wraps. Target: <= 5 ms per step.
    python perf/harness_overhead.py [--episodes 20]
"""
import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from scripted import ScriptedClient  # noqa: E402

from skillrepro.agent import Actor, EpisodeSpec, primitive_tools  # noqa: E402
from skillrepro.benchmarks import get_benchmark  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--episodes", type=int, default=20)
a = ap.parse_args()

bench = get_benchmark("babyai")
spec = EpisodeSpec("bench", "babyai", "react", "react", 0, "train", 0, 0)
replies = ["Thought: keep looking around.\nAction: turn_left()", "Thought: move on.\nAction: go_forward()",
           "Action: jump()"]
harness, env_ms, steps, wall = [], [], 0, 0.0
for task in bench.sample_tasks("train", a.episodes, 42):
    env = bench.make(task)
    tools = primitive_tools(env)
    timed = []
    for t in tools:  # wrap each primitive to time env.step separately
        def run(args, wall_s=None, _run=t.run):  # the actor passes what is left of the episode's wall clock
            t0 = time.perf_counter()
            out = _run(args, wall_s)
            timed.append((time.perf_counter() - t0) * 1000)
            return out
        object.__setattr__(t, "run", run)
    t0 = time.perf_counter()
    rec = Actor(ScriptedClient(replies), bench.describe(), 30).run(env, tools, spec)
    wall += time.perf_counter() - t0
    steps += rec.episode.n_steps
    harness += [s.harness_ms for s in rec.steps]
    env_ms += timed

# The client's own bookkeeping per call (prompt JSON + sha256 over a 30-step history), which the scripted
# client skips: measured on the last episode's final request.
messages = [{"role": "user", "content": s.observation} for s in rec.steps]
t0 = time.perf_counter()
for _ in range(200):
    hashlib.sha256(json.dumps({"messages": messages}, ensure_ascii=False).encode()).hexdigest()
record_ms = (time.perf_counter() - t0) / 200 * 1000

per_step_total = wall * 1000 / steps
print(f"episodes={a.episodes} steps={steps}")
print(f"{'measure':<44}{'ms/step':>10}")
print(f"{'raw env.step (minigrid + text view)':<44}{sum(env_ms) / len(env_ms):>10.3f}")
print(f"{'harness: parse, dispatch, records (in-loop)':<44}{sum(harness) / len(harness):>10.3f}")
print(f"{'harness: whole loop minus env.step':<44}{per_step_total - sum(env_ms) / steps:>10.3f}")
print(f"{'client bookkeeping (prompt JSON + sha256)':<44}{record_ms:>10.3f}")
print("target: harness <= 5 ms/step")
