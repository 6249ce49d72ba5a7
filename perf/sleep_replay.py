"""Replay one SpeedRunner sleep phase on a run's recorded history, once per setting, and print what each
setting's inducer wrote: functions written, refused (and why), kept, and what the phase cost.

The run folder is one the workflow made (the default run's: results/runs/babyai/speedrunner/seed0); its
library v{k-1} and training batches 0..k-1 are read, nothing in it is written. Each setting is a list of
overrides of the config's `llm` section, its `inducer` section (`inducer.example_steps=6`) or the variant's
method options (`tool_calling=text`, `model=qwen2.5-coder-1.5b`, `interpreter=false`), run on a server of
its own model (inducer.model's where one is set); `benchmark.<option>=value` sets one of the benchmark's
options (`benchmark.current_observation=true`).
    python perf/sleep_replay.py results/runs/babyai/speedrunner/seed0 --k 1 \
        --setting tool_calling=text --setting tool_calling=constrained
"""
import argparse
import collections
import json
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

import yaml

from skillrepro import config as cfg
from skillrepro.check import check_config
from skillrepro.llm import servers
from skillrepro.llm.client import LLMClient
from skillrepro.methods import InduceContext, get_method
from skillrepro.methods.speedrunner_gate import refusal_kind
from skillrepro.studies.speedrunner.paths import training_history
from skillrepro.skills import Library
from skillrepro.studies.speedrunner.settings import inducer_limits, methods, trajectory_tokens

ap = argparse.ArgumentParser()
ap.add_argument("run", type=Path, help="a run folder: results/runs/<bench>/<variant>/seed<n>")
ap.add_argument("--k", type=int, default=1, help="replay the sleep phase that made library v{k}")
ap.add_argument("--config", type=Path, default=Path("config.yaml"), help="the run's config")
ap.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                help="overrides of llm.* or the method's options; repeat for more settings (none: the config's)")
ap.add_argument("--repeats", type=int, default=1, help="sessions per setting, each with another llm.seed")
a = ap.parse_args()

config = check_config(cfg.load_yaml(a.config))
bench_name, variant = a.run.parts[-3], a.run.parts[-2]
bench = next(b for b in cfg.benchmarks(config) if b.name == bench_name)
method = next(m for m in methods(config) if m.variant == variant)
previous = a.run / "library" / f"v{a.k - 1}"
history = training_history(previous, a.k)
llm_keys = {f.name for f in fields(cfg.LLMConfig)}


def parse(setting: str) -> tuple[dict, dict, dict, dict]:
    """A setting's overrides of llm.*, of the config's inducer section (keys `inducer.<name>`), of the method's
    options and of the benchmark's options (keys `benchmark.<option>`)."""
    llm, inducer, options, bench_options = {}, {}, {}, {}
    for item in filter(None, setting.split(",")):
        key, _, value = item.partition("=")
        if key.startswith("benchmark."):
            bench_options[key.removeprefix("benchmark.")] = yaml.safe_load(value)
        elif key.startswith("inducer."):
            inducer[key.removeprefix("inducer.")] = yaml.safe_load(value)
        elif key.startswith("llm."):
            llm[key.removeprefix("llm.")] = yaml.safe_load(value)
        else:
            (llm if key in llm_keys else options)[key] = yaml.safe_load(value)
    return llm, inducer, options, bench_options


rows = []
for setting in a.setting or [""]:
    over_llm, over_inducer, over_options, over_bench = parse(setting)
    limits = replace(inducer_limits(config), **over_inducer)
    base = limits.sleep_llm(replace(cfg.llm_config(config), **over_llm))
    work = Path(tempfile.mkdtemp(prefix="sleep_replay."))
    server = servers.start(base, workdir=work)
    try:
        for r in range(a.repeats):
            llm = replace(base, seed=base.seed + 1000 * r)
            record = work / f"induce{r}"
            ctx = InduceContext(
                library=Library.load(previous), cycle=a.k - 1, history_dirs=history, library_root=previous.parent,
                out_dir=work / f"v{a.k}", record_dir=record, run_id=f"replay/{variant}",
                bench=replace(bench, options={**bench.options, **over_bench}),
                method=replace(method, options={**(method.options or {}), **over_options}), llm=llm,
                request_budget=config["budgets"]["inducer_requests"], trajectory_tokens=trajectory_tokens(config),
                limits=limits)
            t0 = time.time()
            new = get_method(method.method).induce(ctx, LLMClient(llm, server.url))
            wall = time.time() - t0
            log = [json.loads(line) for line in (record / "transcript.jsonl").read_text().splitlines()]
            writes = [t for t in log if t.get("tool") == "write_function"]
            refused = collections.Counter(refusal_kind(t["observation"]) for t in writes
                                          if not t["observation"].startswith("Saved"))
            kept = sorted({f.name for f in new.functions if f.public} - {f.name for f in ctx.library.functions})
            rows.append({"setting": setting or "(config)", "seed": llm.seed, "requests": len(log),
                         "tools": dict(collections.Counter(t.get("tool") or "?" for t in log)),
                         "written": len(writes), "refused": sum(refused.values()), "kept": kept,
                         "why refused": dict(refused), "wall_s": round(wall, 1)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        server.stop()

print(f"\n{'setting':<34}{'seed':>6}{'requests':>9}{'written':>8}{'refused':>8}  {'kept (new public)':<28}{'wall s':>7}  why refused")
for r in rows:
    print(f"{r['setting']:<34}{r['seed']:>6}{r['requests']:>9}{r['written']:>8}{r['refused']:>8}  "
          f"{', '.join(r['kept']) or '-':<28}{r['wall_s']:>7}  {r['why refused']}")
