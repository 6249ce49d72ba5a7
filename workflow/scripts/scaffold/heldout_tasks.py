"""SkillScaffold held-out evaluation: each held-out split's tasks (appendix A.1) and the empty library its
skill-free episodes use."""
import json

from skillrepro.pipeline import start_job
from skillrepro.skills import Library
from skillrepro.store import write_text
from skillrepro.studies.scaffold.rollouts import split_pool, split_tasks

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
p, w = snakemake.params, snakemake.wildcards
cfg = job.settings.scaffold
tasks = {split: split_tasks(job.settings.bench, cfg, split, n, p.task_seed, key=f"scaffold.heldout.splits.{w.hbench}.{split}")
         for split, n in cfg.heldout.of(w.hbench).items()}
# Held out means never trained on: no held-out task may be a training query (the pools are disjoint by
# construction, the benchmark's samplers or scaffold.splits' partitions; this checks the ids).
train = split_pool(job.settings.bench, cfg, cfg.split, "scaffold.split")
if train is not None:
    shared = sorted({t for ts in tasks.values() for t in ts} & set(train))
    if shared:
        raise ValueError(f"held-out tasks {shared[:3]} are in the training pool {cfg.split!r}")
Library(version=0, meta={"method": "skillscaffold", "purpose": "held-out, skill-free"}).write(
    snakemake.output.library.removesuffix("/manifest.json"))
write_text(snakemake.output.tasks, json.dumps(tasks))
for split, ts in tasks.items():
    log.info("%s %s: %d tasks", w.hbench, split, len(ts))
