"""Call-graph statistics of every declared library version of every run (table 1 and appendix H)."""
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from skillrepro.pipeline import start_job
from skillrepro.skills import Library
from skillrepro.skills.callgraph import stats
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
methods = job.settings.loop.methods  # variant -> its method
rows = []
for manifest in snakemake.input:
    folder = Path(manifest).parent  # results/runs/{bench}/{variant}/seed{seed}/library/v{k}
    bench, variant, seed = folder.parts[-5], folder.parts[-4], int(folder.parts[-3].removeprefix("seed"))
    rows.append({"benchmark": bench, "method": methods[variant].method, "variant": variant, "seed": seed,
                 **asdict(stats(Library.load(folder)))})
table = pd.DataFrame(rows)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("%d library versions", len(table))
