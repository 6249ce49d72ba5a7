"""A distribution shift's extra test set: the test tasks of another benchmark instance (wildcard `target`)
played with this run's library v{k}. Episodes carry that instance's name as their benchmark."""
import json
from dataclasses import replace
from pathlib import Path

from skillrepro.agent import EpisodeSpec
from skillrepro.pipeline import start_job
from skillrepro.studies.speedrunner.paths import run_id
from skillrepro.studies.speedrunner.settings import run_settings
from skillrepro.runner import run_batch

job = start_job(snakemake)
log = job.log
w, p = snakemake.wildcards, snakemake.params
library_dir = Path(snakemake.input.library).parent
run = replace(run_settings(job.settings, snakemake, library_dir), bench=job.settings.loop.benchmarks[w.target])
task_ids = json.loads(Path(snakemake.input.tasks).read_text())
spec = EpisodeSpec(run_id(w.bench, w.variant, w.seed), w.target, run.method.config.method, w.variant, int(w.seed), "test", int(w.k), int(w.k))
run_batch(bench=run.bench, llm=run.llm, library_dir=library_dir, task_ids=task_ids, spec=spec,
          out_dir=Path(snakemake.output.episodes).parent, wall_s=p.wall_s, method=run.method, logger=log, sandbox=run.sandbox, prompts=run.prompts)
