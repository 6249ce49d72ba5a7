"""A real-model positive control for SkillScaffold's utility: on real skill-free Scouts, a card stating how
BabyAI's missions are solved against an irrelevant card of about the same length and against no card.

    python perf/utility_control.py [--model smollm2-135m] [--queries 8] [--scouts 3] [--call-budget 6] \
        [--variant grp] [--interval expanded] [--threads 1] [--expert] [--level go_to_obj]
    python perf/utility_control.py --run results/scaffold/babyai --call-budget N   # the Scouts of a scaffold run
    python perf/utility_control.py --play-only --level go_to_obj --model qwen2.5-coder-0.5b --call-budget 12 ...
        # the Scouts' success alone, beside random primitives' on the same tasks (is a level in the model's reach?)
    python perf/utility_control.py --play-only --alfworld pick_and_place --model qwen2.5-coder-0.5b --call-budget 30
        # the same on ALFWorld's generated games of one task type (random: one admissible command a step)

The Scouts are played here (skill-free, the pipeline's `play`, one sampling seed per Scout index as the Scout rule
uses) on the first --queries training tasks of --task-seed, or read from a scaffold run folder (its scouts/s*/ and
library/v0; --call-budget and --model must then be the run's, or the rebuilt skill-free prompt will differ from the
recorded one and scoring refuses). Each Scout is then scored under three contexts with the pipeline's
`score_contexts` (the CPU teacher-forced scorer on --model), and the utilities and the gate are the pipeline's
(`utilities_for_query`, `selection_for_query`, threshold 0), both cards being each query's candidates.

--expert adds to each query a Scout whose replies are BabyAI's own bot's moves (`control.play_expert_scouts`): planted
successes, since the shipped models' own Scouts seldom succeed and on failures alone the utility rewards any card
that makes the failed replies less likely. The queries are then the first --queries training tasks the bot solves
within --call-budget moves.

The cards are files a user can replace (--solution, --irrelevant; default perf/data/utility_control/): the
solution card states, in prose, what the reference library (src/skillrepro/resources/reference/babyai/) does; the
irrelevant one has the same headings and about as many characters (the lengths, in characters and in the scorer's
tokens, are printed). The embedded server is started here with --threads unless SKILLREPRO_LLM_URL names one
already serving --model.
"""
from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace
from pathlib import Path

from skillrepro.benchmarks import call_budget, load_benchmark
from skillrepro.benchmarks.babyai import LEVELS, bot_moves
from skillrepro.config import BenchmarkConfig, LLMConfig
from skillrepro.llm import servers
from skillrepro.studies.scaffold.cards import paper_card
from skillrepro.studies.scaffold.control import (IRRELEVANT, SOLUTION, control_rows, format_table, load_card,
                                                 play_expert_scouts, summarize)
from skillrepro.studies.scaffold.records import load_trajectories
from skillrepro.studies.scaffold.scoring import load_scorer
from skillrepro.studies.scaffold.settings import ScaffoldConfig

DATA = Path(__file__).resolve().parent / "data" / "utility_control"


def play_scouts(bench: BenchmarkConfig, llm: LLMConfig, n_queries: int, n_scouts: int, task_seed: int,
                workdir: Path, expert: bool = False) -> tuple[list[Path], Path]:
    """Scout i of every query, as the scaffold_scout rule plays it: skill-free, on an empty library; then
    with `expert`, one expert Scout per query (the tasks: the first the bot solves within the call budget)."""
    from skillrepro.skills import Library
    from skillrepro.studies.scaffold.rollouts import episode_variant, phase_seed, play

    library = workdir / "library" / "v0"
    Library(version=0, meta={"method": "skillscaffold"}).write(library)
    pool = load_benchmark(bench).sample_tasks("train", 200 if expert else n_queries, task_seed)
    level = bench.options.get("level", "pick_up_seq_go_to")
    tasks = [t for t in pool if not expert or bot_moves(t, call_budget(bench), level)][:n_queries]
    plan = [(t, "", episode_variant("", "scout")) for t in tasks]
    dirs = []
    for i in range(n_scouts):
        out = workdir / "scouts" / f"s{i}"
        play(bench=bench, llm=phase_seed(llm, "scout", i), library_dir=library, plan=plan,
             run_id="utility_control", cycle=0, out_dir=out)
        dirs.append(out)
    if expert:
        dirs.append(play_expert_scouts(bench, llm, library, tasks, workdir / "scouts" / "expert"))
    return dirs, library


def random_success(bench: BenchmarkConfig, tasks: list[str], episodes_per_task: int) -> tuple[int, int]:
    """(successes, episodes) of uniformly random moves on `tasks`, within the call budget: the floor a policy that
    reads the view should clear. BabyAI: a random primitive; ALFWorld: a random admissible command."""
    env_bench, rng, wins = load_benchmark(bench), random.Random(0), 0
    names = [p.name for p in env_bench.primitives() if p.advances]
    for task in tasks:
        for _ in range(episodes_per_task):
            env = env_bench.make(task)
            env.reset()
            for _ in range(call_budget(bench)):
                if env.done:
                    break
                if bench.env == "alfworld":
                    env.step("act", [rng.choice(env.admissible_actions)])
                else:
                    env.step(rng.choice(names))
            wins += env.success()
            env.release()
    return wins, len(tasks) * episodes_per_task


