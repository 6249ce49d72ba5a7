"""Simulator throughput on a SkillRL-shaped stream: 64 episodes x 50 steps of ~1.5k-token prompts.

Prints prompt tokens per second for each mode next to the target (5 M tokens/s on the 2-core dev machine)
and next to a baseline that hashes blocks the way vLLM does (one Python hash per block, chained).
Run: python benchmarks/kvcache_sim.py [--episodes 64 --steps 50 --repeat 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from skillrepro.studies.kvcache.sim import CacheConfig, Request, simulate, simulate_llamacpp

TARGET = 5_000_000


def stream(episodes: int, steps: int, seed: int = 0) -> list[Request]:
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
            reqs.append(Request(str(e), t, np.concatenate(parts), completion_tokens=int(rng.integers(40, 120))))
    return reqs


def vllm_style_hashing(reqs: list[Request], bs: int = 16) -> None:
    for r in reqs:
        b = r.token_ids.tobytes()
        h = 0
        for i in range(len(r.token_ids) // bs):
            h = hash((h, b[i * bs * 8:(i + 1) * bs * 8]))


def measure(fn, reqs, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(reqs)
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    reqs = stream(a.episodes, a.steps)
    total = sum(len(r.token_ids) for r in reqs)
    print(f"stream: {len(reqs)} requests, {total:,} prompt tokens, mean {total / len(reqs):.0f} tokens/request")
    print(f"{'mode':<44}{'seconds':>9}{'M tok/s':>9}{'target':>8}{'reuse':>8}{'preempt':>9}")
    modes = {
        "vllm retain, lockstep, 419k-token cache": CacheConfig(capacity_tokens=419_000),
        "vllm flush, lockstep, 419k-token cache": CacheConfig(capacity_tokens=419_000, policy="flush"),
        "vllm retain, lockstep, 40k-token cache": CacheConfig(capacity_tokens=40_000),
        "vllm retain, sequential, 419k-token cache": CacheConfig(capacity_tokens=419_000, schedule="sequential"),
    }
    for name, cfg in modes.items():
        sec, (s, _) = measure(lambda r: simulate(r, cfg), reqs, a.repeat)
        print(f"{name:<44}{sec:>9.3f}{total / sec / 1e6:>9.2f}{TARGET / 1e6:>8.1f}{s.reuse_ratio:>8.3f}{s.preemptions:>9}")
    sec, (s, _) = measure(simulate_llamacpp, reqs, a.repeat)
    print(f"{'llama.cpp single slot':<44}{sec:>9.3f}{total / sec / 1e6:>9.2f}{TARGET / 1e6:>8.1f}{s.reuse_ratio:>8.3f}{'-':>9}")
    sec, _ = measure(vllm_style_hashing, reqs, a.repeat)
    print(f"{'baseline: per-block Python hashing only':<44}{sec:>9.3f}{total / sec / 1e6:>9.2f}{TARGET / 1e6:>8.1f}{'-':>8}{'-':>9}")


if __name__ == "__main__":
    main()
