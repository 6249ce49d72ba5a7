"""Draw the train and test task lists of one benchmark, for each run seed of the protocol.

Most benchmarks give every run the same lists (drawn with the protocol's task seed); Crafter's runs each
draw their own worlds (appendix D.1). The file maps each run seed to its lists."""
import json

from skillrepro.pipeline import setup_logging
from skillrepro.store import write_text

log = setup_logging(snakemake)
p = snakemake.params
benchmark = p.bench.load()
runs = {}
for seed in p.seeds:
    task_seed = benchmark.run_task_seed(p.task_seed, seed)
    runs[str(seed)] = {
        "task_seed": task_seed,
        "train": benchmark.sample_tasks("train", p.n_train, task_seed),
        "test": benchmark.sample_tasks("test", p.n_test, task_seed),
    }
    assert not set(runs[str(seed)]["train"]) & set(runs[str(seed)]["test"]), "train and test tasks overlap"
    log.info("%s seed %d: %d train, %d test tasks (task seed %d)", p.bench.name, seed, p.n_train, p.n_test,
             task_seed)
write_text(snakemake.output[0], json.dumps(runs, indent=1))
