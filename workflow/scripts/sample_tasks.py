"""Draw one split's task list of one benchmark with the protocol's task seed."""
import json

from skillrepro import config as cfg
from skillrepro.pipeline import setup_logging
from skillrepro.store import write_text

log = setup_logging(snakemake)
w, p = snakemake.wildcards, snakemake.params
task_ids = cfg.benchmark(snakemake.config, w.bench).load().sample_tasks(w.split, p.n_tasks, p.task_seed)
log.info("%s: %d %s tasks (task seed %d)", w.bench, len(task_ids), w.split, p.task_seed)
write_text(snakemake.output[0], json.dumps(task_ids, indent=1))
