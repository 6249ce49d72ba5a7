"""Call-graph statistics of every library version of every run (SpeedRunner, table 1 and appendix H)."""
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from skillrepro.pipeline import setup_logging
from skillrepro.skills.callgraph import callgraph_table
from skillrepro.store import write_text

log = setup_logging(snakemake)
rows = []
for manifest in snakemake.input:
    root = Path(manifest).parent.parent  # results/runs/{bench}/{variant}/seed{seed}/library
    bench, variant, seed = root.parts[-4], root.parts[-3], int(root.parts[-2].removeprefix("seed"))
    rows += [{"benchmark": bench, "variant": variant, "seed": seed, **asdict(s)} for s in callgraph_table(root)]
table = pd.DataFrame(rows)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("%d library versions", len(table))
