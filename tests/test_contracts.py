"""Contracts over the registries, Gymnasium-style: one check, parametrized over every registered entry, so a
new benchmark or method is tested without editing a list here.

Every benchmark passes `check_benchmark` (a missing optional dependency fails it, with the extra to install);
every method plays one training batch with its own hooks and runs one sleep phase on a scripted LLM, and the
library it returns is written and loads back the same.
"""
from __future__ import annotations

import inspect

import pytest

from skillrepro.agent import EpisodeSpec
from skillrepro.benchmarks import ContractError, StepResult, check_benchmark, load_benchmark, names
from skillrepro.config import BenchmarkConfig, LLMConfig, MethodConfig
from skillrepro.methods import InduceContext, registry
from skillrepro.runner import run_batch
from skillrepro.skills import Library
from scripted import ScriptedClient

# One reply every method can read something from: OPO's notes, a critic's verdict, a function in a code
# fence (ASI, Voyager's skill writer) behind SpeedRunner's write_function action, and an actor's action.
REPLY = ('<notes>Face the object before you pick it up.</notes>\nSuccess: yes\nGoal: explore\n'
         'Action: write_function(public=True)\n```python\ndef look_twice():\n    """Look around twice."""\n'
         '    noop()\n    return noop()\n```')


# ------------------------------------------------------------------------------------------ benchmarks
@pytest.mark.parametrize("env", names())
def test_every_benchmark_keeps_the_contract(env):
    check_benchmark(env)


def test_the_registry_is_the_benchmark_modules():
    """Shipped benchmarks are found by their files; the interface, the CLI and helpers are not benchmarks."""
    assert set(names()) >= {"alfworld", "babyai", "crafter", "scienceworld"}
    assert not {"base", "cli", "_alfworld_gen"} & set(names())


def test_the_contract_sees_a_broken_benchmark(monkeypatch):
    """A benchmark whose splits overlap, or whose step returns no StepResult, fails the contract by name."""
    from skillrepro.benchmarks import babyai

    monkeypatch.setattr(babyai.BabyAIBenchmark, "_pools", lambda self, seed: (list(range(200)), list(range(30))))
    with pytest.raises(ContractError, match=r"'babyai': task id\(s\) .* are in both splits"):
        check_benchmark("babyai")
    monkeypatch.undo()
    monkeypatch.setattr(babyai.BabyAIEnv, "_apply", lambda self, name, args: StepResult(None))
    with pytest.raises(ContractError, match="did not return a StepResult with observation text"):
        check_benchmark("babyai")


def test_a_module_that_does_not_import_fails_the_contract_naming_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_minigrid(name, *args, **kwargs):
        if name.startswith("minigrid"):
            raise ModuleNotFoundError("No module named 'minigrid'")
        return real(name, *args, **kwargs)

    monkeypatch.delitem(__import__("sys").modules, "skillrepro.benchmarks.babyai")
    monkeypatch.setattr(builtins, "__import__", no_minigrid)
    with pytest.raises(ContractError, match=r"'babyai': its module does not import .*minigrid.*\[test\]"):
        check_benchmark("babyai")


# ------------------------------------------------------------------------------------------ methods
def _bench_for(method) -> BenchmarkConfig:
    """A benchmark the method runs on by default (BabyAI where it may)."""
    env = "babyai" if method.envs is None or "babyai" in method.envs else method.envs[0]
    return BenchmarkConfig(name=env, env=env, llm_call_budget=2)


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_method_runs_one_cycle_and_returns_a_library_that_loads(name, tmp_path):
    method = registry()[name]
    bench = _bench_for(method)
    options = method.parse_options({}, name)
    v0 = method.initial(bench, options)
    lib_root = tmp_path / "library"
    v0.write(lib_root / "v0")
    client = ScriptedClient([REPLY])
    batch = tmp_path / "train" / "batch0"
    spec = EpisodeSpec(f"{bench.name}/{name}/seed0", bench.name, name, name, 0, "train", 0, 0)
    cfg = MethodConfig(name, name, {})
    tasks = load_benchmark(bench).sample_tasks("train", 1, 0)
    out = run_batch(bench=bench, llm=LLMConfig(), library_dir=lib_root / "v0", task_ids=tasks, spec=spec,
                    out_dir=batch, method=cfg, client=client, wall_s=120)
    assert len(out.episodes) == 1
    ctx = InduceContext(library=Library.load(lib_root / "v0"), cycle=0, history_dirs=(batch,), library_root=lib_root,
                        out_dir=lib_root / "v1", record_dir=tmp_path / "induce" / "v1", run_id=spec.run_id,
                        bench=bench, method=cfg, llm=LLMConfig(ctx_per_slot=8192), request_budget=2)
    asked = len(client.requests)
    # a method that asks a model takes the client as `client` (the recipe passes the run's server)
    takes_client = "client" in inspect.signature(method.induce).parameters
    v1 = method.induce(ctx, client=client) if takes_client else method.induce(ctx)
    assert isinstance(v1, Library) and v1.version == 1
    if not takes_client:
        assert len(client.requests) == asked  # nothing else reaches the scripted model
    v1.write(ctx.out_dir)
    loaded = Library.load(ctx.out_dir)
    assert (loaded.version, loaded.notes, loaded.functions) == (1, v1.notes, v1.functions)
