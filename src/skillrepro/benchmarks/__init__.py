"""Benchmarks, one module each; this package is their registry and holds the contract every one passes.

A benchmark is the module of its name in this folder (`babyai.py` is env `babyai`), defining one `Benchmark`
subclass whose `name` is that name, and its prompt files `prompts/env_<name>_<choice>.txt`. The folder is the
one list of names: a module is found by its file, and imported only when its benchmark is used (heavy
dependencies, a JVM). Modules that are not benchmarks are the interface (`base`), the CLI and helpers whose
name starts with "_".
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import pkgutil
from typing import Any

from skillrepro.benchmarks.base import (ActionError, Benchmark, Env, Primitive, StepResult, TaskError, primitive,
                                        primitive_returns, prompt_path)
from skillrepro.config import BenchmarkConfig

_NOT_BENCHMARKS = ("base", "cli")


def names() -> tuple[str, ...]:
    """Every benchmark env name, read from the files of this folder (nothing is imported)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.name.startswith("_") and m.name not in _NOT_BENCHMARKS))


def benchmark_class(env: str) -> type[Benchmark]:
    """The Benchmark subclass of env `env` (its module imported, nothing constructed)."""
    if env not in names():
        raise TaskError(f"unknown benchmark env {env!r}; known: {', '.join(names())}")
    module = importlib.import_module(f"{__name__}.{env}")
    found = [c for c in vars(module).values()
             if isinstance(c, type) and issubclass(c, Benchmark) and getattr(c, "name", None) == env]
    if len(found) != 1:
        raise TypeError(f"benchmark module {module.__name__} must define one Benchmark subclass with name = {env!r}, "
                        f"found {len(found)}")
    missing = [p for p in found[0].requires if importlib.util.find_spec(p) is None]
    if missing:  # `pip install -e .` alone brings BabyAI's package only
        raise TaskError(f"benchmark env {env!r} needs the package(s) {', '.join(missing)}, not installed: "
                        "pip install -e '.[benchmarks]' (pyproject's extra; ScienceWorld also needs Java 17)")
    return found[0]


def get_benchmark(env: str, **options: Any) -> Benchmark:
    return benchmark_class(env)(**options)


def load_benchmark(bench: BenchmarkConfig) -> Benchmark:
    """The benchmark a config instance names, with its options."""
    return get_benchmark(bench.env, **bench.options)


def call_budget(bench: BenchmarkConfig) -> int:
    """Actor calls per episode: the instance's llm_call_budget, else the benchmark's own."""
    return bench.llm_call_budget or load_benchmark(bench).llm_call_budget


# ------------------------------------------------------------------------------------------ the contract
_PLACEHOLDER = {"str": "", "int": 0, "float": 0.0, "bool": False}  # the types tool schemas and skill calls pass
SAMPLE_CAP = 1000  # a pool larger than this (Crafter's 2**30 seeds) is checked on this many ids


class ContractError(AssertionError):
    """A benchmark that breaks the interface its callers rely on; the message says which part."""


