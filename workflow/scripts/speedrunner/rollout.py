"""Training batch k: the next `sleep_every` training tasks, played with library v{k}."""
import json
from pathlib import Path

from skillrepro.agent import EpisodeSpec
from skillrepro.pipeline import start_job
from skillrepro.studies.speedrunner.paths import run_id, training_history
from skillrepro.studies.speedrunner.settings import run_settings
from skillrepro.runner import run_batch

job = start_job(snakemake)
log = job.log
w, p = snakemake.wildcards, snakemake.params
library_dir = Path(snakemake.input.library).parent
run = run_settings(job.settings, snakemake, library_dir)
k, n = int(w.k), p.sleep_every
task_ids = json.loads(Path(snakemake.input.tasks).read_text())[k * n : (k + 1) * n]
spec = EpisodeSpec(run_id(w.bench, w.variant, w.seed), w.bench, run.method.config.method, w.variant, int(w.seed), "train", k, k)
run_batch(bench=run.bench, llm=run.llm, library_dir=library_dir,
          task_ids=task_ids, spec=spec, out_dir=Path(snakemake.output.episodes).parent, wall_s=p.wall_s,
          method=run.method, history_dirs=training_history(library_dir, k), logger=log, sandbox=run.sandbox, prompts=run.prompts)
