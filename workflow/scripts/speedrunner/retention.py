"""Section 6.4: change in the first task's headline metric (points) and cost (%) after training on the second."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import tables
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
table = tables.retention(pd.read_parquet(snakemake.input[0]), study)
write_text(snakemake.output[0], table.to_csv(index=False))
log.info("retention:\n%s", table.to_string(index=False))