def check_benchmark(env: str, **options: Any) -> None:
    """Raise ContractError unless benchmark `env` (with `options`) keeps the interface's promises: its module
    imports (its optional dependencies are installed) and names itself; it describes itself and lists
    well-formed primitives; its shipped prompt files exist; both splits draw distinct, repeatable ids, as many
    as `pool_size` says (and no more), and never the same id in both; a test task resets to observation text,
    and one primitive steps to a StepResult while unknown names and wrong arity raise ActionError."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ContractError(f"benchmark {env!r}: {what}")

    try:
        cls = benchmark_class(env)
    except (ImportError, TaskError) as e:
        raise ContractError(f"benchmark {env!r}: its module does not import ({e}); its dependencies are in "
                            "pyproject's `benchmarks` extra (pip install -e '.[test]')") from e
    bench = cls(**options)
    need(bench.name == env and bench.env_class.benchmark == env,
         f"Benchmark.name and Env.benchmark must be {env!r}, not {bench.name!r} and {bench.env_class.benchmark!r}")
    need(isinstance(bench.describe(), str) and bench.describe().strip() != "", "describe() is no text")
    need(isinstance(bench.llm_call_budget, int) and bench.llm_call_budget >= 1, "llm_call_budget is not an int >= 1")
    need(bench.headline in ("success", "progression"), f"headline {bench.headline!r} is not success or progression")
    for choice in getattr(cls, "PROMPTS", ()):
        need(prompt_path(env, choice).is_file(), f"shipped prompt {choice!r} has no file {prompt_path(env, choice)}")

    prims = bench.primitives()
    need(len(prims) > 0, "no @primitive actions")
    need(len({p.name for p in prims}) == len(prims), "two primitives share a name")
    for p in prims:
        need(p.name.isidentifier() and not p.name.startswith("_"), f"primitive {p.name!r} is not a public name")
        need(p.doc.strip() != "", f"primitive {p.name} has no docstring (the actor reads it)")
        need(all(t in _PLACEHOLDER for _, t in p.params), f"primitive {p.signature}: parameter types must be "
             f"among {', '.join(_PLACEHOLDER)}")
        need(p.json_schema()["function"]["name"] == p.name, f"primitive {p.name}: bad tool schema")

    pools = {}
    for split in ("train", "test"):
        size = bench.pool_size(split)
        need(size is None or (isinstance(size, int) and size >= 1), f"pool_size({split!r}) = {size!r}")
        n = min(size, SAMPLE_CAP) if size is not None else 20  # unknown size: a few ids
        ids = bench.sample_tasks(split, n, 0)
        need(len(ids) == n and len(set(ids)) == n, f"sample_tasks({split!r}, {n}) gave {len(set(ids))} distinct "
             f"of {len(ids)} ids")
        need(all(isinstance(i, str) for i in ids), f"{split} task ids are not strings")
        need(bench.sample_tasks(split, n, 0) == ids, f"sample_tasks({split!r}) is not repeatable with one seed")
        if size is not None and size <= SAMPLE_CAP:
            try:
                bench.sample_tasks(split, size + 1, 0)
            except TaskError:
                pass
            else:
                need(False, f"sample_tasks({split!r}, {size + 1}) gave more than pool_size = {size} tasks")
        pools[split] = ids
    shared = set(pools["train"]) & set(pools["test"])
    need(not shared, f"task id(s) {sorted(shared)[:3]} are in both splits")

    env_ = bench.make(pools["test"][0])
    try:
        opening = env_.reset()
        need(isinstance(opening, str) and opening.strip() != "", "reset() gave no observation text")
        # a primitive without arguments where there is one (a look, a turn, a no-op), else the first with
        # placeholder values: the contract is about the result's form, not what the action does
        first = next((p for p in prims if not p.params), prims[0])
        result = env_.step(first.name, [_PLACEHOLDER[t] for _, t in first.params])
        need(isinstance(result, StepResult) and isinstance(result.observation, str),
             f"step({first.name!r}) did not return a StepResult with observation text")
        need(isinstance(result.reward, float) and math.isfinite(result.reward) and isinstance(result.done, bool),
             f"step({first.name!r}): reward must be a finite float and done a bool, got {result.reward!r}, "
             f"{result.done!r}")
        need(0.0 <= env_.score() <= 1.0 and isinstance(env_.success(), bool), "score() not in [0, 1] or success() "
             "not a bool")
        for name, args in (("no_such_primitive", []),
                           (first.name, [_PLACEHOLDER[t] for _, t in first.params] + ["an extra argument"])):
            try:
                env_.step(name, args)
            except ActionError:
                continue
            need(False, f"step({name!r}, {args}) did not raise ActionError")
    finally:
        env_.release()


__all__ = ["ActionError", "Benchmark", "ContractError", "Env", "Primitive", "StepResult", "TaskError",
           "benchmark_class", "call_budget", "check_benchmark", "get_benchmark", "load_benchmark", "names",
           "primitive", "primitive_returns", "prompt_path"]
