"""Contracts over the registries, Gymnasium-style: one check, parametrized over every registered entry, so a
new benchmark or method is tested without editing a list here.

Every benchmark passes `check_benchmark` (a missing optional dependency fails it, with the extra to install);
every method plays one training batch with its own hooks and runs one sleep phase on a scripted LLM, and the
library it returns is written and loads back the same.
"""
from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest
import yaml

from skillrepro import benchmarks
from skillrepro.agent import EpisodeSpec
from skillrepro.studies.speedrunner.analysis import study_of
from skillrepro.studies.speedrunner.settings import speedrunner_settings
from skillrepro.benchmarks import base
from skillrepro.benchmarks import ContractError, StepResult, check_benchmark, load_benchmark, names
from skillrepro.check import check_config
from skillrepro.config import BenchmarkConfig, ConfigError, LLMConfig, MethodConfig
from skillrepro.methods import InduceContext, bind, registry
from skillrepro.runner import run_batch
from skillrepro.skills import Library
from scripted import ScriptedClient, methods_config

ROOT = Path(__file__).resolve().parents[1]

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
                    out_dir=batch, method=bind(cfg), client=client, wall_s=120)
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


# ------------------------------------------------------------------------------------------ README
def test_the_readme_example_benchmark_works_as_written(tmp_path, monkeypatch):
    """docs/methods.md's "Add a benchmark": its module saved in a benchmarks folder
    and its prompt file in a prompts folder in tmp_path (the package searches that benchmarks folder too; the
    prompts folder is tmp_path's), then the one config entry. The registry finds it, it passes the contract, the
    config check accepts it and reaches its pools, the tables know its headline, and a scripted actor that adds
    one until the target plays a test task to success."""
    doc = (ROOT / "docs" / "methods.md").read_text()
    section = doc.split("## Add a benchmark", 1)[1].split("\n## ", 1)[0]
    module = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    prompt = re.search(r"```text\n(.*?)```", section, re.DOTALL).group(1)
    entry = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.DOTALL).group(1))
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "counter.py").write_text(module)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "env_counter_paper.txt").write_text(prompt)
    monkeypatch.setattr(benchmarks, "__path__", [*benchmarks.__path__, str(tmp_path / "benchmarks")])
    monkeypatch.setattr(base, "PROMPTS", tmp_path / "prompts")
    try:
        assert "counter" in names()
        check_benchmark("counter")

        cfg = methods_config(react={"method": "react"})
        cfg["benchmarks"] = entry["benchmarks"]
        checked = check_config(cfg, check_files=False)
        assert study_of(speedrunner_settings(checked), "readme").headline("counter") == "success"
        with pytest.raises(ConfigError, match=r"protocol.n_test: 21 test tasks asked for, but benchmark counter "
                                              r"\(counter\) has 20"):
            check_config({**cfg, "protocol": {**cfg["protocol"], "n_test": 21}}, check_files=False)

        bench = BenchmarkConfig("counter", "counter", llm_call_budget=32)  # targets are 2-31
        task = load_benchmark(bench).sample_tasks("test", 1, 0)
        spec = EpisodeSpec("counter/react/seed0", "counter", "react", "react", 0, "test", 0, 0)
        Library(0).write(tmp_path / "library" / "v0")
        out = run_batch(bench=bench, llm=LLMConfig(), library_dir=tmp_path / "library" / "v0", task_ids=task,
                        spec=spec, out_dir=tmp_path / "eval", client=ScriptedClient(["Action: add_one()"]))
        assert [e.success for e in out.episodes] == [True]
        assert out.episodes[0].n_steps == 2 + int(task[0]) % 30
    finally:  # the example leaves no module behind for the other tests
        sys.modules.pop("skillrepro.benchmarks.counter", None)
        vars(benchmarks).pop("counter", None)
