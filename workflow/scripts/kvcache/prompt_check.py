"""Seed 001, 2-0: do the harness's prompts equal the ones the actor sent? Every actor request of every (format,
seed) run of one model against the prompt the harness builds for the same game and step, from the run's
commands replayed in the game engine (the seminar: 1,259 of 1,259 equal, SkillRL's format, harness vs verl)."""
import dataclasses
import json
from pathlib import Path

import pandas as pd

from skillrepro.store import Episode, LLMCall, read_records, write_text
from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache import replay as R
from skillrepro.studies.kvcache.actor import format_benchmark
from skillrepro.pipeline import start_job
from skillrepro.progress import Progress

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv, p = job.settings.kv, snakemake.params
tasks = json.loads(Path(snakemake.input.tasks).read_text())["tasks"]
bench = format_benchmark(job.settings.bench)
bank, templates = F.load_bank(kv.bank), F.Templates(kv.templates_dir)
rows = []
# runs done of N on the console: each run's games are replayed in the engine
with Progress(len(p.runs), "(format, seed) runs checked") as progress:
    for fmt, seed, run_dir in p.runs:
        run_dir = Path(run_dir)
        episodes = read_records(run_dir / "episodes.parquet", Episode)
        of_task = {e.episode_id: e.task_id for e in episodes}
        calls = [c for c in read_records(run_dir / "llm_calls.parquet", LLMCall) if c.role == "actor"]
        trs = R.record_trajectories(str(run_dir), bench, sorted(set(of_task.values())), kv.call_budget,
                                    lambda command: templates.fill("replay_reply", action=command))
        row = R.prompt_check(calls, of_task, trs, fmt, bank, templates)
        rows.append(dict(format=fmt, seed=seed, **dataclasses.asdict(row)))
        log.info("%s seed %s: %d of %d prompts equal", fmt, seed, row.equal, row.compared)
        progress.update()
table = pd.DataFrame(rows, columns=["format", "seed", *R.PromptCheckRow.__dataclass_fields__])
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("harness vs actor:\n%s", table.to_string(index=False))
