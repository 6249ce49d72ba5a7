"""Benchmarks, each in one module; `get_benchmark` is the only place that maps a name to its module."""
from __future__ import annotations

import importlib
from typing import Any

from skillrepro.benchmarks.base import ActionError, Benchmark, Env, Primitive, StepResult, TaskError, primitive
from skillrepro.config import BenchmarkConfig

# name -> "module:Class"; a module is imported only when its benchmark is used (heavy deps, Java).
BENCHMARKS = {
    "babyai": "skillrepro.benchmarks.babyai:BabyAIBenchmark",
    "scienceworld": "skillrepro.benchmarks.scienceworld:ScienceWorldBenchmark",
    "crafter": "skillrepro.benchmarks.crafter:CrafterBenchmark",
    "alfworld": "skillrepro.benchmarks.alfworld:AlfWorldBenchmark",
}


def get_benchmark(env: str, **options: Any) -> Benchmark:
    if env not in BENCHMARKS:
        raise TaskError(f"unknown benchmark env {env!r}; known: {', '.join(sorted(BENCHMARKS))}")
    module, cls = BENCHMARKS[env].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


def load_benchmark(bench: BenchmarkConfig) -> Benchmark:
    """The benchmark a config instance names, with its options."""
    return get_benchmark(bench.env, **bench.options)


def call_budget(bench: BenchmarkConfig) -> int:
    """Actor calls per episode: the instance's llm_call_budget, else the benchmark's own."""
    return bench.llm_call_budget or load_benchmark(bench).llm_call_budget


__all__ = ["ActionError", "Benchmark", "Env", "Primitive", "StepResult", "TaskError", "call_budget", "get_benchmark",
           "load_benchmark", "primitive"]
