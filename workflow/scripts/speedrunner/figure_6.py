"""Figure 6: both test sets over a distribution shift's whole training chain; retention.csv beside it."""
import pandas as pd

from skillrepro.studies.speedrunner import analysis
from skillrepro.studies.speedrunner.analysis import figures
from skillrepro.pipeline import start_job

job = start_job(snakemake)
log = job.log
study = analysis.study_of(job.settings.loop, snakemake.params.config_name)
figures.shift_figure(pd.read_csv(snakemake.input.checkpoints), pd.read_csv(snakemake.input.retention), study,
                      snakemake.output[0])
log.info("wrote %s", snakemake.output[0])
