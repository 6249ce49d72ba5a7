"""Simulator throughput on a SkillRL-shaped stream: 64 episodes x 50 steps of ~1.5k-token prompts.

Runs each mode through this checkout's simulator (vLLM 0.11.0's scheduler: chunked prefill, token-level
decode, preemption) and, side by side in the same process, through the simulator of an earlier commit
(`--before`, default: the last commit before the scheduler change), loaded with `git show`. Prints prompt
tokens per second, reuse and preemptions of each, next to the target (5 M tokens/s on the 2-core dev machine).
Run: python perf/kvcache_sim.py [--episodes 64 --steps 50 --repeat 3 --before REF]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

from skillrepro.studies.kvcache import sim as after

TARGET = 5_000_000
BEFORE = "bdc3a3383c7fc7f9489c43cc8d9a6a938f0e306e"  # block-granular rounds, whole-prompt admission


def load_before(ref: str) -> types.ModuleType:
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "show", f"{ref}:src/skillrepro/studies/kvcache/sim.py"], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("sim_before")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, f"{ref}:sim.py", "exec"), mod.__dict__)
    return mod


def stream(mod, episodes: int, steps: int, seed: int = 0) -> list:
    """Header, task, category skills, step counter, last two (observation, action) pairs, actions, reply
    instruction: the segment sizes of seed 001's step-2 request (1,421 tokens)."""
    rng = np.random.default_rng(seed)
    header = rng.integers(0, 150_000, 32)
    skills = {c: rng.integers(0, 150_000, 871) for c in range(6)}
    instruction = rng.integers(0, 150_000, 67)
    eps = []
    for e in range(episodes):
        eps.append(dict(task=rng.integers(0, 150_000, 11), cat=e % 6,
                        events=[rng.integers(0, 150_000, int(rng.integers(40, 150))) for _ in range(steps + 1)]))
    reqs = []
    for t in range(steps):
        for e, ep in enumerate(eps):
            hist = ep["events"][max(0, t - 2):t]
            parts = [header, ep["task"], skills[ep["cat"]], np.array([900 + t]), *hist,
                     ep["events"][t], rng.integers(0, 150_000, 144), instruction]
            reqs.append(mod.Request(str(e), t, np.concatenate(parts), completion_tokens=int(rng.integers(40, 120))))
    return reqs


def measure(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


MODES = {  # name: CacheConfig keywords
    "retain, lockstep, 419k-token cache": dict(capacity_tokens=419_000),
    "flush, lockstep, 419k-token cache": dict(capacity_tokens=419_000, policy="flush"),
    "retain, lockstep, 40k-token cache": dict(capacity_tokens=40_000),
    "retain, sequential, 419k-token cache": dict(capacity_tokens=419_000, schedule="sequential"),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", default=BEFORE, help="git ref of the simulator to compare against")
    a = ap.parse_args()
    before = load_before(a.before)
    sims = {"before": before, "after": after}
    streams = {k: stream(m, a.episodes, a.steps) for k, m in sims.items()}
    total = sum(len(r.token_ids) for r in streams["after"])
    print(f"stream: {len(streams['after'])} requests, {total:,} prompt tokens; before = {a.before[:12]}, "
          f"after = this checkout (vLLM {after.VLLM_VERSION} rules); target {TARGET / 1e6:.1f} M tok/s")
    print(f"{'mode':<38}{'before s':>9}{'M tok/s':>8}{'reuse':>7}{'preempt':>8}"
          f"{'after s':>9}{'M tok/s':>8}{'reuse':>7}{'preempt':>8}")
    for name, kw in MODES.items():
        line = f"{name:<38}"
        for k, m in sims.items():
            cfg = m.CacheConfig(**kw)
            sec, (s, _) = measure(lambda: m.simulate(streams[k], cfg), a.repeat)
            line += f"{sec:>9.3f}{total / sec / 1e6:>8.2f}{s.reuse_ratio:>7.3f}{s.preemptions:>8}"
        print(line, flush=True)
    line = f"{'llama.cpp single slot':<38}"
    for k, m in sims.items():
        sec, (s, _) = measure(lambda: m.simulate_llamacpp(streams[k]), a.repeat)
        line += f"{sec:>9.3f}{total / sec / 1e6:>8.2f}{s.reuse_ratio:>7.3f}{'-':>8}"
    print(line)


if __name__ == "__main__":
    main()
