"""Fixtures of the methods' tests: `run`, the recorded BabyAI batch their sleep phases read (test_methods,
test_reasoning_caps). Module-scoped: each test module records its own."""
from __future__ import annotations

import pytest

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import load_benchmark
from skillrepro.config import BenchmarkConfig, LLMConfig
from skillrepro.runner import run_batch
from skillrepro.skills import Library, parse_functions
from scripted import RoleFake
from sleep_phases import BABYAI, V0, gold_actions, scripted_actor


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Library v0 and one training batch of two BabyAI episodes: the first solved, the second failed."""
    root = tmp_path_factory.mktemp("run")
    Library(0, parse_functions(V0)).write(root / "library" / "v0")
    tasks = load_benchmark(BABYAI).sample_tasks("train", 2, 42)
    gold = gold_actions(tasks[0])
    spec = EpisodeSpec("babyai/m/seed0", "babyai", "asi", "asi", 0, "train", 0, 0)
    out = run_batch(bench=BenchmarkConfig("babyai", "babyai", llm_call_budget=len(gold) + 1), llm=LLMConfig(),
                    library_dir=root / "library" / "v0", task_ids=tasks, spec=spec, out_dir=root / "train" / "batch0",
                    client=RoleFake(actor=scripted_actor(tasks[0], gold)))
    assert [e.success for e in out.episodes] == [True, False]
    return {"root": root, "tasks": tasks, "gold": gold}
