"""Methods: how a library (skills, notes) changes between rollout batches.

A learner module exposes `induce(ctx: InduceContext) -> Library`, returning version k+1 built from
version k and the run's history. It never sees test episodes: `history_dirs` holds training batches only.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.skills import Library

LEARNERS = {"react": "skillrepro.learners.react", "speedrunner": "skillrepro.learners.speedrunner"}


@dataclass(frozen=True)
class InduceContext:
    library: Library  # version k
    cycle: int  # k
    history_dirs: tuple[Path, ...]  # training batch folders of cycles <= k (episodes/steps/llm_calls/skill_calls.parquet)
    library_root: Path  # folder holding v0..vk, for learners that compare versions
    out_dir: Path  # where v{k+1} will be written; learners may keep scratch files beside it
    run_id: str
    bench: BenchmarkConfig
    method: MethodConfig
    llm: LLMConfig
    request_budget: int


def get_learner(name: str) -> ModuleType:
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; known: {', '.join(LEARNERS)}")
    return importlib.import_module(LEARNERS[name])