def print_success(scouts: list, bench: BenchmarkConfig, a: argparse.Namespace) -> None:
    tasks = sorted({t.task_id for t in scouts})
    wins, n = sum(t.success for t in scouts), len(scouts)
    r_wins, r_n = random_success(bench, tasks, 5 if a.alfworld else 25)
    where = f"alfworld {a.alfworld}" if a.alfworld else f"level {a.level}"
    print(f"model {a.model}, {where}, temperature {a.temperature}, history "
          f"{a.history_window or 'all'}, call budget {a.call_budget}: Scouts solved {wins} of {n} episodes on "
          f"{len(tasks)} tasks; random moves {r_wins} of {r_n} on the same tasks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="plays the Scouts and scores them")
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--scouts", type=int, default=3, help="Scouts per query")
    ap.add_argument("--call-budget", type=int, default=6, help="actor calls per Scout episode")
    ap.add_argument("--max-tokens", type=int, default=48, help="the actor's reply cap")
    ap.add_argument("--task-seed", type=int, default=42)
    ap.add_argument("--seed", type=int, default=1, help="sampling seed of Scout 0 (Scout i: the Scout rule's offset)")
    ap.add_argument("--run", help="a scaffold run's benchmark folder (results/scaffold/babyai): read its Scouts")
    ap.add_argument("--level", default="pick_up_seq_go_to", choices=list(LEVELS),
                    help="BabyAI's level (benchmark option `level`); go_to levels default to the go-to cards")
    ap.add_argument("--alfworld", metavar="TASK_TYPE", help="with --play-only: ALFWorld's generated games of this "
                                                             "task type (benchmark option task_types) instead of BabyAI")
    ap.add_argument("--solution", help="default: data/utility_control/babyai_solution.md (babyai_go_to_... on a "
                                       "go_to level)")
    ap.add_argument("--irrelevant", help="default: the irrelevant card of the same length as the solution's")
    ap.add_argument("--variant", default="grp", choices=["grp", "anc"])
    ap.add_argument("--interval", default="expanded", choices=["expanded", "percentile", "t"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--expert", action="store_true", help="one Scout per query playing BabyAI's bot: a planted success")
    ap.add_argument("--temperature", type=float, default=0.7, help="the Scouts' sampling temperature")
    ap.add_argument("--tool-calling", default="text", choices=["text", "constrained"],
                    help="the Scouts' reply protocol (llm.tool_calling): constrained decodes one JSON call of a listed tool")
    ap.add_argument("--history-window", type=int, help="the actor sees its last N steps (default: all of them)")
    ap.add_argument("--play-only", action="store_true",
                    help="play the Scouts and print their success beside random moves' on the same tasks; no scoring")
    ap.add_argument("--workdir", default="/tmp/skillrepro_utility_control")
    a = ap.parse_args()
    if a.alfworld and not a.play_only:
        ap.error("--alfworld has no cards yet: give --play-only")

    cards = "babyai" if a.level == "pick_up_seq_go_to" else "babyai_go_to"
    a.solution = a.solution or str(DATA / f"{cards}_solution.md")
    a.irrelevant = a.irrelevant or str(DATA / f"{cards}_irrelevant.md")
    bench = (BenchmarkConfig("alfworld", "alfworld", a.call_budget, options={"task_types": [a.alfworld]},
                             history_window=a.history_window) if a.alfworld else
             BenchmarkConfig("babyai", "babyai", a.call_budget, options={"level": a.level},
                             history_window=a.history_window))
    llm = LLMConfig(model=a.model, max_tokens=a.max_tokens, slots=1, ctx_per_slot=8192, seed=a.seed,
                    threads=a.threads, tool_calling=a.tool_calling, temperature=a.temperature)
    fmt = paper_card("babyai")
    solution = load_card(a.solution, fmt, SOLUTION, variant=a.variant)
    irrelevant = load_card(a.irrelevant, fmt, IRRELEVANT, variant=a.variant)
    started = time.perf_counter()
    if a.run:
        run = Path(a.run)
        scout_dirs, library = sorted((run / "scouts").glob("s*")), run / "library" / "v0"
    else:
        workdir = Path(a.workdir)
        url = os.environ.get(servers.URL_ENV)
        server = None if url else servers.start(llm, workdir=workdir)
        try:
            llm_play = replace(llm, base_url=url or server.url)
            scout_dirs, library = play_scouts(bench, llm_play, a.queries, a.scouts, a.task_seed, workdir, a.expert)
        finally:
            if server:
                server.stop()
    played = time.perf_counter() - started
    scouts = load_trajectories(scout_dirs)
    if a.play_only:
        print_success(scouts, bench, a)
        return

    scorer = load_scorer(ScaffoldConfig(benchmarks=("babyai",)), llm)
    tok = scorer.tokenizer
    rows = control_rows(scorer, scouts, [solution, irrelevant], bench=bench, llm=llm, library_dir=library,
                        variant=a.variant)
    scored = time.perf_counter() - started - played
    s = summarize(rows, a.interval)
    n_success = sum(t.success for t in scouts)
    n_expert = len(rows) if a.expert else 0
    print(f"model {a.model}; {len(scouts)} Scouts ({n_success} successful, {n_expert} of them the bot's) on "
          f"{len(rows)} BabyAI {a.level} queries; call budget {a.call_budget}; utility {a.variant}; scorer {scorer.name}")
    print(f"cards: solution {len(solution.card)} characters, {len(tok(solution.card)['input_ids'])} tokens; "
          f"irrelevant {len(irrelevant.card)} characters, {len(tok(irrelevant.card)['input_ids'])} tokens")
    print(f"Scouts {'read from ' + a.run if a.run else f'played in {played:.0f} s'}; three contexts scored in "
          f"{scored:.0f} s")
    print()
    print(format_table(rows, s))


if __name__ == "__main__":
    main()
