"""Draw the train and test task lists of one benchmark with the protocol's task seed."""
import json

from skillrepro.pipeline import setup_logging
from skillrepro.store import write_text

log = setup_logging(snakemake)
bench, proto = snakemake.params.bench, snakemake.params.protocol
benchmark = bench.load()
tasks = {
    "train": benchmark.sample_tasks("train", proto.train_rollouts, proto.task_seed),
    "test": benchmark.sample_tasks("test", proto.n_test, proto.task_seed),
}
assert not set(tasks["train"]) & set(tasks["test"]), "train and test tasks overlap"
log.info("%s: %d train, %d test tasks (task seed %d)", bench.name, len(tasks["train"]), len(tasks["test"]), proto.task_seed)
write_text(snakemake.output[0], json.dumps(tasks, indent=1))
