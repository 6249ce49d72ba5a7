"""Play every game once with the commands of `kvcache.replay` (the planner's by default) and record what it showed."""
import json
from pathlib import Path

from skillrepro.studies.kvcache import formats as F
from skillrepro.studies.kvcache.actor import format_benchmark
from skillrepro.studies.kvcache.replay import record_trajectories, write_trajectories
from skillrepro.pipeline import start_job

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
kv = job.settings.kv
tasks = json.loads(Path(snakemake.input.tasks).read_text())["tasks"]
templates = F.Templates(kv.templates_dir)
trajectories = record_trajectories(kv.trajectory_source, format_benchmark(job.settings.bench), tasks, kv.call_budget,
                                   lambda command: templates.fill("replay_reply", action=command))
write_trajectories(snakemake.output[0], trajectories)
for t in trajectories:
    log.info("%s: %d steps, success %s", t.task_id, len(t.turns), t.success)
