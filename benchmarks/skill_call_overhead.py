"""Cost of a sandboxed skill call that issues one primitive, against calling that primitive directly.

    python benchmarks/skill_call_overhead.py [--calls 300]

Target: <= 20 ms per sandboxed call on the 2-core CPU machine. The worker start (once per episode) is
printed separately.
"""
from __future__ import annotations

import argparse
import statistics
import time

from skillrepro.envs import get_benchmark
from skillrepro.skills.sandbox import SandboxSession

SKILL = 'def turn():\n    """One primitive."""\n    return turn_left()\n'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    a = ap.parse_args()
    bench = get_benchmark("babyai")
    env = bench.make(bench.sample_tasks("train", 1, 0)[0])
    env.reset()

    def fresh():
        e = bench.make(bench.sample_tasks("train", 1, 0)[0])
        e.reset()
        return e

    direct = []
    for i in range(a.calls):
        if env.done:
            env = fresh()
        t = time.perf_counter()
        env.step("turn_left", [])
        direct.append((time.perf_counter() - t) * 1000)

    t = time.perf_counter()
    s = SandboxSession(source=SKILL, env=env)
    s.call_skill("turn", [])  # starts the worker
    start_ms = (time.perf_counter() - t) * 1000
    sandboxed = []
    for _ in range(a.calls):
        if env.done:  # BabyAI's step limit; the worker keeps running, only the env is new
            env = s.env = fresh()
        t = time.perf_counter()
        out = s.call_skill("turn", [])
        sandboxed.append((time.perf_counter() - t) * 1000)
        assert out.ok and out.primitives == 1, out
    s.close()

    def row(name, xs):
        xs = sorted(xs)
        return f"{name:<28}{statistics.median(xs):>10.3f}{statistics.mean(xs):>10.3f}{xs[int(len(xs) * .95)]:>10.3f}"

    print(f"{'per call (ms), n=' + str(a.calls):<28}{'median':>10}{'mean':>10}{'p95':>10}")
    print(row("direct env.step", direct))
    print(row("sandboxed skill (1 prim)", sandboxed))
    print(f"worker start + first call: {start_ms:.1f} ms (once per episode); isolation: {', '.join(s.isolation)}")
    print(f"target <= 20 ms per sandboxed call: {'met' if statistics.median(sandboxed) <= 20 else 'MISSED'}")


if __name__ == "__main__":
    main()
