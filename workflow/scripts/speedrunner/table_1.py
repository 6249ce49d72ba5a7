"""Table 1: call-graph max depth and density of the final libraries, mean and s.d. over seeds."""
import pandas as pd

from skillrepro.studies.speedrunner.analysis import tables
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
table = tables.table1(pd.read_csv(snakemake.input[0]))
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("table 1:\n%s", table.to_string(index=False))
