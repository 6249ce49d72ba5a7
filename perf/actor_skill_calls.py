"""How often the actor's first reply calls the reference library's skill, per actor interface.

One request per BabyAI test task (the opening prompt of an episode, as the runner builds it) for each
interface: the text, native or constrained protocol (llm.tool_calling), with or without the skill reminder
(actor.restate_skills). It
prints, per interface, the replies that called `solve_mission` and those that passed it the mission text.
The "positive control" figures (docs/results.md) come from this script; sampling at the configured temperature
makes single runs of 8 tasks swing by a few calls.

    python perf/actor_skill_calls.py [--model qwen2.5-coder-0.5b] [--tasks 8] [--temperature 0.7]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from skillrepro.agent import Actor, Prompts, primitive_tools, skill_tools
from skillrepro.benchmarks import load_benchmark
from skillrepro.config import ActorConfig, BenchmarkConfig, LLMConfig
from skillrepro.llm import servers
from skillrepro.llm.client import LLMClient
from skillrepro.methods import get_method
from skillrepro.skills.isolation import SandboxPolicy

INTERFACES = {  # name -> (tool calling, restate skills)
    "text": ("text", False), "text+reminder": ("text", True),
    "native": ("native", False), "native+reminder": ("native", True),
    "constrained": ("constrained", False), "constrained+reminder": ("constrained", True),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7)
    args = ap.parse_args()
    bench = BenchmarkConfig("babyai", "babyai", llm_call_budget=12)
    ref = get_method("reference")
    library = ref.initial(bench, ref.parse_options({}, "reference"))
    benchmark = load_benchmark(bench)
    tasks = benchmark.sample_tasks("test", args.tasks, 42)
    llm = LLMConfig(model=args.model, max_tokens=96, slots=1, temperature=args.temperature)
    server = servers.start(llm, workdir=Path(tempfile.mkdtemp()))
    try:
        client = LLMClient(llm, server.url)
        print(f"{'interface':<22} {'skill calls':>11} {'with the mission':>17}   of {len(tasks)} first replies ({args.model})")
        for name, (calling, restate) in INTERFACES.items():
            prompts = Prompts.configured(ActorConfig(restate_skills=restate, stop=("}\n{", "},\n{") if calling != "text" else None))
            calls = with_mission = 0
            for i, task in enumerate(tasks):
                env = benchmark.make(task)
                opening = env.reset()
                tools = primitive_tools(env) + skill_tools(library, env, lambda _c: None, SandboxPolicy())
                actor = Actor(client, benchmark.describe(), 12, tool_calling=calling, prompts=prompts)
                reply = actor.request(actor.opening(tools, opening), tools, f"probe/{name}", seed=i)
                action = actor.read(reply, [t.name for t in tools])
                if action.name == "solve_mission":
                    calls += 1
                    with_mission += bool(action.args) and env.mission.lower() in str(action.args[0]).lower()
                env.release()
            print(f"{name:<22} {calls:>11} {with_mission:>17}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
