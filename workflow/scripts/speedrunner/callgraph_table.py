"""Call-graph statistics of every declared library version of every run (table 1 and appendix H)."""
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.studies.speedrunner.paths import Run
from skillrepro.skills import Library
from skillrepro.skills.callgraph import stats
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
methods = job.settings.loop.methods  # variant -> its method
rows = []
for manifest in snakemake.input:
    run = Run.of(manifest)  # results/runs/{bench}/{variant}/seed{seed}/library/v{k}/manifest.json
    rows.append({"benchmark": run.bench, "method": methods[run.variant].method, "variant": run.variant,
                 "seed": run.seed, **asdict(stats(Library.load(Path(manifest).parent)))})
table = pd.DataFrame(rows)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("%d library versions", len(table))
