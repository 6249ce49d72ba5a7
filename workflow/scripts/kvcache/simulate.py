"""Replay one run's request stream: every (policy, capacity, concurrency), the per-step load, and the
simulator's prediction for the server that served it next to what the server reported."""
import dataclasses
import json
from pathlib import Path

import pandas as pd

from skillrepro.studies.kvcache import study
from skillrepro.pipeline import start_job
from skillrepro.store import write_table

job = start_job(snakemake)  # its log, and its typed settings checked against the rule's fingerprint
log = job.log
w, kv = snakemake.wildcards, job.settings.kv
stream = study.read_stream(snakemake.input.requests)
rows, steps = study.simulate_settings(stream, kv.settings(), kv.block_size, kv.max_num_seqs, kv.max_num_batched_tokens,
                                     kv.group_size, kv.draw_pool, kv.task_seed, kv.vllm_version)
tables = {
    "summary": rows,
    "steps": steps,
    "load": study.step_load(stream),
    "server": study.server_comparison(stream, snakemake.params.slots, kv.block_size),
    "counters": [study.counter_row(json.loads(Path(snakemake.input.counters).read_text()), rows, kv)],
}
for name, records in tables.items():
    df = pd.DataFrame([dataclasses.asdict(r) for r in records]).assign(model=w.kvmodel, format=w.kvfmt, seed=int(w.kvseed))
    write_table(snakemake.output[name], study.arrow(df))
for r in rows:
    log.info("%s %s seed %s %s", w.kvmodel, w.kvfmt, w.kvseed, r)
