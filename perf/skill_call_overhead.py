"""Cost of a sandboxed skill call that issues one primitive, against calling that primitive directly.

    python perf/skill_call_overhead.py [--calls 300] [--think-ms 50] [--rounds 1]

Every skill call runs in a fresh child process of the sandbox's zygote: the child is forked, takes its layers
and loads the library as soon as the previous call has its result, then waits, ready, for its call; after
the call it is killed. So two figures: calls back to back (the next child is still starting when the call
comes) and calls after a pause standing in for the actor's LLM request between two skill calls (the next
child is ready). Target: at most 5 ms more than a direct step at the median, on the 2-core CPU
machine. The machine is shared: each round prints the load average beside its figures, and with
--rounds N the closing lines are the medians over the rounds. The zygote's start (once per episode) is
printed separately, with the isolation layers the run had.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from skillrepro.benchmarks import get_benchmark
from skillrepro.skills.sandbox import SandboxSession

SKILL = 'def turn():\n    """One primitive."""\n    return turn_left()\n'


def one_round(bench, calls: int, think_ms: float) -> dict:
    def fresh():
        e = bench.make(bench.sample_tasks("train", 1, 0)[0])
        e.reset()
        return e

    env = fresh()
    direct = []
    for _ in range(calls):
        if env.done:
            env = fresh()
        t = time.perf_counter()
        env.step("turn_left", [])
        direct.append((time.perf_counter() - t) * 1000)

    t = time.perf_counter()
    s = SandboxSession(source=SKILL, env=env)
    s.call_skill("turn", [])  # starts the worker
    start_ms = (time.perf_counter() - t) * 1000
    series: dict[str, list[float]] = {"back to back": [], f"after {think_ms:g} ms": []}
    for (name, xs), pause in zip(series.items(), (0.0, think_ms / 1000)):
        for _ in range(calls):
            if env.done:  # BabyAI's step limit; the sandbox stays, only the env is new
                env = s.env = fresh()
            time.sleep(pause)
            t = time.perf_counter()
            out = s.call_skill("turn", [])
            xs.append((time.perf_counter() - t) * 1000)
            assert out.ok and out.primitives == 1, out
    s.close()
    return {"direct env.step": direct, **series, "start_ms": start_ms, "session": s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--think-ms", type=float, default=50.0, help="pause before each call of the second series")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the measurement; medians over the rounds")
    a = ap.parse_args()
    bench = get_benchmark("babyai")
    names = ["direct env.step", "back to back", f"after {a.think_ms:g} ms"]
    medians: dict[str, list[float]] = {n: [] for n in names}
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        res = one_round(bench, a.calls, a.think_ms)
        print(f"round {r + 1}: load average {load:.2f} before, {os.getloadavg()[0]:.2f} after "
              f"({os.cpu_count()} cores)")
        print(f"  {'per call (ms), n=' + str(a.calls):<28}{'median':>10}{'mean':>10}{'p95':>10}")
        for n in names:
            xs = sorted(res[n])
            medians[n].append(statistics.median(xs))
            print(f"  {n:<28}{statistics.median(xs):>10.3f}{statistics.mean(xs):>10.3f}{xs[int(len(xs) * .95)]:>10.3f}")
        s = res["session"]
        print(f"  zygote start + first call: {res['start_ms']:.1f} ms (once per episode)")
    print(f"layers: {', '.join(k for k in s.isolation if k not in s.missing)}; missing: {', '.join(s.missing) or 'none'}")
    if a.rounds > 1:
        print(f"median over {a.rounds} rounds of the per-round medians (ms): "
              + ", ".join(f"{n} {statistics.median(medians[n]):.3f}" for n in names))
    direct = statistics.median(medians["direct env.step"])
    for n in names[1:]:
        extra = statistics.median(medians[n]) - direct
        print(f"target <= 5 ms more than a direct step at the median, {n}: {extra:.1f} ms, "
              f"{'met' if extra <= 5 else 'MISSED'}")


if __name__ == "__main__":
    main()
