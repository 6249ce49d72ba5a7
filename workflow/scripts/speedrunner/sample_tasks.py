"""Draw one split's task list of one benchmark for one run seed.

Most benchmarks give every run the protocol's task seed (the same lists); Crafter's runs each draw their
own worlds (appendix D.1), through `Benchmark.run_task_seed`."""
import json

from skillrepro.pipeline import start_job
from skillrepro.store import write_text
from skillrepro.benchmarks import load_benchmark

job = start_job(snakemake)
log = job.log
w, p = snakemake.wildcards, snakemake.params
benchmark = load_benchmark(job.settings.bench)
task_seed = benchmark.run_task_seed(p.task_seed, int(w.seed))
task_ids = benchmark.sample_tasks(w.split, p.n_tasks, task_seed)
log.info("%s seed %s: %d %s tasks (task seed %d)", w.bench, w.seed, len(task_ids), w.split, task_seed)
write_text(snakemake.output[0], json.dumps(task_ids, indent=1))
