"""`skillrepro rehearse` (its command: studies/speedrunner/cli.py): a paid SpeedRunner preset's DAG, end to end, against a local stand-in of its provider,
before anyone pays.

The preset keeps its request shapes (model, tools, protocol, caps, efforts, its context window); only the counts
shrink (one seed, a sleep phase after each of a few training rollouts, one test task, a short call budget, the
benchmarks asked for), and every request goes to `llm.standin.StandIn`, which refuses what the provider refuses,
with its own error bodies, and whose scripted writers grow each library to `library_size` functions by the last
sleep phase (the largest a method reaches in the paper: ASI's ~160 at the end of section 6.4), so the actor's
requests carry a paper-scale library. A rehearsal passes only when no request was refused, every episode ended by
one of the benchmark's own ends (terminations.csv flags none) and the target was written.

Methods whose libraries grow only from successful episodes (ASI) or by one skill a judged goal (Voyager) grow less
here: the stand-in plays no episode to success; the printed library sizes say what each run reached.
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

import yaml

from skillrepro.config import ConfigError
from skillrepro.llm.standin import PROVIDERS, StandIn

KEY_ENV = "SKILLREPRO_REHEARSAL_KEY"  # the stand-in takes any key; a real one is never read


@dataclass(frozen=True)
class Reduction:
    """What a rehearsal shrinks, and nothing else."""

    train_rollouts: int = 2  # with a sleep phase after each
    n_test: int = 1
    call_budget: int = 4  # actor calls an episode at most (each benchmark's own where smaller)
    benchmarks: tuple[str, ...] | None = None  # None: the preset's
    library_size: int = 160

    def describe(self) -> str:
        return (f"1 seed, {self.train_rollouts} training rollouts with a sleep phase after each, {self.n_test} test "
                f"task(s) at v0 and v{self.train_rollouts}, at most {self.call_budget} actor calls an episode, "
                f"benchmarks {', '.join(self.benchmarks) if self.benchmarks else 'all of the preset'}; stand-in "
                f"writers grow a library to {self.library_size} functions")


def reduced(preset: dict[str, Any], r: Reduction, url: str) -> dict[str, Any]:
    """The preset at the rehearsal's counts, its requests sent to `url`, priced with placeholder rates."""
    cfg = copy.deepcopy(preset)
    llm = cfg["llm"]
    llm.update(base_url=url, api_key_env=KEY_ENV, response_cache=False, max_dollars=None)
    cfg["pricing"] = {m: {"input": 1.0, "cached_input": 0.1, "output": 1.0}  # placeholders: a rehearsal pays nothing
                      for m in {llm["model"], *(cfg.get("pricing") or {})}}
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
    methods = {}
    for variant, m in (cfg.get("methods") or {}).items():
        m = dict(m)
        if m.get("benchmarks") is not None:
            m["benchmarks"] = [b for b in m["benchmarks"] if b in benchmarks]
            if not m["benchmarks"]:
                continue
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
    llm = preset["llm"]
    if llm["backend"] != "openai":
        raise ConfigError(f"rehearse: llm.backend {llm['backend']!r}: the stand-in rehearses API presets (openai); "
                          "a vLLM preset is rehearsed on the real engine (docs/cluster.md)")
    provider = PROVIDERS["openai"]  # every OpenAI-compatible endpoint is held to OpenAI's limits
    standin = StandIn(provider, int(llm.get("ctx_per_slot", 8192)),
                      skills_per_write=math.ceil(r.library_size / r.train_rollouts)).start()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "rehearsal.yaml"
    started = time.time()
    try:
        cfg_path.write_text(yaml.safe_dump(reduced(preset, r, standin.url), sort_keys=False))
        env = {k: v for k, v in os.environ.items() if k != "SKILLREPRO_LLM_URL"} | {KEY_ENV: "rehearsal"}
        with open(workdir / "rehearsal.log", "w") as log:
            run = subprocess.run([sys.executable, "-m", "snakemake", target, "--cores", str(cores), "--snakefile",
                                  str(snakefile.resolve()), "--directory", str(workdir.resolve()), "--configfile",
                                  str(cfg_path.resolve())], stdout=log, stderr=subprocess.STDOUT, env=env)
    finally:
        standin.stop()
    wall = time.time() - started
    return judge(workdir, target, run.returncode, standin, wall, r)


def judge(workdir: Path, target: str, returncode: int, standin: StandIn, wall_s: float, r: Reduction) -> Outcome:
    seen = standin.seen
    refused = Counter(s.refused for s in seen if s.refused)
    widest = max(seen, key=lambda s: s.tools, default=None)
    longest = max(seen, key=lambda s: s.prompt_tokens, default=None)
    lines = [f"reduced to: {r.describe()}",
             f"requests sent: {len(seen)} ({', '.join(f'{k} {n}' for k, n in sorted(Counter(s.role for s in seen).items()))})",
             f"refused: {sum(refused.values())}" + (f" ({', '.join(f'{k} x{n}' for k, n in refused.items())})" if refused else ""),
             f"largest request: {widest.tools if widest else 0} tools; {longest.prompt_tokens if longest else 0} "
             f"prompt tokens (estimated, {longest.role if longest else '-'})"]
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
    written = (workdir / target).exists()
    lines.append(f"snakemake exit {returncode}; {target} {'written' if written else 'NOT written'}; "
                 f"wall time {wall_s / 60:.1f} min; log {workdir / 'rehearsal.log'}")
    passed = returncode == 0 and not refused and not flagged and written and ends_file.exists()
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
