"""Cost of a sandboxed skill call that issues one primitive, against calling that primitive directly.

    python perf/skill_call_overhead.py [--calls 300] [--think-ms 50]

Every skill call runs in a fresh child process (forked by the sandbox's zygote, killed and reaped after the
call), so two figures: calls back to back (the next child is still starting when the call comes) and calls
after a pause standing in for the actor's LLM request between two skill calls (the next child is ready).
Target (issue 21): at most 5 ms more than a direct step at the median, on the 2-core CPU machine. The zygote's start (once per episode) is
printed separately, with the isolation layers the run had.
"""
from __future__ import annotations

import argparse
import statistics
import time

from skillrepro.benchmarks import get_benchmark
from skillrepro.skills.sandbox import SandboxSession

SKILL = 'def turn():\n    """One primitive."""\n    return turn_left()\n'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--think-ms", type=float, default=50.0, help="pause before each call of the second series")
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
    back_to_back, after_pause = [], []
    for series, pause in ((back_to_back, 0.0), (after_pause, a.think_ms / 1000)):
        for _ in range(a.calls):
            if env.done:  # BabyAI's step limit; the sandbox stays, only the env is new
                env = s.env = fresh()
            time.sleep(pause)
            t = time.perf_counter()
            out = s.call_skill("turn", [])
            series.append((time.perf_counter() - t) * 1000)
            assert out.ok and out.primitives == 1, out
    s.close()

    def row(name, xs):
        xs = sorted(xs)
        return f"{name:<28}{statistics.median(xs):>10.3f}{statistics.mean(xs):>10.3f}{xs[int(len(xs) * .95)]:>10.3f}"

    print(f"{'per call (ms), n=' + str(a.calls):<28}{'median':>10}{'mean':>10}{'p95':>10}")
    print(row("direct env.step", direct))
    print(row("sandboxed, back to back", back_to_back))
    print(row(f"sandboxed, after {a.think_ms:g} ms", after_pause))
    print(f"zygote start + first call: {start_ms:.1f} ms (once per episode)")
    print(f"layers: {', '.join(k for k in s.isolation if k not in s.missing)}; missing: {', '.join(s.missing) or 'none'}")
    for name, series in (("back to back", back_to_back), (f"after {a.think_ms:g} ms", after_pause)):
        extra = statistics.median(series) - statistics.median(direct)
        print(f"target <= 5 ms more than a direct step at the median, {name}: {extra:.1f} ms, "
              f"{'met' if extra <= 5 else 'MISSED'}")


if __name__ == "__main__":
    main()
