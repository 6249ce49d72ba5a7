"""main.csv (final checkpoint per benchmark x method x variant, own test set) and checkpoints.csv (every
checkpoint on every test set the runs played)."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import tables
from skillrepro.pipeline import start_job
from skillrepro.store import write_text

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
per_seed = pd.read_parquet(snakemake.input.checkpoints)
main = tables.main_table(per_seed, study)
write_text(snakemake.output.main, main.to_csv(index=False))
write_text(snakemake.output.checkpoints, tables.checkpoint_table(per_seed).to_csv(index=False))
log.info("main table:\n%s", main.to_string(index=False))
