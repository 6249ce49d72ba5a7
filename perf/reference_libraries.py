"""The shipped reference libraries on real environments, without an LLM: each library's top skill called
directly through the real sandbox, as the actor's tool calls it, on the pipeline's own test tasks.

    python perf/reference_libraries.py [--n 10] [--bench babyai scienceworld-electricity ...] [--trace]

Tasks: `sample_tasks("test", n, run_task_seed(task_seed, 0))` with the default run's task seed (42), the
draw workflow/scripts/speedrunner/sample_tasks.py makes for run seed 0. Each benchmark's episode is played as an actor
that only calls the top skill would play it:
- BabyAI: solve_mission(<the mission line>) once; success.
- ScienceWorld (electricity = T3, classification = T4): solve_task(<the task text>) once (it submits); success.
- Crafter: play_step() again and again (each call stops within the sandbox's 200 primitives per call) until
  the episode ends or `--crafter-calls` calls; progression (achievements unlocked / 22) and the achievements.
Beside each figure: the baseline an LLM-free actor gets without the library (BabyAI and ScienceWorld: 0,
an episode that does nothing is never a success; Crafter: measured here, uniformly random primitives for
as many steps as the library used), and ReAct's figure where docs/results.md has one (the shipped 0.5B model:
0 on BabyAI's default run).
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

from skillrepro.benchmarks import get_benchmark
from skillrepro.methods.reference import SHIPPED
from skillrepro.skills.sandbox import SandboxSession

TASK_SEED = 42  # config.yaml protocol.task_seed
BENCHES = {  # name -> (env, options)
    "babyai": ("babyai", {}),
    "scienceworld-electricity": ("scienceworld", {"family": "electricity"}),
    "scienceworld-classification": ("scienceworld", {"family": "classification"}),
    "crafter": ("crafter", {}),
}


def library_source(env: str) -> str:
    return (SHIPPED / env / "skills.py").read_text()


def play(env_name: str, env, source: str, crafter_calls: int, trace: bool) -> dict:
    opening = env.reset()
    frames = []
    session = SandboxSession(source=source, env=env, record=frames.append)
    rets, calls, t = [], 0, time.perf_counter()
    try:
        if env_name == "babyai":
            out = session.call_skill("solve_mission", [env.mission])
            rets.append(out.ret if out.ok else f"ERROR {out.exception or out.killed}")
            calls = 1
        elif env_name == "scienceworld":
            task = opening.split("\n\n")[0].removeprefix("Task: ")
            out = session.call_skill("solve_task", [task])
            rets.append(out.ret if out.ok else f"ERROR {out.exception or out.killed}")
            calls = 1
        else:
            while not env.done and calls < crafter_calls:
                out = session.call_skill("play_step", [])
                calls += 1
                rets.append(out.ret if out.ok else f"ERROR {out.exception or out.killed}")
                if not out.ok and not out.exception.startswith("EpisodeOver"):
                    break
    finally:
        session.close()
    if trace:
        for f in frames:
            if f.primitives:
                for p in f.primitives:
                    print("   ", f.function, p[0], p[1], str(p[2]).split("\n")[0][:100])
    return {"success": bool(env.success()), "score": env.score(), "calls": calls, "steps": env.n_primitive_steps,
            "wall_s": time.perf_counter() - t, "last": (rets[-1] or "")[:300] if rets else "",
            "unlocked": env.unlocked() if env_name == "crafter" else []}


def random_crafter(bench, task: str, steps: int, seed: int) -> float:
    env = bench.make(task)
    env.reset()
    rng = random.Random(seed)
    names = [p.name for p in bench.primitives() if p.advances]
    while not env.done and env.n_primitive_steps < steps:
        env.step(rng.choice(names), [])
    return env.score()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10, help="test tasks per benchmark")
    ap.add_argument("--bench", nargs="*", default=list(BENCHES), choices=list(BENCHES))
    ap.add_argument("--crafter-calls", type=int, default=40, help="play_step calls per Crafter episode at most")
    ap.add_argument("--trace", action="store_true", help="print every primitive the skills issued")
    a = ap.parse_args()
    rows = []
    for name in a.bench:
        env_name, options = BENCHES[name]
        bench = get_benchmark(env_name, **options)
        source = library_source(env_name)
        pool = bench.pool_size("test")  # BabyAI's test split holds 30 tasks a task seed: all of them then
        tasks = bench.sample_tasks("test", min(a.n, pool) if pool else a.n, bench.run_task_seed(TASK_SEED, 0))
        results = []
        for task in tasks:
            env = bench.make(task)
            try:
                r = play(env_name, env, source, a.crafter_calls, a.trace)
            finally:
                env.release()
            results.append(r)
            extra = f" unlocked={','.join(r['unlocked'])}" if env_name == "crafter" else ""
            print(f"{name} {task}: success={r['success']} score={r['score']:.3f} calls={r['calls']} "
                  f"steps={r['steps']} {r['wall_s']:.1f}s{extra} | {r['last'].splitlines()[0] if r['last'] else ''}",
                  flush=True)
        if env_name == "crafter":
            base = [random_crafter(bench, t, max(r["steps"], 1), i) for i, (t, r) in enumerate(zip(tasks, results))]
            figure = statistics.mean(r["score"] for r in results)
            rows.append((name, "progression", figure, f"random primitives, same steps: {statistics.mean(base):.3f}",
                         len(tasks)))
        else:
            figure = statistics.mean(r["success"] for r in results)
            baseline = "ReAct 0.5B default run: 0.00" if env_name == "babyai" else "no-skill floor: 0.00"
            rows.append((name, "success", figure, baseline, len(tasks)))
    print()
    print(f"{'benchmark':30} {'metric':12} {'reference':>9}  baseline  (tasks)")
    for name, metric, figure, baseline, n in rows:
        print(f"{name:30} {metric:12} {figure:9.3f}  {baseline}  ({n} test tasks, task seed {TASK_SEED})")


if __name__ == "__main__":
    main()
