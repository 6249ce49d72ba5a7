"""SkillScaffold internalization (table 4): the fixed cohort of a chain's iteration-0 queries that skill-assisted
exploration helped, played skill-free N times each by a later checkpoint."""
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from skillrepro.pipeline import setup_logging
from skillrepro.store import write_table
from skillrepro.studies import scaffold as ss
from skillrepro.studies import scaffold_grpo as sg

log = setup_logging(snakemake)
i, p, w = snakemake.input, snakemake.params, snakemake.wildcards
cohort = sg.benefit_cohort(pd.read_parquet(i.selection), pd.concat(pd.read_parquet(f) for f in i.post))
log.info("cohort of %d queries: %s", len(cohort), cohort)
out = Path(snakemake.output.episodes).parent
parts = [ss.play(bench=p.bench, llm=ss.phase_seed(p.llm, "eval", r), library_dir=Path(i.library).parent,
                 plan=[(t, "", "cohort/free") for t in cohort], run_id=f"scaffold/{w.sbench}/{w.svariant}/ckpt{w.k}",
                 cycle=int(w.k), out_dir=out / f"rollout{r}", wall_s=p.wall_s, logger=log, policy=p.policy)
         for r in range(p.rollouts)]
write_table(snakemake.output.episodes, pa.concat_tables([pq.read_table(d / "episodes.parquet") for d in parts]))
