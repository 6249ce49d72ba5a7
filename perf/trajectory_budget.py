"""What the in-context methods (OPO, ASI, Voyager, SpeedRunner without its interpreter) are shown of a
training batch: rendered episodes against each preset's trajectory budget (budgets.trajectory_tokens).

    python perf/trajectory_budget.py [--episodes 3] [--crafter-calls 2000]

Episodes are played without an LLM, as the records would hold them (skillrepro.methods.common.Trace):
- BabyAI: uniformly random primitives for the benchmark's 30 calls (C.3) or until the episode ends;
- ScienceWorld (electricity): 100 calls (B.3) of look_around, inventory or go(<a room>), uniformly
  (focus_on is never called: a wrong focus ends the episode);
- Crafter (the paper's observation mode, D.2): get_current_observation() then a random game-advancing
  primitive, for up to `--crafter-calls` actor calls (D.4: 2,000) or until the episode ends (death).
Prints each episode's characters and estimated tokens (3 characters a token, the methods' estimate), then
per preset the resolved budget and how many of a 10-episode batch of such episodes a sleep phase shows whole.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

from skillrepro.benchmarks import get_benchmark
from skillrepro.check import check_config
from skillrepro.config import load_yaml
from skillrepro.methods.common import Trace, estimate_tokens, show_traces
from skillrepro.studies.speedrunner.settings import trajectory_tokens

ROOT = Path(__file__).resolve().parents[1]
PRESETS = {"config.yaml": ["config.yaml"], "configs/paper.yaml": ["configs/paper.yaml"],
           "paper + paper-vllm": ["configs/paper.yaml", "configs/paper-vllm.yaml"],
           **{f"configs/{p.name}": [f"configs/{p.name}"] for p in sorted((ROOT / "configs").glob("cross-model-*.yaml"))}}


ROOMS = ["kitchen", "hallway", "workshop", "outside", "art studio", "greenhouse", "bedroom", "living room",
         "bathroom", "foundry"]


def play(env_name: str, seed: int, calls: int) -> Trace:
    bench = get_benchmark(env_name, **({"family": "electricity"} if env_name == "scienceworld" else {}))
    task = bench.sample_tasks("train", 1, seed)[0]
    env = bench.make(task)
    rng = random.Random(seed)
    acts = [p for p in bench.primitives() if p.advances]
    steps = []
    try:
        opening = env.reset()
        while not env.done and len(steps) < calls:
            if env_name == "crafter" and len(steps) % 2 == 0:
                name, args = "get_current_observation", []
            elif env_name == "scienceworld":
                name = rng.choice(["look_around", "inventory", "go"])
                args = [rng.choice(ROOMS)] if name == "go" else []
            else:
                p = rng.choice(acts)
                name, args = p.name, ["ball"] * len(p.params)
            steps.append((name, args, env.step(name, args).observation))
        return Trace(f"{env_name}{seed}", task, 0, bool(env.success()), env.score(), opening, steps)
    finally:
        env.release()


def preset(files: list[str]) -> dict:
    merged = load_yaml(ROOT / "config.yaml") if files[0] != "config.yaml" else {}
    for f in files:  # a --configfile replaces config.yaml; a second one merges into the first
        for k, v in load_yaml(ROOT / f).items():
            merged[k] = {**merged[k], **v} if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return check_config(merged, check_files=False, billing=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--crafter-calls", type=int, default=2000)
    a = ap.parse_args()
    played = {"babyai": [play("babyai", s, 30) for s in range(a.episodes)],
              "scienceworld": [play("scienceworld", s, 100) for s in range(a.episodes)],
              "crafter": [play("crafter", s, a.crafter_calls) for s in range(a.episodes)]}
    for env_name, traces in played.items():
        for t in traces:
            text = t.render()
            print(f"{env_name} {t.task_id}: {len(t.steps)} steps, {len(text):,} characters, "
                  f"{estimate_tokens(text):,} estimated tokens")
    for name, files in PRESETS.items():
        config = preset(files)
        budget = trajectory_tokens(config)
        print(f"\n{name}: llm.ctx_per_slot {config['llm']['ctx_per_slot']:,}; budget {budget:,} estimated tokens")
        for env_name, traces in played.items():
            s = show_traces((traces * 10)[:10], budget)  # a sleep phase's 10 episodes
            print(f"  {env_name}: {s.episodes_whole}/10 episodes whole ({s.observations_whole} observations), "
                  f"{s.episodes_cut} cut, {s.episodes_dropped} dropped")


if __name__ == "__main__":
    main()
