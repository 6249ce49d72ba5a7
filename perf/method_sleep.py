"""Sleep-phase cost per cycle of each method, on the real embedded model of config.yaml.

For each method: wall time of one sleep phase (induce), the tokens it spent (every call in its llm_calls
table, by role; Voyager's curriculum calls from the training batch too), and whether the library or the
notes changed. ReAct's (no-op) sleep phase and the actor's tokens per training rollout are the baselines.

BabyAI methods (speedrunner, opo, asi, asi_replay) all learn from the same two recorded ReAct batches, so
their sleep phases see identical inputs; Voyager plays its own Crafter batches (its curriculum needs them).
    python perf/method_sleep.py [--episodes 2] [--call-budget 12] [--methods opo,asi,...]
"""
import argparse
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq

from skillrepro.agent import EpisodeSpec
from skillrepro.config import BenchmarkConfig, MethodConfig, llm_config, load_yaml
from skillrepro.llm import servers
from skillrepro.llm.client import LLMClient
from skillrepro.methods import InduceContext, bind, get_method
from skillrepro.runner import run_batch
from skillrepro.skills import Library
from skillrepro.benchmarks import load_benchmark

ap = argparse.ArgumentParser()
ap.add_argument("--episodes", type=int, default=2, help="training episodes per batch (config.yaml: sleep_every 2)")
ap.add_argument("--cycles", type=int, default=2)
ap.add_argument("--call-budget", type=int, default=12, help="actor LLM calls per episode")
ap.add_argument("--methods", default="react,speedrunner,opo,asi,asi_replay,voyager")
ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: config.yaml's)")
a = ap.parse_args()
ROOT = Path(__file__).resolve().parents[1]
cfg = load_yaml(ROOT / "config.yaml")
llm = llm_config(cfg)
llm = replace(llm, threads=a.threads or llm.threads)
requests = cfg["budgets"]["inducer_requests"]
work = Path(tempfile.mkdtemp(prefix="method_sleep."))
server = servers.start(llm, workdir=work)
client = LLMClient(llm, server.url)
print(f"model={llm.model} threads={llm.threads} max_tokens={llm.max_tokens} ctx_per_slot={llm.ctx_per_slot} episodes/batch={a.episodes} "
      f"actor call budget={a.call_budget} inducer_requests={requests}")


def tokens(path: Path, roles=None) -> tuple[int, int, dict, float]:
    rows = pq.read_table(path).to_pylist() if path.exists() else []
    rows = [r for r in rows if roles is None or r["role"] in roles]
    by = {}
    for r in rows:
        by[r["role"]] = by.get(r["role"], 0) + 1
    return (sum(r["prompt_tokens"] for r in rows), sum(r["completion_tokens"] for r in rows), by,
            sum(r["latency_s"] for r in rows))


def play(bench, method, run: Path, k: int, tasks: list[str], library: int | None = None) -> Path:
    spec = EpisodeSpec(f"{bench.name}/{method.variant}/seed0", bench.name, method.method, method.variant, 0, "train", k, k)
    out = run / "train" / f"batch{k}"
    run_batch(bench=bench, llm=llm, library_dir=run / "library" / f"v{k if library is None else library}", task_ids=tasks, spec=spec, out_dir=out,
              method=bind(method), history_dirs=tuple(run / "train" / f"batch{i}" for i in range(k)), client=client)
    return out


def sleep(bench, method, run: Path, k: int) -> dict:
    lib = Library.load(run / "library" / f"v{k}")
    rec = run / "induce" / f"v{k + 1}"
    ctx = InduceContext(lib, k, tuple(run / "train" / f"batch{i}" for i in range(k + 1)), run / "library",
                        run / "library" / f"v{k + 1}", rec, f"{bench.name}/{method.variant}/seed0", bench, method, llm,
                        requests)
    t0 = time.time()
    new = get_method(method.method).induce(ctx, client)
    wall = time.time() - t0
    new.write(ctx.out_dir)
    p, c, by, _ = tokens(rec / "llm_calls.parquet")
    cp, cc, _, cs = tokens(run / "train" / f"batch{k}" / "llm_calls.parquet", {"curriculum"})
    _, ac, _, _ = tokens(run / "train" / f"batch{k}" / "llm_calls.parquet", {"actor"})
    # Voyager's curriculum runs inside the rollout job: its LLM time is added to the sleep phase's.
    return {"wall_s": wall + cs, "prompt": p + cp, "completion": c + cc, "calls": by | ({"curriculum": a.episodes} if cp else {}),
            "skills": f"{len(lib.functions)}->{len(new.functions)}",
            "changed": new.source != lib.source or new.notes != lib.notes,
            "actor_out_per_rollout": ac / a.episodes}


rows = []
babyai = BenchmarkConfig("babyai", "babyai", llm_call_budget=a.call_budget)
crafter = BenchmarkConfig("crafter", "crafter", llm_call_budget=a.call_budget)
shared = work / "babyai_react"
Library(0).write(shared / "library" / "v0")
tasks = load_benchmark(babyai).sample_tasks("train", a.episodes * a.cycles, 42)
for k in range(a.cycles):  # ReAct's batches: the common input of the BabyAI methods' sleep phases
    play(babyai, MethodConfig("react", "react"), shared, k, tasks[k * a.episodes:(k + 1) * a.episodes], library=0)
for name in a.methods.split(","):
    method = MethodConfig(name, name)
    run = work / name
    if name == "voyager":
        bench = crafter
        Library(0).write(run / "library" / "v0")
        ctasks = load_benchmark(crafter).sample_tasks("train", a.episodes * a.cycles, 42)
    else:
        bench = babyai
        (run / "library").mkdir(parents=True)
        shutil.copytree(shared / "train", run / "train")
        Library(0).write(run / "library" / "v0")
    for k in range(a.cycles):
        if name == "voyager":
            play(bench, method, run, k, ctasks[k * a.episodes:(k + 1) * a.episodes])
        r = sleep(bench, method, run, k) | {"method": name, "cycle": k}
        rows.append(r)
        print(json.dumps(r), flush=True)
server.stop()

print(f"\n{'method':<12}{'cycle':>6}{'sleep wall s':>14}{'prompt tok':>12}{'output tok':>12}{'skills':>8}"
      f"{'changed':>9}{'actor out tok/rollout':>23}  calls by role")
for r in rows:
    print(f"{r['method']:<12}{r['cycle']:>6}{r['wall_s']:>14.1f}{r['prompt']:>12}{r['completion']:>12}{r['skills']:>8}"
          f"{str(r['changed']):>9}{r['actor_out_per_rollout']:>23.0f}  {r['calls']}")
shutil.rmtree(work, ignore_errors=True)
